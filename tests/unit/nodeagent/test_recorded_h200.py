"""The shipped `h200` profile against the real machine it was made from.

`recorded/h200-detect.json` is, unchanged, what `python -m nodeagent detect --manufacturer nvidia
-o json` printed on a real NVIDIA H200 (a Firecracker VM, driver 580.159.04, CUDA 13.0) during the
GPU proof on 2026-12-04 (testbed/gpu/prove.sh; docs/nodeagent.md, "On a real GPU"). Every field
the detector printed there agreed with nvidia-smi except the NUMA node: sysfs `numa_node` read -1
and the detector then published no `numaAffinity` and no `cpuAffinity`, while `nvidia-smi topo -m`
said NUMA 0, CPUs 0-15 (the VM has one NUMA node of 16 CPUs). Since the fix a card on no node of
a one-node host takes that node, so the simulator must print the recording plus those two fields;
anything else that differs is the simulator drifting from the real card.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from chain.devices import DevicesSpec
from chain.ledger import Mode
from tests.unit.nodeagent.helpers import nodeagent_command
from tests.unit.nodeagent.plugin.fakes import GPU, rig, t4_spec

RECORDED = Path(__file__).parent / "recorded" / "h200-detect.json"
NUMA_FIX = {"numaAffinity": "0", "cpuAffinity": "0-15"}
"""What the real machine's `nvidia-smi topo -m` said and the recording lacks."""


def _recorded_with_the_numa_fix() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = json.loads(RECORDED.read_text(encoding="utf-8"))
    fixed = copy.deepcopy(groups)
    (card,) = fixed[0]["accelerators"]
    assert not set(NUMA_FIX) & set(card["topology"]), "the recording predates the fix"
    card["topology"].update(NUMA_FIX)
    return fixed


def test_simulated_h200_detects_as_the_real_one() -> None:
    done = nodeagent_command("detect", "--simulate", "h200", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == _recorded_with_the_numa_fix()


def test_the_h200_card_gives_the_kubelet_its_numa_node() -> None:
    # The device plugin's TopologyInfo comes from numaAffinity: node 0, as topo -m says.
    spec = DevicesSpec(t4_spec("h200").groups)
    with rig(modes=(Mode.EXCLUSIVE,), spec=spec) as r:
        r.ready()
        assert list(r.kubelet.wait_endpoint(GPU).numa.values()) == [(0,)]
