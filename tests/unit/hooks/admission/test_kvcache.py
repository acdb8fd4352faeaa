"""The KV cache injection webhook: the launch forms it accepts (launchers removed, the declared
engine's entry point), the ones it refuses (shells' -c, scripts and unknown programs unless the
author declares forwarding, another engine's entry point), what it injects per engine, the
record, and the transport rule."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from chain.kvcache import (
    KvCachePoolFacts,
    Refused,
    kvcache_catalog,
    launch,
    parse_kvcache_catalog,
    transport,
)
from hooks.admission.app import create_app
from hooks.admission.pool_catalog import Catalog
from tests.unit.hooks.admission.helpers import TABLE, post, review

POOLS = {
    "chat": KvCachePoolFacts("chat", "10.0.0.5:50051", ("rdma", "rdma")),
    "mixed": KvCachePoolFacts("mixed", "10.0.0.6:50051", ("tcp", "rdma")),
}


def pod(
    command: list[str] | None,
    args: list[str] | None = None,
    engine: str = "vllm",
    pool: str = "chat",
    **extra: str,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "engine", "image": "vllm/vllm-openai"}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    annotations = {"kvcache.gpustack.ai/pool": pool, "kvcache.gpustack.ai/engine": engine}
    annotations |= {f"kvcache.gpustack.ai/{k.replace('_', '-')}": v for k, v in extra.items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "chat",
            "namespace": "team-a",
            "labels": {"kvcache.gpustack.ai/inject": "true"},
            "annotations": annotations,
        },
        "spec": {"containers": [container]},
    }


def answer(obj: dict[str, Any]) -> dict[str, Any]:
    web = create_app(lambda: Catalog(), TABLE, kvcache=lambda: POOLS).test_client()
    status, body = post(web, "/mutate-kvcache", review(obj))
    assert status == 200, body
    response: dict[str, Any] = body["response"]
    return response


def patched(obj: dict[str, Any]) -> dict[str, Any]:
    response = answer(obj)
    assert response["allowed"], response
    out = json.loads(json.dumps(obj))
    for op in json.loads(base64.b64decode(response["patch"])):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].strip("/").split("/")]
        target: Any = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if parts[-1] == "-":
            target.append(op["value"])
        else:
            target[parts[-1]] = op["value"]
    return out


def refused(obj: dict[str, Any]) -> str:
    response = answer(obj)
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


def test_vllm_gets_the_mooncake_connector_and_its_client_config() -> None:
    out = patched(pod(["vllm"], ["serve", "Qwen/Qwen3-8B"], role="prefill"))
    (engine,) = out["spec"]["containers"]
    assert engine["args"][-2:] == [
        "--kv-transfer-config",
        '{"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_producer"}',
    ]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert env["MOONCAKE_CONFIG_PATH"] == "/etc/gpustack/kvcache/mooncake.json"
    assert env["MC_TE_METRIC"] == "1"
    assert engine["volumeMounts"] == [
        {"name": "gpustack-kvcache-config", "mountPath": "/etc/gpustack/kvcache", "readOnly": True}
    ]
    notes = out["metadata"]["annotations"]
    config = json.loads(notes["kvcache.gpustack.ai/client-config"])
    assert (config["master_server_address"], config["protocol"]) == ("10.0.0.5:50051", "rdma")
    assert json.loads(notes["kvcache.gpustack.ai/injected"]) == {
        "pool": "chat",
        "engine": "vllm",
        "vehicle": "file",
        "launchProgram": "vllm",
        "launchArgsForwarded": False,
    }


def test_sglang_gets_its_backend_flags_and_environment() -> None:
    out = patched(
        pod(["tini", "--", "python3", "-m", "sglang.launch_server"], ["--model", "m"], "sglang")
    )
    (engine,) = out["spec"]["containers"]
    assert engine["args"][-3:] == [
        "--hicache-storage-backend",
        "mooncake",
        "--enable-hierarchical-cache",
    ]
    env = {e["name"]: e.get("value") for e in engine["env"]}
    assert (env["MOONCAKE_MASTER"], env["MOONCAKE_PROTOCOL"]) == ("10.0.0.5:50051", "rdma")
    record = json.loads(out["metadata"]["annotations"]["kvcache.gpustack.ai/injected"])
    assert (record["launchProgram"], record["vehicle"]) == ("python3", "environment")


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["env", "-u", "HOME", "A=1", "vllm"], "vllm"),
        (["dumb-init", "--rewrite", "15:2", "--", "vllm"], "vllm"),
        (["timeout", "-s", "TERM", "3600", "/usr/local/bin/vllm"], "/usr/local/bin/vllm"),
        (["busybox", "env", "tini", "-p", "SIGTERM", "--", "vllm"], "vllm"),
    ],
)
def test_transparent_launchers_are_removed(command: list[str], program: str) -> None:
    container = {"name": "e", "command": command, "args": ["serve", "m"]}
    assert launch(container, "vllm", False).program == program


def test_a_shell_command_mode_is_refused_even_when_forwarding_is_declared() -> None:
    for command in (["sh", "-c", "vllm serve m"], ["bash", "-euc", "vllm serve m"]):
        message = refused(pod(command, launch_args_forwarded="true"))
        assert "through a shell's -c" in message and "positional parameters" in message


def test_scripts_unknown_programs_and_the_image_entrypoint_need_the_declaration() -> None:
    assert "runs the script './run.sh'" in refused(pod(["./run.sh"]))
    assert "runs the program 'serve-model'" in refused(pod(["serve-model"]))
    assert "runs the image's own ENTRYPOINT" in refused(pod(None, ["serve", "m"]))
    assert "hides its command line" in refused(pod(["env", "-S", "vllm serve m"]))
    forwarded = patched(pod(["./run.sh"], launch_args_forwarded="true"))
    record = forwarded["metadata"]["annotations"]["kvcache.gpustack.ai/injected"]
    assert json.loads(record)["launchArgsForwarded"] is True
    entrypoint = patched(pod(None, ["serve", "m"], launch_args_forwarded="true"))
    record = entrypoint["metadata"]["annotations"]["kvcache.gpustack.ai/injected"]
    assert (json.loads(record)["launchProgram"], json.loads(record)["launchArgsForwarded"]) == (
        "",
        True,
    )


def test_another_engines_entry_point_is_refused() -> None:
    message = refused(pod(["vllm"], ["serve", "m"], engine="sglang"))
    assert "launches vllm, but the Pod declares kvcache.gpustack.ai/engine: 'sglang'" in message


def test_a_pool_offering_two_transports_is_refused_for_an_engine_requiring_none() -> None:
    message = refused(pod(["vllm"], ["serve", "m"], pool="mixed"))
    assert "declares no required transport and this pool offers ['tcp', 'rdma']" in message
    with pytest.raises(Refused):
        transport("sglang", ["tcp", "rdma"])
    assert transport("vllm", ["rdma", "rdma", ""]) == "rdma"


def test_refusals_name_what_to_change() -> None:
    assert "must name the engine" in refused(pod(["vllm"], engine="trt"))
    assert "already sets --kv-transfer-config" in refused(
        pod(["vllm"], ["serve", "m", "--kv-transfer-config={}"])
    )
    unknown = answer(pod(["vllm"], pool="nowhere"))
    assert (
        unknown["status"]["code"] == 503
        and "not known to the webhook yet" in (unknown["status"]["message"])
    )
    written = pod(["vllm"])
    written["metadata"]["annotations"]["kvcache.gpustack.ai/injected"] = "{}"
    assert "is written by this webhook" in refused(written)


def test_a_pod_without_the_label_is_left_alone() -> None:
    plain = pod(["sh", "-c", "anything"])
    plain["metadata"]["labels"] = {}
    response = answer(plain)
    assert response["allowed"] and "patch" not in response


def test_the_catalog_round_trips() -> None:
    pools = [
        {
            "metadata": {"name": "chat"},
            "spec": {"endpoint": "10.0.0.5:50051", "groups": [{"name": "a", "transport": "rdma"}]},
        }
    ]
    assert parse_kvcache_catalog(kvcache_catalog(pools)) == {
        "chat": KvCachePoolFacts("chat", "10.0.0.5:50051", ("rdma",))
    }
