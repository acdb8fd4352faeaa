"""KV cache injection: what the webhook makes of a Pod that asks to use a KV cache pool.

A Pod labelled `kvcache.gpustack.ai/inject: "true"` names a `KVCachePool` (annotation
`kvcache.gpustack.ai/pool`) and its engine (`kvcache.gpustack.ai/engine`: `vllm` or `sglang`);
the webhook appends the engine's connector arguments to the engine container and writes the
client configuration it reads, and records what it did (`kvcache.gpustack.ai/injected`).

This module is pure: `launch` reads the container's command line, `transport` applies the pool
rule, `render` builds the injection. Facts kept from the seeds and upstream:

- the transparent launchers removed first (`env` with its options and `NAME=value` operands,
  `tini`, `dumb-init`, `busybox`/`toybox`, `timeout` with its duration), then only the declared
  engine's entry point is accepted: `vllm` for vLLM, `python3 -m sglang.launch_server` for
  SGLang; an unrecognised launcher, launch form, script or another engine's entry point is
  refused;
- `kvcache.gpustack.ai/launch-args-forwarded: "true"` declares that an unrecognised launcher, a
  script, a command line hidden in one argument, or the image's own ENTRYPOINT forwards appended
  arguments to the engine; it never exempts a shell's command mode (`sh -c`): the appended
  arguments would become the shell's positional parameters;
- the record carries `launchProgram` (the executable left once the launchers are removed) and
  `launchArgsForwarded` (true only when the declaration is what admitted the launch);
- neither engine declares a required transport, so a pool whose member groups offer two or more
  transports is refused: the engine is configured with one and reads a block from any group.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX = "kvcache.gpustack.ai/"
INJECT_LABEL = PREFIX + "inject"
POOL_ANNOTATION = PREFIX + "pool"
ENGINE_ANNOTATION = PREFIX + "engine"
ROLE_ANNOTATION = PREFIX + "role"
CONTAINER_ANNOTATION = PREFIX + "container"
FORWARDED_ANNOTATION = PREFIX + "launch-args-forwarded"
INJECTED_ANNOTATION = PREFIX + "injected"
CLIENT_CONFIG_ANNOTATION = PREFIX + "client-config"
ENGINES = ("vllm", "sglang")
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh"})
WRAPPER_NAMES = frozenset({"entrypoint", "run"})
CONFIG_DIR = "/etc/gpustack/kvcache"
CONFIG_FILE = "mooncake.json"
CONFIG_VOLUME = "gpustack-kvcache-config"
LOCAL_BUFFER_BYTES = 128 * 2**20
ROLES = {"": "kv_both", "prefill": "kv_producer", "decode": "kv_consumer"}
KVCACHE_POOL = "KVCachePool"
KVCACHE_POOL_RESOURCE = "kvcachepools"
KVCACHE_CATALOG_CONFIGMAP = "gpustack-kvcache-catalog"
KVCACHE_CATALOG_KEY = "pools.json"

Obj = dict[str, Any]


@dataclass(frozen=True)
class Launcher:
    """A transparent launcher: its short options and long options that take the next token,
    and how many positional operands precede the command it runs."""

    short: str = ""
    long: frozenset[str] = frozenset()
    operands: int = 0
    assignments: bool = False
    """`NAME=value` tokens are its own (env)."""
    hiding: frozenset[str] = frozenset()
    """Options whose value is a whole command line in one token (env -S)."""


LAUNCHERS: Mapping[str, Launcher] = {
    "env": Launcher(
        "uCa",
        frozenset({"--unset", "--chdir", "--argv0"}),
        assignments=True,
        hiding=frozenset({"-S", "--split-string"}),
    ),
    "tini": Launcher("pe"),
    "dumb-init": Launcher("r", frozenset({"--rewrite"})),
    "busybox": Launcher(),
    "toybox": Launcher(),
    "timeout": Launcher("sk", frozenset({"--signal", "--kill-after"}), operands=1),
}


class Refused(ValueError):
    """The Pod cannot be injected; the message says what to change."""


@dataclass(frozen=True)
class Launch:
    program: str
    """The executable left once the launchers are removed ("" when it cannot be read)."""
    forwarded: bool
    """The author's declaration is what admitted the launch."""


def _strip(argv: list[str], name: str) -> list[str] | None:
    """`argv` without its leading launcher; None when the launcher hides the command line in
    one argument."""
    rules = LAUNCHERS[posixpath.basename(argv[0])]
    rest = argv[1:]
    while rest:
        token = rest[0]
        if token == "--":
            rest = rest[1:]
            break
        if token in rules.hiding or any(token.startswith(h + "=") for h in rules.hiding):
            return None
        if rules.assignments and "=" in token and not token.startswith("-"):
            rest = rest[1:]
            continue
        if token.startswith("--"):
            takes = token in rules.long
            rest = rest[2:] if takes else rest[1:]
            continue
        if token.startswith("-") and len(token) > 1:
            letters = token[1:]
            taking = next((i for i, c in enumerate(letters) if c in rules.short), None)
            rest = rest[2:] if taking is not None and taking == len(letters) - 1 else rest[1:]
            continue
        break
    return rest[rules.operands :]


def _shell_command_mode(argv: list[str]) -> bool:
    """A shell run with `-c` (alone or in a bundle, `-lc`, `-euc`) before its first operand."""
    for token in argv[1:]:
        if token == "--" or not token.startswith("-"):
            return False
        if not token.startswith("--") and "c" in token[1:]:
            return True
    return False


def launch(container: Mapping[str, Any], engine: str, forwarded: bool) -> Launch:
    """What the container runs, checked against the declared engine (see the module doc);
    Refused with the message a Pod author acts on."""
    name = str(container.get("name", ""))
    command = [str(t) for t in container.get("command") or []]
    args = [str(t) for t in container.get("args") or []]
    if not command:
        if forwarded:
            return Launch("", True)
        what = "args without a command" if args else "neither command nor args"
        raise Refused(
            f"container {name!r} declares {what}, so it runs the image's own ENTRYPOINT, which "
            "admission cannot read. Put the engine's executable in command and its arguments "
            f'in args, or set {FORWARDED_ANNOTATION}: "true" if that ENTRYPOINT forwards '
            "appended arguments to the engine"
        )
    argv = command + args
    while argv and posixpath.basename(argv[0]) in LAUNCHERS:
        stripped = _strip(argv, name)
        if stripped is None:
            if forwarded:
                return Launch("", True)
            raise Refused(
                f"container {name!r} hides its command line inside a single argument, so this "
                "webhook cannot tell what would run or whether appending to args would reach it. "
                "Launch the engine directly, or set "
                f'{FORWARDED_ANNOTATION}: "true" if that command line forwards them'
            )
        argv = stripped
    if not argv:
        raise Refused(
            f"container {name!r} runs a launcher with nothing after it; put the engine's "
            "executable after the launcher"
        )
    program = argv[0]
    base = posixpath.basename(program)
    if base in SHELLS and _shell_command_mode(argv):
        raise Refused(
            f"container {name!r} runs {program!r} through a shell's -c, and anything this "
            "webhook appends to args would become the shell's positional parameters ($0, $1) "
            "rather than reaching the engine. Launch the engine directly: put its executable in "
            "command and its arguments in args"
        )
    entry = _entry_point(argv)
    if entry == engine:
        return Launch(program, False)
    if entry is not None:
        raise Refused(
            f"container {name!r} launches {entry}, but the Pod declares {ENGINE_ANNOTATION}: "
            f"{engine!r}; declare the engine it runs"
        )
    if forwarded:
        return Launch(program, True)
    kind = "the script" if base.endswith(".sh") or base in WRAPPER_NAMES else "the program"
    raise Refused(
        f"container {name!r} runs {kind} {program!r}, which is not the {engine} entry point "
        f"({_ENTRY_POINTS[engine]}); whether what this webhook appends reaches the engine "
        f"cannot be read at admission. Launch the engine directly, or set {FORWARDED_ANNOTATION}: "
        '"true" if it forwards appended arguments to the engine'
    )


_ENTRY_POINTS = {"vllm": "vllm", "sglang": "python3 -m sglang.launch_server"}


def _entry_point(argv: Sequence[str]) -> str | None:
    base = posixpath.basename(argv[0])
    if base == "vllm":
        return "vllm"
    if base in ("python3", "python") and list(argv[1:3]) == ["-m", "sglang.launch_server"]:
        return "sglang"
    return None


def transport(engine: str, offers: Sequence[str]) -> str:
    """The transport the engine is configured with: the pool's one transport; Refused when the
    member groups offer several (neither engine declares a required one)."""
    unique = list(dict.fromkeys(offer for offer in offers if offer))
    if len(unique) >= 2:
        raise Refused(
            f"engine {engine!r} declares no required transport and this pool offers "
            f"{unique}. The engine can be configured with only one transport and would fail "
            "reading a block from a group using another. Give every member group of the pool "
            "one common transport, or use a pool with one"
        )
    if not unique:
        raise Refused("the pool names no transport for its member groups")
    return unique[0]


@dataclass(frozen=True)
class KvCachePoolFacts:
    """What the webhook reads of a KVCachePool (from its catalog)."""

    name: str
    endpoint: str
    transports: tuple[str, ...]


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(t == flag or t.startswith(flag + "=") for t in argv)


def render(
    container: Mapping[str, Any], engine: str, role: str, pool: KvCachePoolFacts, protocol: str
) -> tuple[list[str], list[Obj], Obj | None, Obj | None, Obj]:
    """(args to append, env to add, volume, mount, annotations) for the engine container."""
    argv = [str(t) for t in (container.get("command") or []) + (container.get("args") or [])]
    declared = {str(e.get("name")) for e in container.get("env") or [] if isinstance(e, dict)}
    name = str(container.get("name", ""))
    metrics = [
        {"name": key, "value": "1"}
        for key in ("MC_TE_METRIC", "MC_STORE_CLIENT_METRIC_BANDWIDTH")
        if key not in declared
    ]
    if engine == "vllm":
        if role not in ROLES:
            raise Refused(f"{ROLE_ANNOTATION}: {role!r} is not a role; use prefill or decode")
        for owned, flag in (("MOONCAKE_CONFIG_PATH", None), (None, "--kv-transfer-config")):
            if (owned and owned in declared) or (flag and _has_flag(argv, flag)):
                raise Refused(
                    f"container {name!r} already sets {owned or flag}, which this webhook "
                    "writes; remove it"
                )
        connector = {"kv_connector": "MooncakeStoreConnector", "kv_role": ROLES[role]}
        config = {
            "metadata_server": "P2PHANDSHAKE",
            "master_server_address": pool.endpoint,
            "protocol": protocol,
            "device_name": "",
            "mode": "standalone-store",
            "global_segment_size": 0,
            "local_buffer_size": LOCAL_BUFFER_BYTES,
        }
        env: list[Obj] = [
            {"name": "MOONCAKE_CONFIG_PATH", "value": f"{CONFIG_DIR}/{CONFIG_FILE}"},
            *metrics,
        ]
        field = f"metadata.annotations['{CLIENT_CONFIG_ANNOTATION}']"
        volume = {
            "name": CONFIG_VOLUME,
            "downwardAPI": {"items": [{"path": CONFIG_FILE, "fieldRef": {"fieldPath": field}}]},
        }
        mount = {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR, "readOnly": True}
        annotations = {CLIENT_CONFIG_ANNOTATION: json.dumps(config, separators=(",", ":"))}
        return ["--kv-transfer-config", json.dumps(connector)], env, volume, mount, annotations
    if role:
        raise Refused(f"{ROLE_ANNOTATION}: SGLang takes no role; remove the annotation")
    if _has_flag(argv, "--hicache-storage-backend"):
        raise Refused(
            f"container {name!r} already passes --hicache-storage-backend, which this webhook "
            "writes; remove it"
        )
    args = ["--hicache-storage-backend", "mooncake"]
    if "--enable-hierarchical-cache" not in argv:
        args.append("--enable-hierarchical-cache")
    store: list[Obj] = [
        {"name": "MOONCAKE_MASTER", "value": pool.endpoint},
        {"name": "MOONCAKE_TE_META_DATA_SERVER", "value": "P2PHANDSHAKE"},
        {"name": "MOONCAKE_PROTOCOL", "value": protocol},
        {"name": "MOONCAKE_DEVICE", "value": ""},
        {"name": "MOONCAKE_GLOBAL_SEGMENT_SIZE", "value": "0"},
        {
            "name": "MOONCAKE_LOCAL_HOSTNAME",
            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
        },
        *metrics,
    ]
    return args, store, None, None, {}


def record(pool: str, engine: str, launched: Launch) -> str:
    """The `kvcache.gpustack.ai/injected` annotation: what was injected and what admitted it."""
    vehicle = "file" if engine == "vllm" else "environment"
    return json.dumps(
        {
            "pool": pool,
            "engine": engine,
            "vehicle": vehicle,
            "launchProgram": launched.program,
            "launchArgsForwarded": launched.forwarded,
        },
        separators=(",", ":"),
    )


def pool_facts(obj: Mapping[str, Any]) -> KvCachePoolFacts:
    """A KVCachePool's name, client endpoint and member groups' transports."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    groups = spec.get("groups") or []
    return KvCachePoolFacts(
        name=str(meta.get("name", "")),
        endpoint=str(spec.get("endpoint") or ""),
        transports=tuple(
            str(g.get("transport") or "tcp") for g in groups if isinstance(g, Mapping)
        ),
    )


def kvcache_catalog(pools: Sequence[Mapping[str, Any]]) -> Obj:
    """The KV cache catalog's document: each pool's endpoint and transports, by name."""
    rows = {f.name: [f.endpoint, list(f.transports)] for f in map(pool_facts, pools)}
    return {"pools": dict(sorted(rows.items()))}


def parse_kvcache_catalog(document: object) -> dict[str, KvCachePoolFacts]:
    pools = document.get("pools") if isinstance(document, Mapping) else None
    if not isinstance(pools, Mapping):
        raise ValueError("the KV cache catalog must be an object with a map of pools")
    found: dict[str, KvCachePoolFacts] = {}
    for name, row in pools.items():
        if isinstance(row, list) and len(row) == 2 and isinstance(row[1], list):
            found[str(name)] = KvCachePoolFacts(str(name), str(row[0]), tuple(map(str, row[1])))
    return found
