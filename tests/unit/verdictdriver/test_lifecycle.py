"""The lifecycle keeper: the ownership rules (release and adopt around the settings singleton),
and the keeper's pass (nothing decided before every cache is listed; a lost race is left for
the next pass; the catalog ConfigMap read by name only when due)."""

from __future__ import annotations

from typing import Any

from kubeapi import KubeError
from verdictdriver.lifecycle import LifecycleKeeper
from verdictdriver.ownership import ownership_writes

Obj = dict[str, Any]
DECORATOR = "metacontroller.k8s.io/decorator-controller"
RECORD = "schedule.gpustack.ai/stop-policy"
SETTINGS_UID = "5e771n65-0000-4000-8000-000000000001"


def _settings(uid: str = SETTINGS_UID, deleting: bool = False) -> Obj:
    meta: Obj = {"name": "default", "uid": uid, "resourceVersion": "3"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"apiVersion": "gpustack.ai/v1alpha1", "kind": "Settings", "metadata": meta}


def _ref(uid: str = SETTINGS_UID) -> Obj:
    return {
        "apiVersion": "gpustack.ai/v1alpha1",
        "kind": "Settings",
        "name": "default",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _obj(
    kind: str, name: str, refs: list[Obj] | None, decorator: str | None = "gpustack-flavor-pools"
) -> Obj:
    api = {"InstanceType": "worker.gpustack.ai/v1alpha1", "ConfigMap": "v1"}.get(
        kind, "kueue.x-k8s.io/v1beta2"
    )
    meta: Obj = {"name": name, "resourceVersion": "9", "annotations": {}}
    if decorator:
        meta["annotations"][DECORATOR] = decorator
    if refs is not None:
        meta["ownerReferences"] = refs
    if kind == "ConfigMap":
        meta["namespace"] = "gpustack-system"
    return {"apiVersion": api, "kind": kind, "metadata": meta}


ADOPTED_REF = {**_ref(), "blockOwnerDeletion": False}


def _written(settings: Obj | None, objects: list[Obj]) -> list[tuple[str, str, Obj | None]]:
    return [
        (w.kind, w.name, w.patch["metadata"]["ownerReferences"])
        for w in ownership_writes(settings, objects)
    ]


def test_a_live_singleton_keeps_what_it_controls() -> None:
    objects = [_obj("ResourceFlavor", "rf", [_ref()]), _obj("InstanceType", "it", [_ref()])]
    assert _written(_settings(), objects) == []


def test_a_singleton_being_deleted_releases_everything_it_controls_and_only_its_reference() -> None:
    other = {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u"}
    objects = [
        _obj("ResourceFlavor", "rf", [_ref()]),
        _obj("Topology", "topo", [_ref()]),
        _obj("InstanceType", "it", [other, _ref()]),
        _obj("ConfigMap", "gpustack-admission-catalog", [_ref()], "gpustack-admission-catalog"),
    ]
    assert _written(_settings(deleting=True), objects) == [
        ("ResourceFlavor", "rf", None),
        ("Topology", "topo", None),
        ("InstanceType", "it", [other]),
        ("ConfigMap", "gpustack-admission-catalog", None),
    ]
    [cm] = [w for w in ownership_writes(_settings(deleting=True), objects) if w.kind == "ConfigMap"]
    assert cm.namespace == "gpustack-system"
    assert cm.patch["metadata"]["resourceVersion"] == "9"


def test_references_to_a_singleton_that_is_gone_are_released() -> None:
    objects = [_obj("ResourceFlavor", "old", [_ref("an-earlier-uid")])]
    assert _written(None, objects) == [("ResourceFlavor", "old", None)]
    # A new singleton does not own what the old one controlled: released, then adopted.
    assert _written(_settings(), objects) == [("ResourceFlavor", "old", None)]


def test_a_new_singleton_adopts_released_flavors_topology_and_catalog_but_no_instance_type() -> (
    None
):
    objects = [
        _obj("ResourceFlavor", "rf", None),
        _obj("Topology", "topo", []),
        _obj("ConfigMap", "gpustack-admission-catalog", None, "gpustack-admission-catalog"),
        _obj("InstanceType", "it", None),
    ]
    assert _written(_settings(), objects) == [
        ("ResourceFlavor", "rf", [ADOPTED_REF]),
        ("Topology", "topo", [ADOPTED_REF]),
        ("ConfigMap", "gpustack-admission-catalog", [ADOPTED_REF]),
    ]


def test_nothing_is_adopted_that_a_chain_decorator_did_not_make_or_that_has_a_controller() -> None:
    foreign = {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u", "controller": True}
    objects = [
        _obj("ResourceFlavor", "by-hand", None, decorator=None),
        _obj("ResourceFlavor", "other-decorator", None, decorator="someone-else"),
        _obj("ConfigMap", "mislabelled", None, decorator="gpustack-flavor-pools"),
        _obj("ResourceFlavor", "controlled", [foreign]),
    ]
    assert _written(_settings(), objects) == []
    assert _written(_settings(deleting=True), objects) == []
    assert _written(None, [_obj("ResourceFlavor", "rf", None)]) == []


class FakeKube:
    def __init__(
        self, fail: dict[str, int], catalog: Obj | None = None, namespace: str = "gpustack-system"
    ) -> None:
        self.fail = fail
        self.catalog = catalog
        self.namespace = namespace
        self.gets = 0
        self.patched: list[tuple[str, str, Obj]] = []

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        self.gets += 1
        assert (kind, name, namespace) == (
            "ConfigMap",
            "gpustack-admission-catalog",
            self.namespace,
        )
        return self.catalog  # type: ignore[return-value]

    def merge_patch(
        self, api_version: str, kind: str, name: str, patch: Obj, namespace: str | None = None
    ) -> Obj:
        if name in self.fail:
            raise KubeError(self.fail[name], "conflict")
        self.patched.append((kind, name, patch))
        return {}


def _queue(name: str, stop: str, decided: str) -> Obj:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"resource.gpustack.ai/type": "instancetypes"},
            "annotations": {RECORD: decided},
        },
        "spec": {"stopPolicy": stop},
    }


def _type(name: str) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": "42"}, "spec": {}}


def _listed(keeper: LifecycleKeeper, **kinds: list[Obj]) -> None:
    for cache in ("queues", "types", "settings", "flavors", "topologies", "instances"):
        getattr(keeper, cache).replace(kinds.get(cache, []), "1")


def test_a_lost_race_is_left_for_the_next_pass_and_the_others_are_written() -> None:
    kube = FakeKube({"a": 409})
    keeper = LifecycleKeeper(kube)  # type: ignore[arg-type]
    _listed(
        keeper,
        queues=[_queue("a", "Hold", "None"), _queue("b", "Hold", "None")],
        types=[_type("a"), _type("b")],
        settings=[_settings()],
    )
    assert keeper.keep_once() == 1
    assert [(kind, name) for kind, name, _ in kube.patched] == [("InstanceType", "b")]


def test_nothing_is_decided_before_every_cache_is_listed() -> None:
    kube = FakeKube({})
    keeper = LifecycleKeeper(kube)  # type: ignore[arg-type]
    keeper.queues.replace([_queue("a", "Hold", "None")], "1")
    keeper.types.replace([_type("a")], "1")
    assert keeper.keep_once() == 0  # no singleton listed yet: one may exist and be going
    _listed(keeper, queues=[_queue("a", "Hold", "None")], types=[_type("a")])
    assert keeper.keep_once() == 1


def test_the_catalog_is_read_once_per_singleton_and_on_every_pass_while_it_goes() -> None:
    catalog = _obj("ConfigMap", "gpustack-admission-catalog", None, "gpustack-admission-catalog")
    kube = FakeKube({}, catalog)
    keeper = LifecycleKeeper(kube)  # type: ignore[arg-type]
    _listed(keeper, settings=[_settings()])
    assert keeper.keep_once() == 1  # adopted
    keeper.keep_once()
    assert kube.gets == 1
    _listed(keeper, settings=[_settings(deleting=True)])
    keeper.keep_once()
    keeper.keep_once()
    assert kube.gets == 3
    _listed(keeper, settings=[_settings("a-new-uid")])
    keeper.keep_once()
    assert kube.gets == 4


def test_an_instance_of_a_draining_pool_is_stopped_in_its_spec() -> None:
    kube = FakeKube({})
    keeper = LifecycleKeeper(kube)  # type: ignore[arg-type]
    instance = {
        "metadata": {"name": "lab", "namespace": "team-a", "resourceVersion": "9"},
        "spec": {"instanceType": "a", "image": "x"},
    }
    _listed(
        keeper,
        queues=[_queue("a", "HoldAndDrain", "HoldAndDrain")],
        types=[{**_type("a"), "spec": {"inactive": True}}],
        settings=[_settings()],
        instances=[instance],
    )
    keeper.keep_once()
    assert ("Instance", "lab", {"metadata": {"resourceVersion": "9"}, "spec": {"stop": True}}) in (
        kube.patched
    )


def test_the_catalog_is_read_in_the_namespace_the_driver_runs_in() -> None:
    """A Helm release elsewhere: the catalog is in the driver's `--webhook-namespace`."""
    catalog = _obj("ConfigMap", "gpustack-admission-catalog", None, "gpustack-admission-catalog")
    kube = FakeKube({}, catalog, namespace="infra")
    keeper = LifecycleKeeper(kube, "infra")  # type: ignore[arg-type]
    _listed(keeper, settings=[_settings()])
    assert keeper.keep_once() == 1
    assert kube.gets == 1
