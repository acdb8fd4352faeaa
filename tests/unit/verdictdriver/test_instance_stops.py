"""Running-instance stop written into the Instance: which Instances, and what is written."""

from __future__ import annotations

from typing import Any

from verdictdriver.instance_stops import instance_stop_writes

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"


def _instance(name: str, type_name: str = T4, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "lab", "resourceVersion": "41"},
        "spec": {"instanceType": type_name, "image": "x", **spec},
    }


def _type(deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": T4}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    return {"metadata": meta, "spec": {}}


def _queue(policy: str | None) -> dict[str, Any]:
    return {"metadata": {"name": T4}, "spec": {"stopPolicy": policy} if policy else {}}


def test_a_draining_pool_stops_its_instances_for_good() -> None:
    (write,) = instance_stop_writes([_instance("a")], {T4: _type()}, {T4: _queue("HoldAndDrain")})
    assert (write.kind, write.name, write.namespace) == ("Instance", "a", "lab")
    assert write.patch == {"metadata": {"resourceVersion": "41"}, "spec": {"stop": True}}
    assert "is draining" in write.why


def test_a_type_gone_or_going_stops_them() -> None:
    gone = instance_stop_writes([_instance("a")], {}, {})
    going = instance_stop_writes([_instance("a")], {T4: _type(deleting=True)}, {T4: _queue(None)})
    assert "is gone" in gone[0].why
    assert "being deleted" in going[0].why


def test_hold_is_not_a_stop_and_nothing_is_written_twice() -> None:
    types, held = {T4: _type()}, {T4: _queue("Hold")}
    assert instance_stop_writes([_instance("a")], types, held) == []
    assert instance_stop_writes([_instance("a")], types, {T4: _queue(None)}) == []
    draining = {T4: _queue("HoldAndDrain")}
    assert instance_stop_writes([_instance("a", stop=True)], types, draining) == []
    deleting = _instance("a")
    deleting["metadata"]["deletionTimestamp"] = "2026-12-02T10:00:00Z"
    assert instance_stop_writes([deleting], types, draining) == []
