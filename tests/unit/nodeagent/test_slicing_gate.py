"""A group whose slicing isolation library is not usable on the node: published without its
logical slices and saying why (the Devices spec, an Event on the Node), so no counting key, fit
label or sliced token promises a slice; back on the next round once the library loads."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chain.allocation import Code, Refusal
from chain.devices import DEVICES_KIND, Devices, DevicesGroup, DevicesSpec
from chain.labels import ACCELERATABLE_PREFIX, MANAGED
from chain.ledger import Mode
from chain.manufacturers import default_manufacturers
from nodeagent.agent import Reporter, published_groups, slicing_verdicts
from nodeagent.detect.loop import DetectionRound
from nodeagent.detect.remembered import DetectionPass
from nodeagent.node_events import NodeEvent, slicing_events
from nodeagent.plugin.allocator import Allocator, Attempt
from nodeagent.plugin.isolation import NOT_SERVED, OFFERED, IsolationCheck, Slicing
from nodeagent.plugin.node import NodeState
from nodeagent.vendors.nvidia.grants import build_dir, cuda_major
from tests.unit.nodeagent.helpers import detect, shared_object
from tests.unit.nodeagent.plugin.fakes import GPU, NVIDIA, FakeCluster

SLICED = GPU + ".sliced"


def merged(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch applied (None deletes)."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeApi:
    """The Node, its NodeFeature and its Devices as the API server holds them."""

    def __init__(self, group: DevicesGroup) -> None:
        labels = {MANAGED: "true", ACCELERATABLE_PREFIX + group.accelerator_key: "true"}
        # The kubelet still counts sliced tokens of an earlier report, with a stale size key.
        capacity = {SLICED: "8", SLICED + ".units": "123"}
        self.node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "labels": labels},
            "status": {"capacity": capacity},
        }
        self.objects: dict[str, dict[str, Any]] = {}

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        if kind == "Node":
            return copy.deepcopy(self.node)
        return copy.deepcopy(self.objects.get(kind))

    def apply(self, obj: Any, manager: str = "", subresource: str | None = None) -> Any:
        held = self.objects.get(obj["kind"], {})
        if subresource == "status":
            # As server-side apply keeps what other field managers own: the ledger's fields and
            # the conditions are written by different managers, each whole.
            status = {**held.get("status", {}), **obj["status"]}
            self.objects[obj["kind"]] = {**held, "status": status}
        else:
            self.objects[obj["kind"]] = {**obj, "status": held.get("status", {})}
        return copy.deepcopy(self.objects[obj["kind"]])

    def merge_patch(self, api_version: str, kind: str, name: str, body: Any, **_: Any) -> Any:
        self.node = merged(self.node, body)
        return copy.deepcopy(self.node)

    def devices(self) -> Devices:
        return Devices.parse(self.objects[DEVICES_KIND])


class Events:
    """The slicing Events recorded on the Node (the cards' own are left out)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def event(self, regarding: Any, type_: str, reason: str, note: str, action: str) -> None:
        if reason.startswith("Slicing"):
            self.recorded.append((type_, reason, note))


def t4() -> DevicesGroup:
    [group] = detect("t4x4")
    assert group.offers_logical_slices
    return group


def stage(lib: Path, group: DevicesGroup) -> Path:
    """HAMi-core for the group's CUDA major, as the DaemonSet's init container stages it."""
    library = lib / "nvidia" / build_dir(cuda_major(group.runtime_version)) / "libvgpu.so"
    shared_object(library)
    (lib / "nvidia" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    return library


def reporter_for(api: FakeApi, lib: Path, events: Events) -> Reporter:
    return Reporter(
        api,  # type: ignore[arg-type]
        "n1",
        "gpustack-system",
        ("nvidia",),
        default_manufacturers(),
        ledger=True,
        pods=lambda: [],
        events=events,  # type: ignore[arg-type]
        slicing=IsolationCheck(lib_dir=str(lib)),
        clock=lambda: 1_796_284_800.0,  # 2026-12-03T08:00:00Z
    )


def conditions(api: FakeApi) -> dict[str, dict[str, Any]]:
    held = api.objects[DEVICES_KIND]["status"]["conditions"]
    return {entry["type"]: entry for entry in held}


def sliced_keys(api: FakeApi) -> dict[str, str]:
    capacity = api.node["status"]["capacity"]
    return {k: v for k, v in capacity.items() if k.startswith(SLICED + ".")}


def fit(api: FakeApi, group: DevicesGroup) -> str | None:
    labels: dict[str, str] = api.node["metadata"]["labels"]
    return labels.get(f"sliced-max-free-units.fit.gpustack.ai/{group.accelerator_key}")


def test_a_group_without_its_library_is_published_without_slices_until_it_is_staged(
    tmp_path: Path,
) -> None:
    group, lib, events = t4(), tmp_path / "lib", Events()
    api = FakeApi(group)
    reporter = reporter_for(api, lib, events)
    detected = DetectionRound((DetectionPass("nvidia", (group,)),))
    library = f"{lib}/nvidia/{build_dir(cuda_major(group.runtime_version))}/libvgpu.so"

    reporter(detected)
    [published] = api.devices().spec.groups
    assert not published.offers_logical_slices
    assert f"{library}: missing" in published.slicing_unavailable
    assert api.objects[DEVICES_KIND]["spec"]["groups"][0]["slicingUnavailable"]
    assert sliced_keys(api) == {}  # the stale size key is nulled, none is written
    assert fit(api, group) is None
    [(kind, reason, note)] = events.recorded
    assert (kind, reason) == ("Warning", "SlicingUnavailable")
    assert group.name in note and group.accelerator_key in note and library in note
    assert "missing" in note and "DaemonSet must stage" in note
    withheld, ready = conditions(api)["SlicingAvailable"], conditions(api)["Ready"]
    assert (withheld["status"], withheld["reason"]) == ("False", "SlicingUnavailable")
    assert withheld["message"].startswith(f"logical slices withheld: {group.accelerator_key}: ")
    assert f"{library}: missing" in withheld["message"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-12-03T08:00:00Z")
    assert conditions(api)["nvidia.gpustack.ai/Detected"]["message"] == (
        "the last detection measured 4 cards"
    )

    reporter.clock = lambda: 1_796_371_200.0  # a day later: only a flip takes this time
    reporter(detected)  # the same state again: no second Event, nothing moved
    assert len(events.recorded) == 1
    assert not reporter.node_changed()

    stage(lib, group)
    assert reporter.node_changed()  # a monitor round sees the library at once
    reporter(detected)
    [published] = api.devices().spec.groups
    assert published == group
    assert "slicingUnavailable" not in api.objects[DEVICES_KIND]["spec"]["groups"][0]
    assert sliced_keys(api)[SLICED + ".units"] == str(4 * 1_600_000)
    assert fit(api, group) == "1600000"
    assert events.recorded[1][:2] == ("Normal", "SlicingAvailable")
    assert not reporter.node_changed()
    available = conditions(api)["SlicingAvailable"]
    assert (available["status"], available["lastTransitionTime"]) == (
        "True",
        "2026-12-04T08:00:00Z",
    )
    assert conditions(api)["Ready"]["lastTransitionTime"] == "2026-12-03T08:00:00Z"

    Path(library).unlink()  # removed: off again on the next round
    assert reporter.node_changed()
    reporter(detected)
    assert not api.devices().spec.groups[0].offers_logical_slices
    assert [reason for _, reason, _ in events.recorded] == [
        "SlicingUnavailable",
        "SlicingAvailable",
        "SlicingUnavailable",
    ]


def test_a_simulated_node_is_checked_like_a_real_one(tmp_path: Path) -> None:
    """The simulated profiles' groups go through the same check: no library, no slices."""
    group = t4()
    verdicts = slicing_verdicts([group], ("nvidia",), IsolationCheck(lib_dir=str(tmp_path)))
    [published] = published_groups([group], ("nvidia",), verdicts)
    assert not published.offers_logical_slices and published.slicing_unavailable


def test_the_verdict_decides_per_group() -> None:
    t4_group = t4()
    other = replace(t4_group, id="a10g", name="NVIDIA A10G")
    whole = replace(
        t4_group, id="mig", accelerators=(), sliced_detail=type(t4_group.sliced_detail)()
    )
    asked: list[str] = []

    def slicing(group: DevicesGroup) -> Slicing:
        asked.append(group.id)
        return Slicing(problem="libvgpu.so: missing") if group.id == "a10g" else OFFERED

    verdicts = slicing_verdicts([t4_group, other, whole], ("nvidia",), slicing)
    assert asked == [t4_group.id, "a10g"]  # a group offering no slices is not checked
    published = published_groups([t4_group, other, whole], ("nvidia",), verdicts)
    assert published[0] == t4_group and published[2] == whole
    assert published[1].slicing_unavailable == "libvgpu.so: missing"
    assert not published[1].offers_logical_slices
    unserved = published_groups([t4_group], ("nvidia",), {t4_group.accelerator_key: NOT_SERVED})
    assert not unserved[0].offers_logical_slices and unserved[0].slicing_unavailable == ""


def test_slicing_events_are_told_when_the_state_changes() -> None:
    group = t4()
    off = group.without_logical_slices("x/libvgpu.so: missing")
    assert [e.reason for e in slicing_events(None, [off])] == ["SlicingUnavailable"]
    assert slicing_events([off], [off]) == []
    other = group.without_logical_slices("x/libvgpu.so: dlopen failed: libcuda.so.1: ...")
    assert [e.reason for e in slicing_events([off], [other])] == ["SlicingUnavailable"]
    assert slicing_events([off], [group]) == [
        NodeEvent(
            "Normal",
            "SlicingAvailable",
            f"{group.name} ({group.accelerator_key}): its slicing isolation library loads "
            "again: logical slices are offered",
        )
    ]
    assert slicing_events(None, [group]) == []  # available from the start: nothing to say


# --- The sliced device plugin ------------------------------------------------------------------


def sliced_allocator(spec: DevicesSpec, cluster: FakeCluster) -> Allocator:
    return Allocator(NodeState(lambda: spec, cluster, cluster), NVIDIA, Mode.SLICED)


def test_the_sliced_plugin_offers_and_grants_no_slice_of_an_unavailable_group() -> None:
    """Published without slices, the group lists no sliced token, and a token kubelet still
    holds from before is refused with the reason."""
    group = t4()
    reason = "/var/lib/gpustack/operator/lib/nvidia/cuda-13/libvgpu.so: missing"
    gated = group.without_logical_slices(reason)
    cluster = FakeCluster()
    cluster.add("slice", ("main", {SLICED: "1", SLICED + ".memory-percentage": "25"}))
    assert sliced_allocator(DevicesSpec((group,)), cluster).advertised()  # the available group
    allocator = sliced_allocator(DevicesSpec((gated,)), cluster)
    assert allocator.advertised() == []
    card = group.accelerators[0].id
    with pytest.raises(Refusal) as refused:
        allocator.allocate([f"{group.id}:{card}:30000000"], Attempt(5.0))
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert reason in refused.value.message
    assert cluster.annotation("slice") == ""
