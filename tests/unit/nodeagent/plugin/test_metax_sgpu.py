"""MetaX slices: an `sgpu` subdevice per slice made through the card's sysfs, `METAX_SGPUS`,
the whole-card path, the markers' fail-closed rules, undo, and the reclaimer."""

from __future__ import annotations

from pathlib import Path

import pytest

from chain.accelerators import Accelerator, DeviceTopology
from chain.devices import DevicesGroup
from nodeagent.plugin.grants import GrantedCard, SimulatedNodes, SlicedLimits, SliceRequest
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.response import DeviceNode
from nodeagent.vendors.metax.grants import Metax, MetaxReclaimer, markers
from nodeagent.vendors.metax.sgpu import DrySgpu, SimulatedSgpu, SysfsSgpu

BDF = "0000:0e:00.0"
NODES = SimulatedNodes(
    {"/dev/mxcd": 0, "/dev/mxnd": 0, "/dev/dri/card1": 1, "/dev/dri/renderD128": 128}
)


def c500() -> GrantedCard:
    group = DevicesGroup(id="mxc500", manufacturer="metax", name="MXC500", memory=65536)
    card = Accelerator(
        "GPU-c500", 0, physical_indexes=(1, 128), topology=DeviceTopology(pci_bus_id=BDF)
    )
    return GrantedCard(group, card)


def request(pods: Path, pod: str, cores: int = 60, memory: int = 50) -> SliceRequest:
    limits = SlicedLimits(cores_percentage=cores, memory_percentage=memory)
    return SliceRequest(limits, pod, "main", Channel("metax", "metax"), pods_dir=str(pods))


def test_a_slice_is_an_sgpu_subdevice(tmp_path: Path) -> None:
    driver = SimulatedSgpu()
    response = Metax(driver).sliced((c500(),), request(tmp_path, "uid-a"), NODES)
    assert response.envs == {
        "METAX_SGPUS": f"sgpu={BDF}#0;compute=60;vram=32768;alias=gpustack-uid-a"
    }
    assert response.devices == (
        DeviceNode("/dev/mxcd", "/dev/mxcd"),
        DeviceNode("/dev/dri/renderD128", "/dev/dri/renderD128"),
    )
    assert BDF in driver.enabled and driver.cards[BDF] == {0: ("gpustack-uid-a", 32768)}
    second = Metax(driver).sliced((c500(),), request(tmp_path, "uid-b", 40, 25), NODES)
    assert "#1;compute=40;vram=16384;alias=gpustack-uid-b" in second.envs["METAX_SGPUS"]
    # A retry (a restarted agent too) reuses its subdevice; other figures fail closed.
    again = Metax(driver).sliced((c500(),), request(tmp_path, "uid-a"), NODES)
    assert again.envs == response.envs and len(driver.cards[BDF]) == 2
    with pytest.raises(ValueError, match=r"mismatches request .* fail closed"):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-a", 70), NODES)
    driver.destroy(BDF, 0)
    with pytest.raises(ValueError, match=f"missing sgpu subdevice {BDF}#0: fail closed"):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-a"), NODES)


def test_the_whole_card_takes_the_native_path(tmp_path: Path) -> None:
    driver = SimulatedSgpu()
    whole = Metax(driver).sliced((c500(),), request(tmp_path, "uid-w", 100, 100), NODES)
    assert whole.envs == {} and BDF not in driver.cards
    assert [(m.pod_uid, m.index) for m in markers(str(tmp_path))] == [("uid-w", -1)]
    with pytest.raises(ValueError, match=f"card {BDF} is held whole, cannot slice it"):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-x"), NODES)


def test_a_taken_card_cannot_be_taken_whole_and_the_pool_has_sixteen(tmp_path: Path) -> None:
    driver = SimulatedSgpu()
    for n in range(16):
        Metax(driver).sliced((c500(),), request(tmp_path, f"uid-{n}", 5, 5), NODES)
    with pytest.raises(ValueError, match=r"card sgpu pool exhausted \(16 subdevices\)"):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-16", 5, 5), NODES)
    with pytest.raises(ValueError, match="already occupied, cannot take it whole"):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-w", 100, 100), NODES)


def test_one_slice_is_one_card(tmp_path: Path) -> None:
    two = (c500(), c500())
    with pytest.raises(ValueError, match="allocated 2 cards, but MetaX sgpu slicing is single"):
        Metax(SimulatedSgpu()).sliced(two, request(tmp_path, "uid-a"), NODES)


def test_a_failed_marker_write_destroys_the_subdevice(tmp_path: Path) -> None:
    driver = SimulatedSgpu()
    blocked = tmp_path / "uid-a" / "c-main"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where the work dir should be")
    with pytest.raises(OSError):
        Metax(driver).sliced((c500(),), request(tmp_path, "uid-a"), NODES)
    assert driver.cards[BDF] == {}


def test_the_reclaimer_destroys_subdevices_of_gone_pods_after_a_grace(tmp_path: Path) -> None:
    driver = SimulatedSgpu()
    for pod in ("uid-a", "uid-b"):
        Metax(driver).sliced((c500(),), request(tmp_path, pod, 10, 10), NODES)
    clock = [0.0]
    reclaimer = MetaxReclaimer(driver, lambda: [BDF], grace_s=30.0, clock=lambda: clock[0])
    assert reclaimer.reconcile(frozenset({"uid-a"})) == []  # uid-b just looks orphaned
    clock[0] = 31.0
    assert reclaimer.reconcile(frozenset({"uid-a"})) == [(BDF, 1)]
    assert driver.subdevices(BDF) == {0: "gpustack-uid-a"}


def test_the_sysfs_driver_writes_what_the_metax_driver_reads(tmp_path: Path) -> None:
    card = tmp_path / "sys/bus/pci/devices" / BDF
    (card / "sgpu/sgpu0").mkdir(parents=True)  # what the driver makes on `create`
    sysfs = SysfsSgpu(str(tmp_path))
    sysfs.enable(BDF)
    sysfs.create(BDF, 0, 32768, "gpustack-uid-a")
    assert (card / "model").read_text() == "sgpu\n"
    assert (card / "sgpu/sched_class").read_text() == "1\n"
    assert (card / "sgpu/create").read_text() == "32768\n"
    assert sysfs.subdevices(BDF) == {0: "gpustack-uid-a"}
    sysfs.destroy(BDF, 0)
    assert (card / "sgpu/destroy").read_text() == "0\n"


def test_a_dry_driver_reads_the_host_and_makes_nothing(tmp_path: Path) -> None:
    host = SimulatedSgpu()
    host.enable(BDF)
    host.create(BDF, 0, 1024, "gpustack-someone")
    dry = DrySgpu(host)
    Metax(dry).sliced((c500(),), request(tmp_path, "uid-p"), NODES)
    assert host.subdevices(BDF) == {0: "gpustack-someone"}
    assert dry.subdevices(BDF) == {0: "gpustack-someone", 1: "gpustack-uid-p"}
