"""The injection channel: env var, CDI annotation, and `auto`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from nodeagent.plugin.injection import (
    Channel,
    Injection,
    NodeFacts,
    Strategy,
    cdi_names,
    default_handler_is_vendor,
    inject,
    read_cdi_names,
    read_containerd_config,
    read_node_facts,
    resolves_cdi,
    strategy_from_env,
)

NAMES = ["nvidia.com/gpu=GPU-0", "nvidia.com/gpu=GPU-1"]
ENV = Injection({"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}, {})
CDI = Injection({}, {"cdi.k8s.io/gpustack-nvidia": ",".join(NAMES)})
CONTAINERD_2 = tomllib.loads(
    """
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
default_runtime_name = "runc"
"""
)
CONTAINERD_17 = tomllib.loads(
    """
version = 2
[plugins."io.containerd.grpc.v1.cri"]
enable_cdi = true
[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "nvidia"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
"""
)


NO_FACTS = NodeFacts()


def shown(strategy: Strategy, facts: NodeFacts = NO_FACTS, runtime_class: str = "") -> Injection:
    channel = Channel("nvidia", "nvidia", strategy, facts, runtime_class)
    return inject(channel, "NVIDIA_VISIBLE_DEVICES", ["GPU-0", "GPU-1"], NAMES)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", Strategy.ENVVAR),
        ("envvar", Strategy.ENVVAR),
        ("cdi-annotations", Strategy.CDI_ANNOTATIONS),
        ("auto", Strategy.AUTO),
        ("bogus", Strategy.ENVVAR),
    ],
)
def test_strategy_from_env(raw: str, expected: Strategy) -> None:
    env = {"GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY": raw}
    assert strategy_from_env(env, "nvidia") == expected


def test_envvar_is_the_default_channel() -> None:
    assert shown(Strategy.ENVVAR) == ENV


def test_cdi_annotations_trust_the_runtime_when_specs_are_unknown_or_empty() -> None:
    assert shown(Strategy.CDI_ANNOTATIONS) == CDI
    assert shown(Strategy.CDI_ANNOTATIONS, NodeFacts(None, frozenset())) == CDI
    assert shown(Strategy.CDI_ANNOTATIONS, NodeFacts(None, frozenset(NAMES))) == CDI


def test_cdi_annotations_refuse_a_name_no_spec_declares() -> None:
    with pytest.raises(ValueError, match="GPU-1"):
        shown(Strategy.CDI_ANNOTATIONS, NodeFacts(None, frozenset(NAMES[:1])))


def test_auto_takes_cdi_only_when_everything_agrees() -> None:
    ready = NodeFacts(CONTAINERD_2, frozenset(NAMES))
    assert shown(Strategy.AUTO, ready) == CDI
    assert shown(Strategy.AUTO, ready, runtime_class="nvidia") == ENV
    assert shown(Strategy.AUTO, NodeFacts(None, frozenset(NAMES))) == ENV
    assert shown(Strategy.AUTO, NodeFacts(CONTAINERD_2, None)) == ENV
    assert shown(Strategy.AUTO, NodeFacts(CONTAINERD_2, frozenset(NAMES[:1]))) == ENV
    assert shown(Strategy.AUTO, NodeFacts(CONTAINERD_17, frozenset(NAMES))) == ENV


def test_containerd_reading() -> None:
    assert resolves_cdi(CONTAINERD_2)
    assert resolves_cdi(CONTAINERD_17)
    assert not resolves_cdi({"version": 2})
    off = {"version": 3, "plugins": {"io.containerd.cri.v1.runtime": {"enable_cdi": False}}}
    assert not resolves_cdi(off)
    assert default_handler_is_vendor(CONTAINERD_17, "nvidia")
    assert not default_handler_is_vendor(CONTAINERD_2, "nvidia")
    assert not default_handler_is_vendor(CONTAINERD_17, "")


def test_cdi_names_of_documents() -> None:
    spec = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "GPU-0"}]}
    assert cdi_names([spec]) == frozenset({"nvidia.com/gpu=GPU-0"})
    assert cdi_names([{"kind": "nvidia.com/gpu"}]) is None
    assert cdi_names([]) == frozenset()


def test_read_cdi_names_later_directory_wins(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    etc.mkdir()
    run.mkdir()
    old = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "old"}]}
    new = {"cdiVersion": "0.6.0", "kind": "nvidia.com/gpu", "devices": [{"name": "new"}]}
    (etc / "nvidia.json").write_text(json.dumps(old))
    (run / "nvidia.json").write_text(json.dumps(new))
    (etc / "other.yaml").write_text("cdiVersion: 0.6.0\nkind: x.com/y\ndevices:\n- name: a\n")
    (etc / "notes.txt").write_text("ignored")
    assert read_cdi_names((str(etc), str(run), str(tmp_path / "missing"))) == frozenset(
        {"nvidia.com/gpu=new", "x.com/y=a"}
    )
    (run / "broken.yaml").write_text("kind: [")
    assert read_cdi_names((str(etc), str(run))) is None


def test_read_containerd_config(tmp_path: Path) -> None:
    assert read_containerd_config(str(tmp_path)) is None
    (tmp_path / "config.toml").write_text("version = 3\n")
    assert read_containerd_config(str(tmp_path)) == {"version": 3}
    facts = read_node_facts({"GPUSTACK_CONTAINERD_CONFIG_DIR": str(tmp_path)})
    assert facts.containerd_config == {"version": 3}
