"""The eight non-NVIDIA container responses, against literal answers taken from the seed and
docs/design/node-agent.md, "Manufacturers" and "Device-plugin resources" (and, through `Allocator`,
the whole Allocate path for one of them)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chain.accelerators import Accelerator, DeviceTopology
from chain.allocation import Code, Refusal
from chain.devices import DevicesGroup, DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from chain.manufacturers import manufacturers
from nodeagent.detect.vendor import FUNCTION_NOT_FOUND, VendorError
from nodeagent.plugin.allocator import Allocator, Attempt
from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    GrantedCard,
    SimulatedNodes,
    SlicedLimits,
    SliceRequest,
    VendorResponder,
)
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.responders import RESPONDERS, responder_for
from nodeagent.plugin.response import ContainerResponse, DeviceNode, Mount
from nodeagent.plugin.server import plugin_servers
from nodeagent.vendors.amd.grants import Amd
from nodeagent.vendors.ascend.dcmi import API_V1, API_V2
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.cambricon.grants import Cambricon
from nodeagent.vendors.hygon.grants import Hygon
from nodeagent.vendors.iluvatar.grants import Iluvatar
from nodeagent.vendors.metax.grants import Metax
from nodeagent.vendors.mthreads.grants import MThreads
from nodeagent.vendors.thead.grants import Thead
from tests.unit.nodeagent.plugin.fakes import FakeCluster

LIB = "/var/lib/gpustack/operator/lib"
NO_NODES = SimulatedNodes({})


def cards(
    manufacturer: str,
    *physical: tuple[int, ...] | None,
    memory: int = 65536,
    family: str = "",
    runtime: str = "",
) -> Cards:
    """One card per `physical` entry, with ids `<mfr>-<index>` and those physical indexes."""
    group = DevicesGroup(
        id="model",
        manufacturer=manufacturer,
        name="Model X",
        memory=memory,
        family=family,
        runtime_version=runtime,
    )
    return tuple(
        GrantedCard(
            group, Accelerator(id=f"{manufacturer}-{index}", index=index, physical_indexes=p)
        )
        for index, p in enumerate(physical)
    )


def rw(*paths: str) -> tuple[DeviceNode, ...]:
    return tuple(DeviceNode(path, path) for path in paths)


def request(
    cores: int = 0,
    memory_percentage: int = 25,
    declared: frozenset[str] = frozenset(),
    runtime_class: str = "",
    runtime_name: str = "",
    pods_dir: str = "/var/lib/gpustack/operator/pods",
) -> SliceRequest:
    channel = Channel("x", runtime_name, pod_runtime_class=runtime_class)
    limits = SlicedLimits(cores_percentage=cores, memory_percentage=memory_percentage)
    return SliceRequest(limits, "uid-1", "main", channel, declared, pods_dir)


ENVVAR = Channel("x", "")
WORK = "/var/lib/gpustack/operator/pods/uid-1/c-main"


# --- What each manufacturer serves -------------------------------------------------------------


def test_every_manufacturer_has_a_responder_with_slice_isolation() -> None:
    assert set(RESPONDERS) == set(manufacturers({}))
    assert {name for name, responder in RESPONDERS.items() if responder.slices} == set(
        manufacturers({})
    )
    assert responder_for("intel") is None


class ShowOnly(VendorResponder):
    """A responder whose manufacturer's slice isolation is not built."""

    manufacturer = "cambricon"

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        return ContainerResponse()


def test_a_manufacturer_that_does_not_slice_registers_no_sliced_server(tmp_path: Path) -> None:
    table = manufacturers({})
    node = NodeState(lambda: DevicesSpec(()), FakeCluster(), FakeCluster())
    cambricon = plugin_servers(node, table["cambricon"], str(tmp_path), responder=ShowOnly())
    assert [s.allocator.resource for s in cambricon] == [
        "cambricon.com/mlu",
        "cambricon.com/mlu.shared",
        "device.gpustack.ai/cambricon.visibility",
    ]
    mthreads = plugin_servers(node, table["mthreads"], str(tmp_path))
    assert "mthreads.com/gpu.sliced" in [s.allocator.resource for s in mthreads]


# --- AMD --------------------------------------------------------------------------------------

AMD_NODES = SimulatedNodes(
    {
        "/dev/kfd": 0,
        "/dev/dri/card1": 1,
        "/dev/dri/renderD128": 128,
        "/dev/dri/card2": 2,
        "/dev/dri/renderD129": 129,
    }
)


@pytest.mark.parametrize("mode", [Mode.EXCLUSIVE, Mode.SHARED, Mode.VISIBILITY])
def test_amd_injects_kfd_and_each_cards_drm_nodes(mode: Mode) -> None:
    response = Amd().shown(cards("amd", (2, 129), (1, 128)), mode, ENVVAR, AMD_NODES)
    assert response.envs == {"AMD_VISIBLE_DEVICES": "none"}
    assert response.devices == rw(
        "/dev/kfd",
        "/dev/dri/card2",
        "/dev/dri/renderD129",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
    )
    assert response.mounts == () and response.annotations == {}


def test_amd_every_node_is_required() -> None:
    with pytest.raises(ValueError, match="the host has no device node '/dev/kfd'"):
        Amd().shown(cards("amd", (1, 128)), Mode.EXCLUSIVE, ENVVAR, NO_NODES)
    missing_render = SimulatedNodes({"/dev/kfd": 0, "/dev/dri/card1": 1})
    with pytest.raises(ValueError, match="card amd-0 has no device node '/dev/dri/renderD128'"):
        Amd().shown(cards("amd", (1, 128)), Mode.EXCLUSIVE, ENVVAR, missing_render)
    with pytest.raises(ValueError, match="records no drm card and render node"):
        Amd().shown(cards("amd", (1,)), Mode.EXCLUSIVE, ENVVAR, AMD_NODES)
    with pytest.raises(ValueError, match="cards amd-0 and amd-1 both record drm node"):
        Amd().shown(cards("amd", (1, 128), (1, 129)), Mode.EXCLUSIVE, ENVVAR, AMD_NODES)


# --- Hygon, MetaX, Cambricon: nodes they inject themselves -------------------------------------


def test_hygon_injects_its_control_and_drm_nodes_and_hyhal() -> None:
    nodes = SimulatedNodes(
        {
            "/dev/kfd": 0,
            "/dev/mkfd": 0,
            "/dev/dri/card0": 0,
            "/dev/dri/renderD128": 128,
            "/opt/hyhal": 0,
        }
    )
    response = Hygon().shown(cards("hygon", (0, 128)), Mode.SHARED, ENVVAR, nodes)
    assert response.envs == {}
    assert response.devices == (
        DeviceNode("/dev/kfd", "/dev/kfd", "rwm"),
        DeviceNode("/dev/mkfd", "/dev/mkfd", "rwm"),
        *rw("/dev/dri/card0", "/dev/dri/renderD128"),
    )
    assert response.mounts == (Mount("/opt/hyhal", "/opt/hyhal", read_only=True),)


def test_hygon_leaves_out_what_the_host_lacks() -> None:
    nodes = SimulatedNodes({"/dev/kfd": 0, "/dev/dri/card0": 0})
    response = Hygon().shown(cards("hygon", (0, 128), None), Mode.EXCLUSIVE, ENVVAR, nodes)
    assert response.devices == (DeviceNode("/dev/kfd", "/dev/kfd", "rwm"), *rw("/dev/dri/card0"))
    assert response.mounts == ()


def test_metax_injects_control_nodes_once_and_each_cards_drm_nodes() -> None:
    nodes = SimulatedNodes(
        {
            "/dev/mxcd": 0,
            "/dev/mxnd": 0,
            "/dev/dri/card3": 3,
            "/dev/dri/renderD130": 130,
            "/dev/dri/card4": 4,
            "/dev/dri/renderD131": 131,
        }
    )
    response = Metax().shown(cards("metax", (3, 130), (4, 131)), Mode.EXCLUSIVE, ENVVAR, nodes)
    assert response.envs == {}
    assert response.devices == rw(
        "/dev/mxcd",
        "/dev/mxnd",
        "/dev/dri/card3",
        "/dev/dri/renderD130",
        "/dev/dri/card4",
        "/dev/dri/renderD131",
    )


def test_cambricon_injects_the_cards_own_node_its_optional_nodes_and_control_nodes() -> None:
    nodes = SimulatedNodes(
        {
            "/dev/cambricon_dev2": 2,
            "/dev/cambricon_ipcm2": 2,
            "/dev/commu2": 2,
            "/dev/cambricon_dev5": 5,
            "/dev/cambr-msgq:5": 5,
            "/dev/cambricon_ctl": 0,
        }
    )
    response = Cambricon().shown(cards("cambricon", (2,), (5,)), Mode.SHARED, ENVVAR, nodes)
    assert response.envs == {"CAMBRICON_VISIBLE_DEVICES": "2,5"}
    assert response.devices == rw(
        "/dev/cambricon_dev2",
        "/dev/commu2",
        "/dev/cambricon_ipcm2",
        "/dev/cambricon_dev5",
        "/dev/cambr-msgq:5",
        "/dev/cambricon_ctl",
    )


def test_cambricon_needs_the_cards_own_node_and_its_index() -> None:
    with pytest.raises(ValueError, match="has no device node '/dev/cambricon_dev2'"):
        Cambricon().shown(cards("cambricon", (2,)), Mode.EXCLUSIVE, ENVVAR, NO_NODES)
    with pytest.raises(ValueError, match="carries no cnDev device index"):
        Cambricon().shown(cards("cambricon", None), Mode.EXCLUSIVE, ENVVAR, NO_NODES)


# --- Iluvatar, MThreads: the runtime's variable -----------------------------------------------


def test_iluvatar_shows_uuids_and_slices_with_hami_core() -> None:
    granted = cards("iluvatar", (0,), memory=32768)
    assert Iluvatar().shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES).envs == {
        "IX_VISIBLE_DEVICES": "iluvatar-0"
    }
    sliced = Iluvatar().sliced(
        granted,
        request(cores=30, runtime_class="iluvatar", runtime_name="iluvatar"),
        NO_NODES,
    )
    assert sliced.envs == {
        "IX_VISIBLE_DEVICES": "iluvatar-0",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/tmp/vgpu/cudevshr.cache",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m",
        "LIBCUDA_LOG_LEVEL": "0",
    }
    assert sliced.mounts == (
        Mount("/tmp/vgpulock", "/tmp/vgpulock"),
        Mount("/etc/ld.so.preload", f"{LIB}/iluvatar/ld.so.preload", read_only=True),
        Mount("/usr/local/vgpu/libvgpu.so", f"{LIB}/iluvatar/libvgpu.so", read_only=True),
        Mount("/tmp/vgpu", f"{WORK}/tmp/vgpu"),
        Mount("/dev/shm", "/dev/shm"),
    )
    assert sliced.directories == ("/tmp/vgpulock", WORK, f"{WORK}/tmp/vgpu")


def test_a_sliced_iluvatar_pod_must_name_the_iluvatar_runtime() -> None:
    with pytest.raises(Refusal, match="runtimeClassName: iluvatar") as refused:
        Iluvatar().sliced(cards("iluvatar", (0,)), request(runtime_name="iluvatar"), NO_NODES)
    assert refused.value.code == Code.FAILED_PRECONDITION


def test_mthreads_shows_ids_and_slices_with_qos_variables() -> None:
    granted = cards("mthreads", (0,), memory=49152)
    assert MThreads().shown(granted, Mode.SHARED, ENVVAR, NO_NODES).envs == {
        "MTHREADS_VISIBLE_DEVICES": "mthreads-0"
    }
    sliced = MThreads().sliced(granted, request(cores=40, memory_percentage=50), NO_NODES)
    assert sliced.envs == {
        "MTHREADS_VISIBLE_DEVICES": "mthreads-0",
        "MTHREADS_QOS_MEMORY_LIMIT": str(24576 * 1024 * 1024),
        "MTHREADS_QOS_COMPUTING_POWER_WEIGHT": "40",
    }
    assert sliced.mounts == () and sliced.devices == ()


# --- T-Head: device nodes proven by minor ------------------------------------------------------

THEAD_NODES = SimulatedNodes(
    {"/dev/alixpu": 0, "/dev/alixpu_ctl": 1, "/dev/alixpu_ppu0": 7, "/dev/alixpu_ppu1": 8}
)


def test_thead_injects_control_nodes_then_each_card_and_no_variable() -> None:
    response = Thead().shown(cards("thead", (7,), (8,)), Mode.EXCLUSIVE, ENVVAR, THEAD_NODES)
    assert response.envs == {}
    assert response.devices == rw(
        "/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu0", "/dev/alixpu_ppu1"
    )


def test_thead_fails_closed_on_an_unproven_card_node() -> None:
    with pytest.raises(ValueError, match="carries minor 7, want 9: fail closed"):
        Thead().shown(cards("thead", (9,)), Mode.EXCLUSIVE, ENVVAR, THEAD_NODES)
    with pytest.raises(ValueError, match="no recorded minor number"):
        Thead().shown(cards("thead", None), Mode.EXCLUSIVE, ENVVAR, THEAD_NODES)
    with pytest.raises(ValueError, match="'/dev/alixpu'"):
        Thead().shown(cards("thead", (7,)), Mode.EXCLUSIVE, ENVVAR, NO_NODES)


def test_thead_slice_emits_the_compute_figure_even_at_100() -> None:
    sliced = Thead().sliced(cards("thead", (7,), memory=98304), request(), THEAD_NODES)
    assert sliced.envs == {
        "HGGC_DEVICE_SM_LIMIT": "100",
        "HGGC_LEDGER_PATH": "/var/run/vppu/ledger",
        "HGGC_DEVICE_MEMORY_LIMIT_0": "24576",
        "LIBHGGC_LOG_LEVEL": "1",
    }
    assert sliced.mounts == (
        Mount("/etc/ld.so.preload", f"{LIB}/thead/ld.so.preload", read_only=True),
        Mount("/usr/local/vppu/hgml_dlsym_hook.so", f"{LIB}/thead/hgml_dlsym_hook.so", True),
        Mount("/usr/local/vppu/hggc_quota.so", f"{LIB}/thead/hggc_quota.so", True),
        Mount("/usr/local/vppu/ppu-monitor", f"{LIB}/thead/ppu-monitor", True),
        Mount("/var/run/vppu", f"{WORK}/run/vppu"),
    )
    assert sliced.devices == rw("/dev/alixpu", "/dev/alixpu_ctl", "/dev/alixpu_ppu0")
    assert sliced.directories == (WORK, f"{WORK}/run/vppu")
    quiet = Thead().sliced(
        cards("thead", (7,)), request(declared=frozenset({"LIBHGGC_LOG_LEVEL"})), THEAD_NODES
    )
    assert "LIBHGGC_LOG_LEVEL" not in quiet.envs


# --- Ascend: the driver's index, the container-share flag, vcann-rt ----------------------------


class FakeShare:
    def __init__(self, api: int = API_V1, enabled: bool = False) -> None:
        self.api = api
        self.enabled = enabled
        self.read_error: Exception | None = None
        self.write_error: Exception | None = None
        self.writes: list[tuple[int, int]] = []

    def share_enabled(self, card: int, device: int) -> bool:
        if self.read_error:
            raise self.read_error
        return self.enabled

    def enable_share(self, card: int, device: int) -> None:
        if self.write_error:
            raise self.write_error
        self.writes.append((card, device))
        self.enabled = True


def ascend(share: FakeShare | None) -> Ascend:
    return Ascend(lambda: share)


def test_ascend_names_physical_ids_and_shares_tenanted_cards() -> None:
    share = FakeShare()
    granted = cards("ascend", (4, 2, 0), (5, 2, 1))
    exclusive = ascend(share).shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES)
    assert exclusive.envs == {"ASCEND_VISIBLE_DEVICES": "4,5"}
    assert share.writes == []  # an exclusive tenant leaves the flag alone
    ascend(share).shown(granted, Mode.SHARED, ENVVAR, NO_NODES)
    assert share.writes == [(2, 0)]  # the second card read as enabled already


def test_ascend_a5_names_the_device_id_and_has_no_share_flag() -> None:
    share = FakeShare(api=API_V2)
    granted = cards("ascend", (9, 3, 0), family="950")
    shown = ascend(share).shown(granted, Mode.VISIBILITY, ENVVAR, NO_NODES)
    assert shown.envs == {"ASCEND_VISIBLE_DEVICES": "3"}
    assert share.writes == []


class FakeA5(FakeShare):
    """A V2 DCMI that also answers the product reads, counting them."""

    def __init__(self, mainboard: int = 0x44, pod_type: int | Exception = 2) -> None:
        super().__init__(api=API_V2)
        self.mainboard = mainboard
        self.pod_type = pod_type
        self.reads: list[tuple[str, int, int]] = []

    def mainboard_id(self, card: int, device: int) -> int:
        self.reads.append(("mainboard", card, device))
        return self.mainboard

    def super_pod_type(self, card: int, device: int) -> int:
        self.reads.append(("super pod", card, device))
        if isinstance(self.pod_type, Exception):
            raise self.pod_type
        return self.pod_type


TOPO = "/usr/local/Ascend/driver/topo/950/"


@pytest.mark.parametrize(
    ("mainboard", "pod_type", "file"),
    [
        (0x44, 0, "atlas_850_1.json"),
        (0x44, 1, "atlas_950_1.json"),
        (0x44, 2, "atlas_950_2.json"),
        (0x44, 3, "atlas_850_2.json"),
        (0x44, 4, "atlas_850_3.json"),
        (0x68, 99, "atlas_350_1.json"),  # the carrier board answers first: the pod is not asked
        (0x6C, 99, "atlas_350_3.json"),
    ],
)
def test_an_a5_grant_names_the_products_hccl_topology_file(
    mainboard: int, pod_type: int, file: str
) -> None:
    dcmi = FakeA5(mainboard, pod_type)
    granted = cards("ascend", (7, 3, 0), family="950")
    shown = ascend(dcmi).shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES)
    assert shown.envs == {"ASCEND_VISIBLE_DEVICES": "3", "HCCL_TOPO_FILE_PATH": TOPO + file}
    assert {(card, device) for _, card, device in dcmi.reads} == {(3, 0)}  # card, device index
    assert ("super pod", 3, 0) in dcmi.reads or mainboard in (0x68, 0x6C)


def test_every_a5_mode_carries_the_topology_file_read_once(tmp_path: Path) -> None:
    dcmi = FakeA5()
    responder = ascend(dcmi)
    granted = cards("ascend", (7, 3, 0), family="950")
    for mode in (Mode.EXCLUSIVE, Mode.SHARED, Mode.VISIBILITY):
        shown = responder.shown(granted, mode, ENVVAR, NO_NODES)
        assert shown.envs["HCCL_TOPO_FILE_PATH"] == TOPO + "atlas_950_2.json"
    sliced = responder.sliced(granted, request(pods_dir=str(tmp_path)), NO_NODES)
    assert sliced.envs["HCCL_TOPO_FILE_PATH"] == TOPO + "atlas_950_2.json"
    assert dcmi.reads == [("mainboard", 3, 0), ("super pod", 3, 0)]  # a node fact: asked once


def test_no_topology_file_when_the_product_cannot_be_told() -> None:
    granted = cards("ascend", (7, 3, 0), family="950")
    unknown = ascend(FakeA5(pod_type=99)).shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES)
    assert unknown.envs == {"ASCEND_VISIBLE_DEVICES": "3"}  # granted all the same
    failing = FakeA5(pod_type=VendorError("dcmiv2_get_device_info", -8005))
    responder = ascend(failing)
    assert (
        "HCCL_TOPO_FILE_PATH" not in responder.shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES).envs
    )
    failing.pod_type = 1  # a failed read is asked again; an answer is kept
    assert (
        responder.shown(granted, Mode.EXCLUSIVE, ENVVAR, NO_NODES).envs["HCCL_TOPO_FILE_PATH"]
        == TOPO + "atlas_950_1.json"
    )
    older = cards("ascend", (4, 2, 0), family="910B")
    assert ascend(FakeA5()).shown(older, Mode.EXCLUSIVE, ENVVAR, NO_NODES).envs == {
        "ASCEND_VISIBLE_DEVICES": "4"
    }
    unaddressed = cards("ascend", (7,), family="950")
    with pytest.raises(ValueError, match="no dcmi device index"):
        ascend(FakeA5()).shown(unaddressed, Mode.EXCLUSIVE, ENVVAR, NO_NODES)


def test_ascend_share_failures_name_the_card_and_the_remedy() -> None:
    granted = cards("ascend", (4, 2, 1))
    missing = FakeShare()
    missing.read_error = VendorError("dcmi_get_device_share_enable", FUNCTION_NOT_FOUND)
    with pytest.raises(ValueError, match="card 2 device 1 cannot be shared"):
        ascend(missing).shown(granted, Mode.SHARED, ENVVAR, NO_NODES)
    broken = FakeShare()
    broken.read_error = VendorError("dcmi_get_device_share_enable", -8005)
    broken.write_error = VendorError("dcmi_set_device_share_enable", -8007)
    with pytest.raises(ValueError) as failed:
        ascend(broken).shown(granted, Mode.SHARED, ENVVAR, NO_NODES)
    message = str(failed.value)
    assert "the flag read failed too" in message
    assert "npu-smi set -t device-share -i 2 -c 1 -d 1" in message
    with pytest.raises(ValueError, match="container-share actuator not configured"):
        ascend(None).shown(granted, Mode.SHARED, ENVVAR, NO_NODES)


def test_ascend_slice_writes_npu_info_config_and_mounts_vcann_rt(tmp_path: Path) -> None:
    pods = tmp_path / "pods"
    granted = cards("ascend", (4, 2, 0), memory=65536, family="910B", runtime="8.1")
    other = pods / "uid-0/c-main/etc/enpu/vcann-rt/npu_info.config"
    other.parent.mkdir(parents=True)
    other.write_text("physical-npu-id=4\nvirtual-npu-id=0\n")
    sliced = ascend(FakeShare()).sliced(
        granted, request(cores=20, memory_percentage=25, pods_dir=str(pods)), NO_NODES
    )
    work = f"{pods}/uid-1/c-main"
    config = Path(work + "/etc/enpu/vcann-rt/npu_info.config")
    assert config.read_text() == (
        "physical-npu-id=4\nvirtual-npu-id=1\naicore-quota=20\nmemory-quota=16384\n"
        "shm-id=ascend-0\nscheduling-policy=2\n"
    )
    assert sliced.envs == {
        "ASCEND_VISIBLE_DEVICES": "4",
        "ENPU_LOG_LEVEL": "1",
        "ENPU_DSMI_HOOK": "1",
    }
    build = f"{LIB}/ascend/cann-8-910b"
    assert sliced.mounts == (
        Mount("/etc/ld.so.preload", f"{LIB}/ascend/ld.so.preload", True),
        Mount("/opt/enpu/vcann-rt/lib/libvruntime.so", f"{build}/lib/libvruntime.so", True),
        Mount("/opt/enpu/vcann-rt/tools/enpu-monitor", f"{build}/tools/enpu-monitor", True),
        Mount("/etc/enpu/vcann-rt/npu_info.config", str(config), True),
        Mount("/dev/shm", "/dev/shm"),
    )
    # A retry keeps its virtual id even though a lower one came free meanwhile.
    other.unlink()
    ascend(FakeShare()).sliced(granted, request(cores=20, pods_dir=str(pods)), NO_NODES)
    assert "virtual-npu-id=1\n" in config.read_text()


def test_ascend_slices_one_card_only() -> None:
    with pytest.raises(ValueError, match="vcann-rt logical slicing is single-NPU"):
        ascend(FakeShare()).sliced(cards("ascend", (4, 2, 0), (5, 2, 1)), request(), NO_NODES)


# --- The whole Allocate path for a non-NVIDIA manufacturer -----------------------------------


def test_an_amd_exclusive_allocate_records_the_grant_and_answers_its_nodes() -> None:
    granted = cards("amd", (1, 128), (2, 129))
    group = granted[0].group
    spec = DevicesSpec((replace(group, accelerators=tuple(c.card for c in granted)),))
    cluster = FakeCluster()
    cluster.add("train", ("main", {"amd.com/gpu": "1"}))
    state = NodeState(lambda: spec, cluster, cluster)
    allocator = Allocator(state, manufacturers({})["amd"], Mode.EXCLUSIVE, nodes=AMD_NODES)
    response = allocator.allocate(["model:amd-1:0000"], Attempt(5.0))
    assert response.envs == {"AMD_VISIBLE_DEVICES": "none"}
    assert response.devices == rw("/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD129")
    record = parse_allocated(cluster.annotation("train"))["main"]
    assert [claim.row.id for claim in record.claims()] == ["amd-1"]


# --- What the node publishes ----------------------------------------------------------------


def test_slices_no_plugin_can_hand_out_are_not_published() -> None:
    from chain.accelerators import AcceleratorStatus, LogicalSliced
    from nodeagent.agent import published_groups, slicing_verdicts
    from nodeagent.plugin.isolation import NOT_SERVED, OFFERED, Slicing

    sliceable = AcceleratorStatus(logical_sliced=LogicalSliced(count=128))
    mlu = DevicesGroup(
        id="mlu370",
        manufacturer="cambricon",
        name="MLU370",
        memory=196608,
        accelerators=(Accelerator(id="GPU-1", index=0, status=sliceable),),
    )
    nvidia = replace(mlu, id="h100", manufacturer="nvidia")

    def serves(group: DevicesGroup) -> Slicing:
        return NOT_SERVED if group.manufacturer == "cambricon" else OFFERED

    owned = ("cambricon", "nvidia")
    published = published_groups(
        [mlu, nvidia], owned, slicing_verdicts([mlu, nvidia], owned, serves)
    )
    assert published[0].accelerators[0].status.logical_sliced == LogicalSliced()
    assert published[0].slicing_unavailable == ""  # not served here: nothing to fix
    assert published[1] is nvidia
    assert published_groups([mlu], ("nvidia",), {}) == []
    assert mlu.without_logical_slices().without_logical_slices() == published[0]


# --- Hygon: a vdev.conf per slice -----------------------------------------------------------


def hygon_card(cores: int = 120) -> GrantedCard:
    group = DevicesGroup(id="k100", manufacturer="hygon", name="K100", memory=65520, cores=cores)
    topology = DeviceTopology(pci_bus_id="0000:3d:00.0")
    card = Accelerator(id="dcu-0", index=0, physical_indexes=(0, 128), topology=topology)
    return GrantedCard(group, card)


HYGON_NODES = SimulatedNodes(
    {
        "/dev/kfd": 0,
        "/dev/mkfd": 0,
        "/dev/dri/card0": 0,
        "/dev/dri/renderD128": 128,
        "/opt/hyhal": 0,
        "/opt/dtk": 0,
    }
)


def hygon_slice(pods: Path, pod: str, cores: int, memory: int) -> SliceRequest:
    limits = SlicedLimits(cores_percentage=cores, memory_percentage=memory)
    return SliceRequest(limits, pod, "main", ENVVAR, pods_dir=str(pods))


def test_a_hygon_slice_gets_its_own_cus_in_a_vdev_conf(tmp_path: Path) -> None:
    first = Hygon().sliced((hygon_card(),), hygon_slice(tmp_path, "uid-1", 25, 50), HYGON_NODES)
    folder = tmp_path / "uid-1/c-main/etc/vdev/docker"
    assert (folder / "vdev0.conf").read_text() == (
        "PciBusId: 0000:3d:00.0\n"
        "cu_mask: 0x000000003fffffff\n"
        "cu_mask: 0x0000000000000000\n"
        "cu_count: 30\n"
        "mem: 32760 MiB\n"
        "device_id: 0\n"
        "vdev_id: 0\n"
        "pipe_id: 0\n"
        "enable: 1\n"
    )
    assert first.envs == {}
    assert first.mounts == (
        Mount("/opt/hygondriver", "/opt/dtk", read_only=True),
        Mount("/opt/hyhal", "/opt/hyhal", read_only=True),
        Mount("/etc/vdev/docker", str(folder), read_only=True),
    )
    assert first.devices[:2] == (
        DeviceNode("/dev/kfd", "/dev/kfd", "rwm"),
        DeviceNode("/dev/mkfd", "/dev/mkfd", "rwm"),
    )
    # A second slice of the card takes the next CUs and pipe; a retry keeps its file.
    Hygon().sliced((hygon_card(),), hygon_slice(tmp_path, "uid-2", 75, 10), HYGON_NODES)
    second = (tmp_path / "uid-2/c-main/etc/vdev/docker/vdev0.conf").read_text()
    assert "cu_mask: 0xffffffffc0000000\ncu_mask: 0x00ffffffffffffff\ncu_count: 90\n" in second
    assert "pipe_id: 1\n" in second
    Hygon().sliced((hygon_card(),), hygon_slice(tmp_path, "uid-1", 25, 50), HYGON_NODES)
    assert "cu_count: 30\n" in (folder / "vdev0.conf").read_text()
    with pytest.raises(ValueError, match="insufficient free compute units: need 2, 0 of 120"):
        Hygon().sliced((hygon_card(),), hygon_slice(tmp_path, "uid-3", 1, 1), HYGON_NODES)
