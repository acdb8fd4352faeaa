"""The running agent: detect, then write what was found (`python -m nodeagent serve`).

Each detection round reports three things about this agent's node, each written only when it
differs from what the API already holds:

- the NodeFeature `<node>-gpustack-device-manager` (its labels reach the Node through nfd-master);
- the `Devices` object named after the node (spec only; owned by the Node). Each agent applies
  only the groups of the manufacturers it serves, under a field manager of its own, so agents of
  different manufacturers on one node never overwrite each other's groups;
- the counting keys on the Node's `status.capacity` (docs/design/control-plane.md, "Counting keys"),
  as a merge patch that also nulls the keys that no longer apply;
- the fit labels on the Node (`sliced-max-free-units.fit.gpustack.ai/<aKey>`,
  `shared-free-cards.fit.gpustack.ai/<aKey>`, docs/design/control-plane.md, "Fit labels") from the
  Devices ledger, which the Workload webhook pins against.

A group whose logical slices this node cannot hand out is published without them (`slicing`):
its manufacturer's slices are not served here, or the isolation library a slice preloads is not
usable (`nodeagent/plugin/isolation.py`; the group then says why in `slicingUnavailable`, and
the Node gets a `SlicingUnavailable` Event). The check runs on every report and on every
monitor round, so a library staged or removed later moves the node within one period.

With `ledger` on (the agent serves the device plugins, `--device-plugin-dir`), the Reporter also
keeps the ledger: `Devices.status` rebuilt from the allocation annotations of the node's Pods,
applied on the status subresource when it differs from what the API holds. A record the journal
could not land on its Pod (refused by the API server, or failing for that Pod alone) is charged
from the journal instead and listed beside the ledger (`status.unrecorded`) until it lands.
The ledger is checked on every monitor round and, when the device plugins follow the node's
Pods (`serve`), on every Pod change (`write_ledger`, reading the Pods from their cache, and the
fit labels with it), so an allocation or a finished Pod reaches the ledger and the fit labels
within moments. Without it the agent never touches `status`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from chain.conditions import find, generation_of, merge
from chain.devices import DEVICES_API, DEVICES_KIND, Devices, DevicesGroup
from chain.fit import fit_label_patch, fit_labels
from chain.labels import is_fit_label_key, is_managed
from chain.ledger import UnrecordedRecord
from chain.ledger_rebuild import PodAllocations, rebuild_status, with_unrecorded
from chain.manufacturers import ManufacturerTable
from chain.times import timestamp
from kubeapi import Kube, Obj
from kubeapi.events import WARNING, EventRecorder
from kubeapi.watch import Cache
from nodeagent.capacity import is_counting_key, node_capacity_patch
from nodeagent.detect.loop import DetectionRound
from nodeagent.devices_conditions import devices_conditions
from nodeagent.metrics import LEDGER
from nodeagent.node_events import ACTION, detection_events, held_back_event, slicing_events
from nodeagent.plugin.isolation import OFFERED, Slicing
from nodeagent.report import NODE_FEATURE_API, NODE_FEATURE_KIND, devices_object, node_feature
from nodeagent.topology.nics import NodeNetwork

log = logging.getLogger("nodeagent")

FIELD_MANAGER = "gpustack-device-manager"
LEDGER_MANAGER = "gpustack-device-manager-ledger"


def _manager(owned: tuple[str, ...]) -> str:
    return f"{FIELD_MANAGER}-{'-'.join(sorted(owned))}" if len(owned) < 9 else FIELD_MANAGER


def _without_server_fields(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (obj or {}).items() if k not in ("status", "metadata")}


def _pod_identity(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))


def slicing_verdicts(
    groups: Sequence[DevicesGroup],
    owned: Sequence[str],
    slicing: Callable[[DevicesGroup], Slicing],
) -> dict[str, Slicing]:
    """By aKey, whether this node can hand out the logical slices of each group of `owned`
    manufacturers that offers some (a group offering none has nothing to check)."""
    return {
        group.accelerator_key: slicing(group)
        for group in groups
        if group.manufacturer in owned and group.offers_logical_slices
    }


def published_groups(
    groups: Sequence[DevicesGroup], owned: Sequence[str], verdicts: Mapping[str, Slicing]
) -> list[DevicesGroup]:
    """The detected groups of `owned` manufacturers as the node publishes them: without the
    logical slices of a group whose `verdicts` entry says they cannot be handed out, with the
    reason in `slicingUnavailable` when it is this node's fault (not when the manufacturer's
    slices are simply not served)."""
    published = []
    for group in groups:
        if group.manufacturer not in owned:
            continue
        verdict = verdicts.get(group.accelerator_key, OFFERED)
        published.append(
            group if verdict.offered else group.without_logical_slices(verdict.problem)
        )
    return published


def as_reported(read: Obj, written: Obj, table: ManufacturerTable) -> Obj:
    """The Node as a report leaves it, in the report's own eyes: the labels and capacity of
    `read` (the Node its decisions were made from), with the keys the report owns (counting
    keys, fit labels) as `written` (its last write's answer) holds them, in the API server's
    spelling of the quantities.

    Not `written` itself: another writer's change that lands between the read and that write
    (nfd-master's labels, provoked by the NodeFeature the report writes; the kubelet's count of
    sliced tokens) is in it, though no decision of the report saw it. Taken as reported, it
    would wake neither the label waker nor a monitor round, and the Node would keep what the
    report decided without it until the next re-detection (#35)."""
    read_meta, written_meta = read.get("metadata") or {}, written.get("metadata") or {}
    labels = {
        **{k: v for k, v in (read_meta.get("labels") or {}).items() if not is_fit_label_key(k)},
        **{k: v for k, v in (written_meta.get("labels") or {}).items() if is_fit_label_key(k)},
    }
    read_capacity = (read.get("status") or {}).get("capacity") or {}
    written_capacity = (written.get("status") or {}).get("capacity") or {}
    capacity = {
        **{k: v for k, v in read_capacity.items() if not is_counting_key(k, table)},
        **{k: v for k, v in written_capacity.items() if is_counting_key(k, table)},
    }
    return {
        **written,
        "metadata": {**written_meta, "labels": labels},
        "status": {**(written.get("status") or {}), "capacity": capacity},
    }


@dataclass
class Reporter:
    """Writes one detection round for `node`; the `report` callback of the detect loop."""

    kube: Kube
    node: str
    namespace: str
    owned: tuple[str, ...]
    table: ManufacturerTable
    ledger: bool = False
    """Write `Devices.status` from the node's Pods (only when serving the device plugins)."""
    release_terminated: bool = True
    pods: Callable[[], Sequence[Mapping[str, Any]]] | None = None
    """Where the node's Pods are read (the plugins' cache); a Pod list from the API if unset."""
    unrecorded: Callable[[], Sequence[UnrecordedRecord]] | None = None
    """The records this agent's journal could not land on their Pods (`NodeRecords.unrecorded`):
    the ledger charges them and lists them (`status.unrecorded`) until they land."""
    events: EventRecorder | None = None
    """Where detection changes become Events on the Node (`node_events`); None: not recorded."""
    network: Callable[[], NodeNetwork] | None = None
    """Reads the node's network cards (`nodeagent.topology.nics.read_network`) once per round,
    for `spec.interfaces` and the RDMA label; None: neither is written."""
    slicing: Callable[[DevicesGroup], Slicing] = field(default=lambda group: OFFERED)
    """Whether this node can hand out a group's logical slices (`IsolationCheck` where the agent
    serves the device plugins); the slices of a group it cannot are not published (no pool,
    quota, counting key, view or fit label then promises them)."""
    _detected: tuple[DevicesGroup, ...] = field(default=(), init=False)
    _verdicts: dict[str, Slicing] = field(default_factory=dict, init=False)
    """The last report's groups and their slicing verdicts (what a monitor round compares)."""
    clock: Callable[[], float] = time.time
    """The transition time of a condition that flips (`chain.conditions`)."""
    _measured: dict[str, tuple[int, str | None]] = field(default_factory=dict, init=False)
    """The last round's passes of this agent's manufacturers: (cards, error or None)."""
    _reported: str = field(default="", init=False)
    """The signature of the Node as the last report left it in its own eyes (`as_reported`)."""
    reported_labels: dict[str, str] | None = field(default=None, init=False)
    """The Node's labels as the last report left them in its own eyes (`as_reported`: those it
    read, with its fit labels as written); what the loop's sleep compares with."""
    _ledger_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def _node_signature(self, node: Obj, devices: Obj | None) -> str:
        """What the report depends on: the Node's labels and capacity, and the ledger."""
        return repr(
            (
                sorted((node["metadata"].get("labels") or {}).items()),
                sorted(((node.get("status") or {}).get("capacity") or {}).items()),
                (devices or {}).get("status"),
            )
        )

    def node_changed(self) -> bool:
        """True when the Node or its ledger moved since the last report (a label, the kubelet's
        tokens, an allocation), or a group's slicing verdict did (a library staged or gone)."""
        if self._slicing_moved():
            log.info("the slicing of a group on %s changed: reporting now", self.node)
            return True
        try:
            node = self.kube.get("v1", "Node", self.node)
            devices = self.kube.get(DEVICES_API, DEVICES_KIND, self.node)
            if self.ledger and devices is not None:
                devices = self._write_ledger(devices)
            if devices is not None and self._measured:
                devices = self._write_conditions(devices)
        except Exception as error:  # the next round reports the failure properly
            log.warning("reading Node %s failed: %s", self.node, error)
            return False
        return node is not None and self._node_signature(node, devices) != self._reported

    def __call__(self, current: DetectionRound) -> None:
        node = self.kube.get("v1", "Node", self.node)
        if node is None:
            raise RuntimeError(f"Node {self.node} does not exist")
        verdicts = slicing_verdicts(current.groups, self.owned, self.slicing)
        groups = published_groups(current.groups, self.owned, verdicts)
        network = self.network() if self.network is not None else None
        self._node_feature(groups, node["metadata"]["uid"], network)
        devices = self._devices(node, groups, network)
        if devices is not None and not self.ledger:
            LEDGER.observe(devices)  # no ledger to keep: the cards alone
        if self.ledger and devices is not None:
            devices = Devices.parse(self._write_ledger(devices.render()))
        self._measured = {
            entry.manufacturer: (
                sum(len(group.accelerators) for group in entry.groups),
                None if entry.measured else entry.error,
            )
            for entry in current.passes
            if entry.manufacturer in self.owned
        }
        if devices is not None:
            raw = self.kube.get(DEVICES_API, DEVICES_KIND, self.node)
            if raw is not None:
                self._write_conditions(raw)
        written = self._fit_labels(self._capacity(node, devices), devices)
        reported = as_reported(node, written, self.table)
        self.reported_labels = dict(reported["metadata"].get("labels") or {})
        self._reported = self._node_signature(
            reported, self.kube.get(DEVICES_API, DEVICES_KIND, self.node)
        )
        self._detected, self._verdicts = tuple(current.groups), verdicts

    def _slicing_moved(self) -> bool:
        """Whether a group of the last report would get another slicing verdict now."""
        if not self._verdicts:
            return False
        return slicing_verdicts(self._detected, self.owned, self.slicing) != self._verdicts

    def _node_feature(
        self, groups: list[Any], node_uid: str, network: NodeNetwork | None = None
    ) -> None:
        desired: dict[str, Any] = node_feature(self.node, self.namespace, groups, node_uid, network)
        name = desired["metadata"]["name"]
        existing = self.kube.get(NODE_FEATURE_API, NODE_FEATURE_KIND, name, self.namespace)
        owners = (existing or {}).get("metadata", {}).get("ownerReferences")
        if (
            existing is None
            or existing.get("spec") != desired["spec"]
            or owners != desired["metadata"]["ownerReferences"]
        ):
            self.kube.apply(desired, _manager(self.owned))
            log.info("NodeFeature %s/%s written", self.namespace, name)

    def _devices(
        self, node: Obj, groups: list[Any], network: NodeNetwork | None = None
    ) -> Devices | None:
        meta = node["metadata"]
        existing = self.kube.get(DEVICES_API, DEVICES_KIND, self.node)
        self._record(node, existing, groups)
        desired: dict[str, Any] = devices_object(
            self.node, meta["uid"], meta.get("labels") or {}, groups, self.owned, existing, network
        )
        have_labels = ((existing or {}).get("metadata") or {}).get("labels") or {}
        want_labels: dict[str, str] = desired["metadata"]["labels"]
        if (
            existing is None
            or _without_server_fields(existing) != _without_server_fields(desired)
            or any(have_labels.get(k) != v for k, v in want_labels.items())
        ):
            # Apply only our manufacturers' groups: the API server merges the list by
            # (id, manufacturer) and keeps other agents' groups under their own managers.
            own_groups = [g for g in desired["spec"]["groups"] if g["manufacturer"] in self.owned]
            spec: dict[str, Any] = {"groups": own_groups}
            if "interfaces" in desired["spec"]:
                # Left out when the node has none: server-side apply then drops what we wrote.
                spec["interfaces"] = desired["spec"]["interfaces"]
            mine = {**desired, "spec": spec}
            written = self.kube.apply(mine, _manager(self.owned))
            log.info("Devices %s written (%d groups)", self.node, len(own_groups))
            return Devices.parse(written)
        return Devices.parse(existing)

    def _record(self, node: Obj, existing: Obj | None, groups: Sequence[DevicesGroup]) -> None:
        """Events on the Node for what changed since the Devices spec the API server holds."""
        if self.events is None:
            return
        before = None
        if existing is not None:
            try:
                held = Devices.parse(existing).spec.groups
            except ValueError as err:
                log.warning("Devices %s unreadable, its cards taken as new: %s", self.node, err)
                held = ()
            before = [group for group in held if group.manufacturer in self.owned]
        for change in detection_events(before, groups):
            self.events.event(node, change.type, change.reason, change.note, ACTION)
        for change in slicing_events(before, groups):
            level = logging.WARNING if change.type == WARNING else logging.INFO
            log.log(level, "%s", change.note)
            self.events.event(node, change.type, change.reason, change.note, ACTION)

    def held_back(self, message: str) -> None:
        """The hold-back, as an Event on the Node (repeats fold into its count)."""
        if self.events is None:
            return
        node = self.kube.get("v1", "Node", self.node)
        if node is not None:
            change = held_back_event(message)
            self.events.event(node, change.type, change.reason, change.note, ACTION)

    def write_ledger(self) -> None:
        """Write the ledger now, if it moved (the node's Pods changed), and the fit labels with
        it: the Workload webhook pins Workloads by them, so they must not wait for a round."""
        devices = self.kube.get(DEVICES_API, DEVICES_KIND, self.node)
        if not self.ledger or devices is None:
            return
        written = self._write_ledger(devices)
        if written is devices:
            return
        node = self.kube.get("v1", "Node", self.node)
        if node is not None:
            self._fit_labels(node, Devices.parse(written))

    def _write_ledger(self, devices: Obj) -> Obj:
        """Apply the ledger the node's Pods add up to, when it differs; the Devices object."""
        with self._ledger_lock:  # the detect loop and the Pod-following thread both write
            return self._write_ledger_locked(devices)

    def _write_ledger_locked(self, devices: Obj) -> Obj:
        current = Devices.parse(devices)
        if self.pods is not None:
            pods: Sequence[Mapping[str, Any]] = self.pods()
        else:
            pods = self.kube.list("v1", "Pod", field_selector=f"spec.nodeName={self.node}")
        listed = self._unrecorded(current, pods)
        charged = [PodAllocations.from_pod(pod) for pod in with_unrecorded(pods, listed)]
        rebuilt = rebuild_status(current.spec, charged, self.release_terminated)
        ledger = Devices(current.name, current.spec, rebuilt.status, unrecorded=listed)
        LEDGER.observe(ledger)
        summary = ledger.summary()
        shown = (devices.get("status") or {}).get("summary")
        if rebuilt.status == current.status and shown == summary and listed == current.unrecorded:
            return devices
        for problem in rebuilt.problems:
            log.warning("ledger of %s: %s", self.node, problem)
        body: dict[str, Any] = {
            "apiVersion": DEVICES_API,
            "kind": DEVICES_KIND,
            "metadata": {"name": self.node},
            "status": {**ledger.render_status(), "summary": summary},
        }
        written = self.kube.apply(body, LEDGER_MANAGER, subresource="status")
        log.info("Devices %s ledger written", self.node)
        return written

    def _write_conditions(self, devices: Obj) -> Obj:
        """Apply this agent's conditions (its manufacturers' Detected, and the node's
        SlicingAvailable and Ready, `nodeagent.devices_conditions`) when they differ from those the
        Devices object holds; the Devices object. Under a field manager of the agent's own, so
        agents of other manufacturers keep their Detected conditions beside these."""
        held = (devices.get("status") or {}).get("conditions")
        try:
            groups = Devices.parse(devices).spec.groups
        except ValueError as err:
            log.warning("Devices %s unreadable, conditions not written: %s", self.node, err)
            return devices
        wanted = devices_conditions(self._measured, groups, held)
        conditions = merge(held, wanted, generation_of(devices), timestamp(self.clock()))
        if all(find(held, entry["type"]) == entry for entry in conditions):
            return devices
        body: dict[str, Any] = {
            "apiVersion": DEVICES_API,
            "kind": DEVICES_KIND,
            "metadata": {"name": self.node},
            "status": {"conditions": conditions},
        }
        written = self.kube.apply(body, f"{_manager(self.owned)}-conditions", "status")
        log.info("Devices %s conditions written", self.node)
        return written

    def _unrecorded(
        self, current: Devices, pods: Sequence[Mapping[str, Any]]
    ) -> tuple[UnrecordedRecord, ...]:
        """What the ledger lists as charged from a journal rather than a Pod: this agent's own
        records (as its writer has them now), and those another agent of the node listed (each
        agent rewrites the whole ledger, so it carries the others' entries along), each only
        while its Pod (that uid) is on the node."""
        agent = ",".join(sorted(self.owned))
        mine = [replace(entry, agent=agent) for entry in (self.unrecorded or tuple)()]
        others = [entry for entry in current.unrecorded if entry.agent != agent]
        live = {_pod_identity(pod) for pod in pods}
        kept = {
            entry.uid: entry
            for entry in (*others, *mine)
            if (entry.namespace, entry.name, entry.uid) in live
        }
        return tuple(kept[uid] for uid in sorted(kept))

    def _capacity(self, node: Obj, devices: Devices | None) -> Obj:
        labels = node["metadata"].get("labels") or {}
        capacity = (node.get("status") or {}).get("capacity") or {}
        patch = node_capacity_patch(labels, capacity, devices, self.table)
        body = patch.merge_patch()
        if not body:
            return node
        log.info("Node %s counting keys: %s", self.node, body["status"])
        return self.kube.merge_patch("v1", "Node", self.node, body, subresource="status")

    def _fit_labels(self, node: Obj, devices: Devices | None) -> Obj:
        labels = node["metadata"].get("labels") or {}
        patch = fit_label_patch(labels, fit_labels(devices, is_managed(labels)))
        if not patch:
            return node
        log.info("Node %s fit labels: %s", self.node, patch)
        return self.kube.merge_patch("v1", "Node", self.node, {"metadata": {"labels": patch}})


class Stopping(threading.Event):
    """Set when the agent is told to stop; `since` is when (monotonic), None before."""

    def __init__(self) -> None:
        super().__init__()
        self.since: float | None = None

    def stopped(self) -> None:
        """The last line of a stopped agent: how long its shutdown took, which a DaemonSet
        roll's test reads from the old Pod's log (docs/operations.md, "What running Pods see
        during an upgrade")."""
        if self.since is not None:
            log.info("stopped %.2f s after the signal", time.monotonic() - self.since)


def stop_on_signals(wake: Callable[[], None] = lambda: None) -> Stopping:
    """An event set on SIGTERM/SIGINT (a DaemonSet Pod being replaced). The loop's sleeps wait
    on it, so the agent stops at once rather than after its current monitor period (the
    kubelet kills it after the grace period otherwise). `wake` then rouses what the sleep
    waits on (the Node cache), so it looks at the event now, not at its next poll."""
    stopping = Stopping()

    def handler(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        if stopping.since is None:
            stopping.since = time.monotonic()
        stopping.set()
        wake()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stopping


LABEL_POLL_SECONDS = 1.0
"""The longest a sleep waits on the Node cache before looking at the stop event again, if
nothing wakes it (a stop signal does: `stop_on_signals`)."""


def label_waker(
    stopping: threading.Event,
    nodes: Cache,
    node: str,
    reported: Callable[[], Mapping[str, str] | None],
) -> Callable[[float], None]:
    """The detect loop's sleep: it ends early on a stop signal, or when the Node's labels differ
    from those of the last report (`reported`), so fit labels that depend on them (the flavor
    hook's `gpustack.ai/managed`, NFD's labels arriving after the first report) are written at
    once rather than at the next monitor tick. Comparing with the report, not with the labels
    at the sleep's start, catches a change that landed while the report ran. `nodes` is a watch
    cache of this Node; a status-only write (the kubelet's heartbeat) does not wake it, nor does
    a label set it already woke for (the cache may trail the report's own writes)."""
    woken: list[dict[str, str] | None] = [None]

    def labels() -> dict[str, str] | None:
        found = nodes.get(("", node))
        return None if found is None else dict(found["metadata"].get("labels") or {})

    def sleep(seconds: float) -> None:
        end = time.monotonic() + seconds
        seen = nodes.changes
        while not stopping.is_set():
            now = labels()
            last = reported()
            if now is not None and last is not None and now != last and now != woken[0]:
                woken[0] = now
                log.info("Node %s labels changed: reporting now", node)
                return
            left = end - time.monotonic()
            if left <= 0:
                return
            seen = nodes.wait(seen, min(left, LABEL_POLL_SECONDS), stopping)

    return sleep


def node_name(flag: str | None) -> str:
    name = flag or os.environ.get("NODE_NAME", "")
    if not name:
        raise ValueError("--node (or $NODE_NAME, from the downward API) is required")
    return name
