"""`python -m nodeagent preflight`: what a bare host offers, asked the way Allocate will ask it.

Three questions per manufacturer, each answerable on its own (docs/design/node-agent.md, "Preflight
output"):

1. **are the devices detected**: the detect pass the agent runs, cross-checked against the host's
   own vendor CLI where one is established (`nvidia-smi -L`, `npu-smi info -l`,
   `rocm-smi --showuniqueid`), reached through the host root (`--host-root`, entered with
   `chroot`). A count that differs from the detector's is `unavailable`: the host has cards this
   agent cannot see.
2. **can they be sliced**: the isolation library a slice of each group preloads is staged on
   the host and loads there (`isolation-library`, one row per group, by the agent's own check,
   `plugin/isolation.py`: present, an ELF shared object of the host's machine, `dlopen` in a
   subprocess; a group failing it is published without slices); the manufacturer's own
   responder renders a slice of each card (half its memory and compute), and the quota it would
   inject is asserted on (`sliced-quota-in-force`); the card's slice has its runtime only when
   its group's library is usable (`sliced-runtime-loaded`).
3. **can they be managed while sliced**: `sidecar-visibility` (an owner's slice, then its
   sidecar's visibility grant, which must name nothing the owner was not granted) and
   `co-tenancy` (two slices of one card, each with its own quota).

Every row is `ok`, `unavailable` (offered, and this pass did not establish it: the allocation it
guards is refused) or `not-declared` (not offered: nothing to check), at the depth it reached:
`declared` (the driver answered), `simulated` (the allocator's own code produced the artifact and
it was asserted on; nothing on the hardware changed) or `measured` (something ran and was
observed). This preflight starts no probe container: only `isolation-library` is `measured` (the
library was loaded in a subprocess, or found unusable); each other row says why it went no
deeper. Only `unavailable` makes the exit status 1.

Nothing on the host changes: slices render into a throwaway directory, Ascend's container-share
flag is read, never written, MetaX's `sgpu` subdevices and Cambricon's sMLU instances are read,
never made.
"""

from __future__ import annotations

import enum
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chain.devices import DevicesGroup
from chain.ledger import Mode
from chain.manufacturers import ManufacturerTable
from nodeagent.detect.remembered import DetectionPass
from nodeagent.plugin.grants import (
    DeviceNodes,
    GrantedCard,
    Responder,
    SlicedLimits,
    SliceRequest,
)
from nodeagent.plugin.injection import Channel
from nodeagent.plugin.isolation import OFFERED, IsolationCheck, Slicing
from nodeagent.plugin.responders import RESPONDERS
from nodeagent.plugin.response import ContainerResponse
from nodeagent.simulate.base import SimulatedHost
from nodeagent.vendors.registry import PARTITION_NAMINGS, vendor_named

NO_PROBE = (
    "no probe container was started: this preflight renders the allocation, it does not run it"
)
Runner = Callable[[Sequence[str]], tuple[int, str]]
"""Runs a host command: (exit status, standard output); OSError when it cannot start."""


class State(enum.StrEnum):
    OK = "ok"
    UNAVAILABLE = "unavailable"
    NOT_DECLARED = "not-declared"


class Depth(enum.StrEnum):
    DECLARED = "declared"
    SIMULATED = "simulated"
    MEASURED = "measured"


@dataclass(frozen=True)
class Check:
    accelerator: str
    capability: str
    mode: str
    state: State
    depth: Depth
    detail: str = ""
    reason: str = ""

    def render(self) -> dict[str, Any]:
        return _without_empty(
            {
                "accelerator": self.accelerator,
                "capability": self.capability,
                "mode": self.mode,
                "state": str(self.state),
                "depth": str(self.depth),
                "detail": self.detail,
                "reason": self.reason,
            }
        )


@dataclass(frozen=True)
class HostAnswer:
    command: str
    accelerators: int | None = None
    detail: str = ""
    reason: str = ""
    missing_mounts: tuple[str, ...] = ()

    def render(self) -> dict[str, Any]:
        return _without_empty(
            {
                "command": self.command,
                "accelerators": self.accelerators,
                "detail": self.detail,
                "reason": self.reason,
                "missingMounts": list(self.missing_mounts),
            }
        )


@dataclass(frozen=True)
class Detection:
    state: State
    depth: Depth
    accelerators: int
    detail: str = ""
    reason: str = ""
    host: HostAnswer | None = None

    def render(self) -> dict[str, Any]:
        return _without_empty(
            {
                "state": str(self.state),
                "depth": str(self.depth),
                "accelerators": self.accelerators,
                "detail": self.detail,
                "reason": self.reason,
                "host": self.host.render() if self.host else None,
            }
        )


@dataclass(frozen=True)
class ManufacturerReport:
    manufacturer: str
    timestamp: str
    detection: Detection
    checks: tuple[Check, ...] = ()
    note: str = ""

    def render(self) -> dict[str, Any]:
        return _without_empty(
            {
                "manufacturer": self.manufacturer,
                "timestamp": self.timestamp,
                "detection": self.detection.render(),
                "checks": [check.render() for check in self.checks],
                "note": self.note,
            },
            keep=("checks",),
        )

    def states(self) -> Iterable[State]:
        yield self.detection.state
        yield from (check.state for check in self.checks)


@dataclass(frozen=True)
class Report:
    accelerators: tuple[ManufacturerReport, ...]
    timestamp: str

    def render(self) -> dict[str, Any]:
        return {
            "accelerators": [entry.render() for entry in self.accelerators],
            "network": {
                "timestamp": self.timestamp,
                "checks": [],
                "note": "the RDMA network checks are not part of this preflight",
            },
            "topology": {
                "timestamp": self.timestamp,
                "policy": "unknown",
                "depth": str(Depth.DECLARED),
                "note": "the kubelet's topology manager policy is not read by this preflight",
            },
        }

    def exit_status(self) -> int:
        """1 when any answer is `unavailable` (an allocation would be refused), else 0."""
        unavailable = any(
            state == State.UNAVAILABLE for entry in self.accelerators for state in entry.states()
        )
        return 1 if unavailable else 0


def _without_empty(values: Mapping[str, Any], keep: Sequence[str] = ()) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k in keep or v not in ("", None, [], {})}


# --- Question 1: detected? ----------------------------------------------------------------


def count_host_cards(manufacturer: str, output: str) -> int:
    """The cards a vendor CLI lists (its own words, read by its `Vendor.host_reader`)."""
    vendor = vendor_named(manufacturer)
    if vendor is None or vendor.host_reader is None:
        raise ValueError(f"{manufacturer} has no established CLI that lists its cards")
    return vendor.host_reader.count(output)


def ask_host(manufacturer: str, host_root: str, run: Runner) -> HostAnswer | None:
    """The host CLI's count, or why it could not be had; None without an established CLI."""
    vendor = vendor_named(manufacturer)
    if vendor is None or vendor.host_reader is None:
        return None
    command = vendor.host_reader.command
    shown = " ".join(command)
    if not Path(host_root).is_dir():
        return HostAnswer(
            shown,
            reason=f"no host root is mounted at {host_root}: the host's own CLI was not asked",
            missing_mounts=(host_root,),
        )
    argv = list(command) if host_root == "/" else ["chroot", host_root, *command]
    try:
        status, output = run(argv)
    except OSError as error:
        return HostAnswer(shown, reason=f"{command[0]} could not be run on the host: {error}")
    if status != 0:
        return HostAnswer(shown, reason=f"{shown} exited {status} on the host")
    count = vendor.host_reader.count(output)
    return HostAnswer(shown, count, detail=f"{count} cards listed by the host")


def detection_answer(found: DetectionPass, host: HostAnswer | None) -> Detection:
    cards = sum(len(group.accelerators) for group in found.groups)
    if not found.measured:
        return Detection(
            State.UNAVAILABLE,
            Depth.DECLARED,
            cards,
            reason=f"the detect pass could not measure: {found.error}",
            host=host,
        )
    if host is not None and host.accelerators is not None and host.accelerators != cards:
        return Detection(
            State.UNAVAILABLE,
            Depth.DECLARED,
            cards,
            reason=f"the host lists {host.accelerators} cards and this agent detects {cards}: "
            "cards the agent cannot see would never be offered",
            host=host,
        )
    detail = (
        f"{cards} cards detected" if cards else "no accelerator of this manufacturer is present"
    )
    return Detection(State.OK, Depth.DECLARED, cards, detail=detail, host=host)


# --- Questions 2 and 3: sliced, and managed while sliced -------------------------------------


@dataclass
class Rehearsal:
    """Renders allocations with a manufacturer's responder into a throwaway pods directory."""

    responder: Responder
    runtime: str
    """The manufacturer's RuntimeClass, which the rehearsed Pod names (as a correct one does)."""
    nodes: DeviceNodes
    pods_dir: str
    lib_dir: str
    """Where the slice's libraries are staged (the isolation check's directory)."""

    def _channel(self) -> Channel:
        maker = self.responder.manufacturer
        return Channel(maker, self.runtime, pod_runtime_class=self.runtime)

    def slice(self, card: GrantedCard, container: str, share: int) -> ContainerResponse:
        """A slice of `share` percent of the card's memory and compute (a spatial partition
        such as Hygon's then leaves the rehearsal's next slices their room)."""
        limits = SlicedLimits(cores_percentage=share, memory_percentage=share)
        pod = f"preflight-{card.card.index}"  # one rehearsed Pod per card
        request = SliceRequest(
            limits, pod, container, self._channel(), pods_dir=self.pods_dir, lib_dir=self.lib_dir
        )
        return self.responder.sliced((card,), request, self.nodes)

    def shown(self, card: GrantedCard, mode: Mode) -> ContainerResponse:
        return self.responder.shown((card,), mode, self._channel(), self.nodes)


QUOTA_FILES = (".config", ".conf")
"""Quota files a slice's runtime reads (Ascend's `npu_info.config`, Hygon's `vdev<i>.conf`)."""
QUOTA_WORDS = ("quota", "cu_count", "mem:")
QUOTA_VARIABLES = ("LIMIT", "QUOTA", "QOS", "CU_MASK", "SGPUS", "VIRTUAL_DEVICES")
"""Variables that carry a slice's limits, or name the driver object that enforces them (MetaX's
subdevice, Cambricon's sMLU instance)."""


def quota_of(response: ContainerResponse) -> str:
    """What a sliced response says the container's limit is: its quota variables, and the
    quota lines of the files it mounts (a file, or the files of a mounted directory)."""
    quota = sorted(
        f"{name}={value}"
        for name, value in response.envs.items()
        if any(word in name for word in QUOTA_VARIABLES)
    )
    for mount in response.mounts:
        source = Path(mount.host_path)
        files = sorted(source.iterdir()) if source.is_dir() else [source]
        for path in files:
            if path.suffix in QUOTA_FILES and path.is_file():
                lines = path.read_text().splitlines()
                quota += [line for line in lines if any(w in line for w in QUOTA_WORDS)]
    return ", ".join(quota)


ISOLATION_LIBRARY = "isolation-library"


def isolation_row(
    group: DevicesGroup, responder: Responder, isolation: IsolationCheck
) -> tuple[Check, Slicing]:
    """Whether the isolation library a slice of the group preloads is staged and loads here,
    by the agent's own check (what decides whether the node publishes the group's slices)."""
    name = group.accelerator_key
    files = responder.isolation_libraries(group, isolation.lib_dir)
    if not files:
        why = "a slice preloads no library: the driver or a host runtime enforces it"
        return Check(name, ISOLATION_LIBRARY, "sliced", State.OK, Depth.DECLARED, why), OFFERED
    verdict = isolation.verdict(responder, group)
    if verdict.problem:
        reason = (
            f"{verdict.problem}: the node publishes the group without logical slices, so a "
            "sliced allocation is refused; the device manager DaemonSet must stage the library"
        )
        return Check(
            name, ISOLATION_LIBRARY, "sliced", State.UNAVAILABLE, Depth.MEASURED, reason=reason
        ), verdict
    loaded = ", ".join(f.path for f in files if f.shared_object)
    detail = f"staged, and loaded by dlopen in a subprocess: {loaded}"
    return Check(name, ISOLATION_LIBRARY, "sliced", State.OK, Depth.MEASURED, detail), verdict


def refused(name: str, capability: str, mode: str, reason: str) -> Check:
    """A rendering the allocator's own code refused: the allocation would be refused too."""
    return Check(name, capability, mode, State.UNAVAILABLE, Depth.SIMULATED, reason=reason)


def rendered(name: str, capability: str, mode: str, detail: str, reason: str = NO_PROBE) -> Check:
    """A rendering that was produced and asserted on, nothing run."""
    return Check(name, capability, mode, State.OK, Depth.SIMULATED, detail=detail, reason=reason)


def injection_check(rehearsal: Rehearsal, card: GrantedCard) -> Check:
    """A whole card's injection: what the container would be given, every node on the host."""
    name = card.card.id
    try:
        shown = rehearsal.shown(card, Mode.EXCLUSIVE)
    except Exception as error:
        return refused(name, "whole-card-injection", "exclusive", str(error))
    given = [f"{k}={v}" for k, v in sorted(shown.envs.items())]
    given += [device.host_path for device in shown.devices]
    return rendered(name, "whole-card-injection", "exclusive", ", ".join(given) or "nothing")


def card_checks(rehearsal: Rehearsal, card: GrantedCard, slicing: Slicing) -> list[Check]:
    """The card's rows; `slicing` is its group's isolation verdict."""
    name = card.card.id
    maker = rehearsal.responder.manufacturer
    checks: list[Check] = []
    if card.card.is_partitioned:
        if maker in PARTITION_NAMINGS:  # NVIDIA's and T-Head's MIG, made at Allocate
            profiles = len(card.card.status.physical_sliced.profiles)
            detail = f"MIG mode on: {profiles} profiles offered"
            checks.append(
                Check(name, "mig-partitioning", "partitioned", State.OK, Depth.DECLARED, detail)
            )
        else:
            checks.append(
                Check(
                    name,
                    "partitioning",
                    "partitioned",
                    State.UNAVAILABLE,
                    Depth.DECLARED,
                    reason=f"the card is in a partitioning mode and this agent serves no "
                    f"{maker} partitions",
                )
            )
        return checks
    checks.append(injection_check(rehearsal, card))
    if not card.card.is_logically_sliceable:
        return checks + [
            Check(name, capability, "sliced", State.NOT_DECLARED, Depth.DECLARED)
            for capability in ("sliced-runtime-loaded", "sliced-quota-in-force")
        ]
    if not rehearsal.responder.slices:
        why = f"this agent serves no {maker} slices, so the node does not publish them"
        return checks + [
            Check(name, capability, "sliced", State.NOT_DECLARED, Depth.DECLARED, reason=why)
            for capability in ("sliced-runtime-loaded", "sliced-quota-in-force")
        ]
    try:
        owner = rehearsal.slice(card, "main", 50)
    except Exception as error:
        return checks + [
            refused(name, capability, "sliced", str(error))
            for capability in ("sliced-quota-in-force", "sidecar-visibility", "co-tenancy")
        ]
    if slicing.problem:
        why = f"the isolation library is not usable ({ISOLATION_LIBRARY}): {slicing.problem}"
        checks.append(refused(name, "sliced-runtime-loaded", "sliced", why))
    else:
        staged = f"every library the slice preloads is staged and loads ({ISOLATION_LIBRARY}); "
        checks.append(rendered(name, "sliced-runtime-loaded", "sliced", "", staged + NO_PROBE))
    checks.append(rendered(name, "sliced-quota-in-force", "sliced", quota_of(owner)))
    checks.append(sidecar_check(rehearsal, card, owner))
    checks.append(co_tenancy_check(rehearsal, card))
    return checks


def sidecar_check(rehearsal: Rehearsal, card: GrantedCard, owner: ContainerResponse) -> Check:
    """The sidecar is shown its owner's card and nothing more: every node and variable value it
    gets is one the owner's slice or a whole grant of that same card carries (the sidecar's
    answer is the non-sliced one, so a slice's narrower node set is not the bound)."""
    name = card.card.id
    try:
        sidecar = rehearsal.shown(card, Mode.VISIBILITY)
        whole = rehearsal.shown(card, Mode.EXCLUSIVE)
    except Exception as error:
        return refused(name, "sidecar-visibility", "visibility", str(error))
    wider = set(sidecar.devices) - set(owner.devices) - set(whole.devices)
    named = {
        key: value
        for key, value in sidecar.envs.items()
        if value not in (owner.envs.get(key, value), whole.envs.get(key, value))
    }
    if wider or named:
        shown = sorted(d.host_path for d in wider) + sorted(named)
        return refused(
            name,
            "sidecar-visibility",
            "visibility",
            f"the sidecar would be shown what its owner was not granted: {shown}",
        )
    only = "the sidecar is shown only its owner's card"
    why = "answered by rendering: a measured answer needs the owner still running"
    return rendered(name, "sidecar-visibility", "visibility", only, why)


def co_tenancy_check(rehearsal: Rehearsal, card: GrantedCard) -> Check:
    name = card.card.id
    try:
        first = rehearsal.slice(card, "tenant-a", 25)
        second = rehearsal.slice(card, "tenant-b", 25)
    except Exception as error:
        return refused(name, "co-tenancy", "sliced", str(error))
    quotas = quota_of(first), quota_of(second)
    if not all(quotas):
        return refused(
            name, "co-tenancy", "sliced", "a second slice of the card carries no quota of its own"
        )
    return rendered(
        name,
        "co-tenancy",
        "sliced",
        f"two slices of the card, each with its own quota ({quotas[0]})",
    )


def group_checks(
    rehearsal: Rehearsal, group: DevicesGroup, isolation: IsolationCheck
) -> list[Check]:
    """The group's isolation row (when its cards take logical slices this agent serves), then
    each card's rows."""
    checks: list[Check] = []
    slicing = OFFERED
    if group.offers_logical_slices and rehearsal.responder.slices:
        row, slicing = isolation_row(group, rehearsal.responder, isolation)
        checks.append(row)
    for card in group.accelerators:
        checks += card_checks(rehearsal, GrantedCard(group, card), slicing)
    return checks


def manufacturer_report(
    found: DetectionPass,
    host: HostAnswer | None,
    responder: Responder | None,
    runtime: str,
    nodes: DeviceNodes,
    isolation: IsolationCheck,
    now: str,
) -> ManufacturerReport:
    detection = detection_answer(found, host)
    if responder is None:
        note = f"this agent has no responder for {found.manufacturer}: no allocation is served"
        return ManufacturerReport(found.manufacturer, now, detection, note=note)
    with tempfile.TemporaryDirectory(prefix="gpustack-preflight-") as pods:
        rehearsal = Rehearsal(responder, runtime, nodes, pods, isolation.lib_dir)
        checks = [
            check for group in found.groups for check in group_checks(rehearsal, group, isolation)
        ]
    return ManufacturerReport(found.manufacturer, now, detection, tuple(checks))


def preflight_responder(
    name: str, host_root: str, simulated: SimulatedHost | None = None
) -> Responder | None:
    """The responder a preflight drives, touching nothing on the host: the manufacturer's
    `Vendor.dry_responder` where its own would change a driver's state, else its own."""
    vendor = vendor_named(name)
    if vendor is not None and vendor.dry_responder is not None:
        return vendor.dry_responder(host_root, simulated)
    return RESPONDERS.get(name)


def run_host(argv: Sequence[str]) -> tuple[int, str]:
    if shutil.which(argv[0]) is None:
        raise OSError(f"{argv[0]} is not installed")
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    return done.returncode, done.stdout


def preflight(
    passes: Sequence[DetectionPass],
    table: ManufacturerTable,
    nodes: DeviceNodes,
    host_root: str,
    run: Runner = run_host,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    isolation: IsolationCheck | None = None,
    simulated: SimulatedHost | None = None,
) -> Report:
    """`isolation`: the check of the staged isolation libraries (default: the agent's, under
    the host root); `simulated`: the simulated host whose drivers the responders read instead
    of the host's."""
    libraries = isolation or IsolationCheck(root=host_root)
    now = clock().strftime("%Y-%m-%dT%H:%M:%SZ")
    entries = []
    for found in passes:
        maker = found.manufacturer
        entries.append(
            manufacturer_report(
                found,
                ask_host(maker, host_root, run),
                preflight_responder(maker, host_root, simulated),
                table[maker].runtime_name if maker in table else "",
                nodes,
                libraries,
                now,
            )
        )
    return Report(tuple(entries), now)
