"""Cambricon slices: a cnDev sMLU instance per slice (profile reuse, naming, the marker's
fail-closed rules, undo), sMLU mode turned on with the remedy named, and the reclaimer."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.accelerators import Accelerator, DeviceTopology
from chain.devices import DevicesGroup
from nodeagent.detect.vendor import VendorError
from nodeagent.plugin.grants import GrantedCard, SimulatedNodes, SlicedLimits, SliceRequest
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.response import DeviceNode
from nodeagent.vendors.cambricon.grants import Cambricon, CambriconReclaimer, instance_name, pod_of
from nodeagent.vendors.cambricon.smlu import DrySmlu, SimulatedSmlu, SmluUnavailable

BDF = "0000:3d:00.0"
NODE = "/dev/cambricon-caps/cap_dev2_mi1"
NODES = SimulatedNodes({"/dev/cambricon_dev2": 2, "/dev/cambricon_ipcm2": 2, NODE: 1})


def mlu() -> GrantedCard:
    group = DevicesGroup(id="mlu370-x8", manufacturer="cambricon", name="MLU370", memory=49152)
    card = Accelerator("MLU-1", 0, physical_indexes=(2,), topology=DeviceTopology(pci_bus_id=BDF))
    return GrantedCard(group, card)


def request(pods: Path, pod: str, cores: int = 40, memory: int = 50) -> SliceRequest:
    limits = SlicedLimits(cores_percentage=cores, memory_percentage=memory)
    channel = Channel("cambricon", "cambricon")
    return SliceRequest(limits, pod, "main", channel, pods_dir=str(pods))


def cambricon(driver: SimulatedSmlu) -> Cambricon:
    return Cambricon(lambda: driver)


def test_a_slice_is_an_smlu_instance(tmp_path: Path) -> None:
    driver = SimulatedSmlu({BDF: 2})
    response = cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)
    name = instance_name("uid-a", "main")
    assert name.startswith("gpustack:uid-a:") and len(name.rsplit(":", 1)[1]) == 12
    assert pod_of(name) == "uid-a" and pod_of("someone-else") == ""
    assert response.envs == {"VIRTUAL_DEVICES": NODE}
    assert response.devices == tuple(
        DeviceNode(p, p) for p in ("/dev/cambricon_dev2", "/dev/cambricon_ipcm2", NODE)
    )
    assert BDF in driver.enabled
    [made] = driver.instances()
    assert (made.name, made.cores, made.memory_mib) == (name, 40, 24576)
    # Another slice of the same figures reuses the profile; a retry reuses its instance.
    cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-b"), NODES)
    assert driver.profiles(BDF) == [0] and len(driver.instances()) == 2
    cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)
    assert len(driver.instances()) == 2
    with pytest.raises(ValueError, match=r"mismatches request .* fail closed"):
        cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-a", 60), NODES)
    driver.destroy_instance(BDF, name)
    with pytest.raises(ValueError, match=r"references missing instance .* fail closed"):
        cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)


class Refusing(SimulatedSmlu):
    def mode_enabled(self, card: str) -> bool:
        raise VendorError("get smlu mode", 7)

    def enable(self, card: str) -> None:
        raise VendorError("set smlu mode", 13)


class Missing(SimulatedSmlu):
    def mode_enabled(self, card: str) -> bool:
        raise SmluUnavailable("get smlu mode: this cnDev library or driver has no sMLU API")


def test_smlu_mode_failures_name_the_card_and_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as refused:
        cambricon(Refusing({BDF: 2})).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)
    message = str(refused.value)
    assert f"card {BDF} (device index 2): enable sMLU mode" in message
    assert "the mode read failed too" in message
    assert "run `cnmon set -c 2 -smlu on`, confirming the ordinal with `cnmon`" in message
    with pytest.raises(ValueError, match=f"card {BDF} .device index 2. cannot be sliced"):
        cambricon(Missing({BDF: 2})).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)


def test_a_failed_marker_write_takes_back_the_instance_and_its_new_profile(
    tmp_path: Path,
) -> None:
    driver = SimulatedSmlu({BDF: 2})
    blocked = tmp_path / "uid-a" / "c-main"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the work dir should be")
    with pytest.raises(ValueError, match="reserve cambricon smlu instance"):
        cambricon(driver).sliced((mlu(),), request(tmp_path, "uid-a"), NODES)
    assert driver.instances() == [] and driver.profiles(BDF) == []


def test_one_slice_is_one_card(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="allocated 2 cards, but Cambricon sMLU slicing"):
        cambricon(SimulatedSmlu({BDF: 2})).sliced((mlu(), mlu()), request(tmp_path, "u"), NODES)


def test_the_reclaimer_destroys_gone_pods_instances_after_three_misses(tmp_path: Path) -> None:
    driver = SimulatedSmlu({BDF: 2})
    responder = cambricon(driver)
    for pod in ("uid-a", "uid-b"):
        responder.sliced((mlu(),), request(tmp_path, pod, 10, 10), NODES)
    reclaimer = CambriconReclaimer(responder, str(tmp_path))
    assert reclaimer.reconcile(frozenset({"uid-a"})) == []
    assert reclaimer.reconcile(frozenset({"uid-a"})) == []
    assert reclaimer.reconcile(frozenset({"uid-a"})) == [instance_name("uid-b", "main")]
    assert [i.name for i in driver.instances()] == [instance_name("uid-a", "main")]
    assert not (tmp_path / "uid-b").exists()  # its marker and empty directories went too
    # The last instance of a profile gone, the profile goes too.
    assert reclaimer.reconcile(frozenset()) == []
    for _ in range(2):
        reclaimer.reconcile(frozenset())
    assert driver.instances() == [] and driver.profiles(BDF) == []


def test_a_dry_driver_reads_the_host_and_changes_nothing(tmp_path: Path) -> None:
    host = SimulatedSmlu({BDF: 2})
    dry = DrySmlu(lambda: host)
    Cambricon(lambda: dry).sliced((mlu(),), request(tmp_path, "uid-p"), NODES)
    assert host.enabled == set() and host.instances() == []
    assert [i.name for i in dry.instances()] == [instance_name("uid-p", "main")]
