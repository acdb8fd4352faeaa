"""InstanceType admission through the Flask app, with AdmissionReview v1 bodies."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from chain.settings import Settings
from hooks.catalog_file import CATALOG_ENV, catalog_settings, catalog_source
from hooks.instancetype.app import app
from hooks.instancetype.webhook import mutate

T4_SPEC = {
    "displayName": "Tesla-T4",
    "acceleratable": True,
    "acceleratorGroup": "nvidia-tesla-t4",
    "generalGroup": "generic",
    "os": "linux",
    "arch": "amd64",
    "unitResources": {"cpu": "8", "ram": "32Gi"},
    "localStorage": "100Gi",
}
CPU_SPEC = {
    "acceleratable": False,
    "os": "linux",
    "arch": "amd64",
    "unitResources": {"cpu": "1", "ram": "2Gi"},
    "localStorage": "100Gi",
}


def _type(name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": "7d2e1c4b-0000-4000-8000-000000000001"}
    if labels is not None:
        meta["labels"] = labels
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": meta,
        "spec": spec,
    }


def _review(operation: str, obj: Any, old: Any = None) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "kind": {"group": "worker.gpustack.ai", "version": "v1alpha1", "kind": "InstanceType"},
            "resource": {
                "group": "worker.gpustack.ai",
                "version": "v1alpha1",
                "resource": "instancetypes",
            },
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
        },
    }


def _post(path: str, body: Any) -> tuple[int, Any]:
    reply = app.test_client().post(path, data=json.dumps(body), content_type="application/json")
    return reply.status_code, reply.get_json(silent=True)


def _patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(response.get("patch", "W10="))):
        parts = op["path"].strip("/").split("/")
        target = out
        for part in parts[:-1]:
            target = target[part]
        target[parts[-1]] = op["value"]
    return out


def test_defaulting_stamps_schedule_labels_and_entrance() -> None:
    obj = _type(
        "gpustack--nvidia-tesla-t4-linux-amd64",
        T4_SPEC,
        {
            "schedule.gpustack.ai/derived-from-node": "true",
            "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        },
    )
    status, answer = _post("/mutate", _review("CREATE", obj))
    assert status == 200 and answer["response"]["allowed"]
    assert answer["response"]["uid"] == "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    labels = _patched(obj, answer["response"])["metadata"]["labels"]
    assert labels == {
        "schedule.gpustack.ai/derived-from-node": "true",
        "feature.gpustack.ai/acceleratable": "true",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-tesla-t4": "true",
        # docs/design/vectors.md, "LocalQueue names"
        "schedule.gpustack.ai/queue-entrance": "gpustack-fnv64-6b371caa2da0b799",
    }


def test_defaulting_fills_generic_general_group() -> None:
    obj = _type("gpustack--generic-linux-amd64", CPU_SPEC)
    _, answer = _post("/mutate", _review("CREATE", obj))
    patched = _patched(obj, answer["response"])
    assert patched["spec"]["generalGroup"] == "generic"
    assert patched["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"] == (
        "gpustack-fnv64-3b93966fd73eb9ec"
    )
    assert "general.feature.gpustack.ai/generic" not in patched["metadata"]["labels"]


CPU_KEY_LABEL = "general.feature.gpustack.ai/amd-epyc-7763"


@pytest.mark.parametrize("aware", [True, False])
def test_the_cpu_label_follows_the_aware_setting(aware: bool) -> None:
    """Upstream: the schedule labels follow `instance-type-aware-cpu-manufacturer`, not the
    type's `generalGroup` alone (off: the pool ignores the CPU, as derived types do)."""
    spec = {**T4_SPEC, "generalGroup": "amd-epyc-7763"}
    obj = _type("gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64", spec)
    settings = Settings(instance_type_aware_cpu_manufacturer=aware)
    answer = mutate(_review("CREATE", obj), settings)
    labels = _patched(obj, answer["response"])["metadata"]["labels"]
    assert (labels.get(CPU_KEY_LABEL) == "true") is aware


def test_the_webhook_reads_the_setting_from_the_catalog_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Deployment mounts the catalog ConfigMap (the settings singleton is in it)."""
    path = tmp_path / "catalog.yaml"
    singleton = {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "metadata": {"name": "default"},
        "spec": {"instance-type-aware-cpu-manufacturer": True},
    }
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [singleton]}))
    source = catalog_source(catalog_settings, Settings(), {CATALOG_ENV: str(path)})
    assert source().instance_type_aware_cpu_manufacturer
    assert not catalog_source(
        catalog_settings, Settings(), {}
    )().instance_type_aware_cpu_manufacturer


def test_no_patch_when_already_defaulted() -> None:
    obj = _type("gpustack--nvidia-tesla-t4-linux-amd64", T4_SPEC)
    _, first = _post("/mutate", _review("CREATE", obj))
    done = _patched(obj, first["response"])
    _, again = _post("/mutate", _review("UPDATE", done, done))
    assert "patch" not in again["response"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({**T4_SPEC, "acceleratorGroup": ""}, "spec.acceleratorGroup: required when acceleratable"),
        ({**T4_SPEC, "os": ""}, "spec.os: required"),
        ({**T4_SPEC, "unitResources": {"cpu": "8c", "ram": "32Gi"}}, "spec.unitResources.cpu"),
        ({**T4_SPEC, "unitResources": {"cpu": "0", "ram": "32Gi"}}, "positive whole number"),
        (
            {**CPU_SPEC, "unitResources": {"cpu": "2", "ram": "2Gi"}},
            "must be 1 when acceleratable is false",
        ),
        ({**T4_SPEC, "unitResources": {"cpu": "8", "ram": "32GI"}}, "spec.unitResources.ram"),
        ({**T4_SPEC, "unitResources": {"cpu": "8", "ram": "32G"}}, "spec.unitResources.ram"),
        ({**T4_SPEC, "localStorage": "100"}, "spec.localStorage"),
        ({**T4_SPEC, "unitResources": None}, "spec.unitResources.cpu"),
    ],
)
def test_create_is_validated(spec: dict[str, Any], message: str) -> None:
    _, answer = _post("/validate", _review("CREATE", _type("t", spec)))
    assert answer["response"]["allowed"] is False
    assert message in answer["response"]["status"]["message"]


def test_valid_creates_pass() -> None:
    for spec in (T4_SPEC, CPU_SPEC):
        _, answer = _post("/validate", _review("CREATE", _type("t", spec)))
        assert answer["response"]["allowed"] is True


def test_update_freezes_spec_except_display_name_and_inactive() -> None:
    old = _type("t", T4_SPEC)
    ok = _type("t", {**T4_SPEC, "displayName": "T4", "inactive": True})
    _, answer = _post("/validate", _review("UPDATE", ok, old))
    assert answer["response"]["allowed"] is True
    # The seeds freeze the description with the rest.
    described = _type("t", {**T4_SPEC, "description": "d"})
    _, answer = _post("/validate", _review("UPDATE", described, old))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["message"].startswith(
        "InstanceType spec is immutable except displayName and inactive; changed: spec.description."
    )
    bad = _type("t", {**T4_SPEC, "unitResources": {"cpu": "4", "ram": "16Gi"}})
    _, answer = _post("/validate", _review("UPDATE", bad, old))
    assert answer["response"]["allowed"] is False
    assert "changed: spec.unitResources" in answer["response"]["status"]["message"]


def test_update_does_not_recheck_create_shape_even_while_deleting() -> None:
    legacy = {**T4_SPEC, "unitResources": {"cpu": "8c", "ram": "32G"}}  # older rules allowed it
    old = _type("t", legacy)
    new = _type("t", {**legacy, "inactive": True})
    new["metadata"]["deletionTimestamp"] = "2026-11-30T06:00:00Z"
    _, answer = _post("/validate", _review("UPDATE", new, old))
    assert answer["response"]["allowed"] is True
    changed = _type("t", {**legacy, "os": "windows"})
    changed["metadata"]["deletionTimestamp"] = "2026-11-30T06:00:00Z"
    _, answer = _post("/validate", _review("UPDATE", changed, old))
    assert answer["response"]["allowed"] is False


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_malformed_reviews_are_400(path: str) -> None:
    status, answer = _post(path, {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"})
    assert status == 400 and answer["field"] == "$"
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"operation": "CREATE"},
    }
    status, answer = _post(path, body)
    assert status == 400 and answer["field"] == "$.request" and "uid" in answer["error"]
    reply = app.test_client().post(path, data=b"{truncated", content_type="application/json")
    assert reply.status_code == 400
