"""Cambricon (MLU) container responses.

Exclusive, shared and visibility grants inject what Cambricon's own plugin injects by default,
per card by its cnDev index (`physicalIndexes[0]`): the card's `/dev/cambricon_dev<i>`,
required (a card the host exposes no node for fails the grant rather than start a container
with no card), then the optional per-card nodes the host exposes; after all cards the
node-level control nodes, once. `CAMBRICON_VISIBLE_DEVICES` still names the indexes, for a
deployment that does run the vendor runtime.

Sliced grants (one card each) are a cnDev sMLU instance (`smlu.py`): the card is put in sMLU
mode if it is not (never turned off: other Pods' slices would be stranded), a profile with the
compute quota (cores %) and the memory cap is reused from an instance of the same figures on the
card or created, and an instance named `gpustack:<pod uid>:<12 hex of sha256(container)>` is made
from it. The container gets the card's `/dev/cambricon_dev<i>` and `/dev/cambricon_ipcm<i>` and
the instance's own device node (each where the host has it), and `VIRTUAL_DEVICES=<that node>`
for a deployment that runs the vendor runtime (sMLU has no CDI). A marker per grant
(`<pods>/<pod>/c-<container>/cambricon-smlu.json`) lets a retry reuse its instance; other figures,
or an instance that vanished, fail closed; a failure after the create destroys what this grant
made. Instances outlive the container: the reclaimer destroys those of gone Pods, and the
ledger charges a Cambricon slice until then. Whether sMLU mode changes a whole-card tenant is
unmeasured upstream.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    HostRecord,
    SliceRequest,
    VendorResponder,
    memory_limit_mib,
    write_host_file,
)
from nodeagent.plugin.response import ContainerResponse, DeviceNode
from nodeagent.vendors.cambricon.smlu import (
    SmluDriver,
    SmluInstance,
    SmluUnavailable,
    open_cndev_smlu,
)

log = logging.getLogger(__name__)

MANUFACTURER = "cambricon"
VISIBLE_DEVICES_ENV = "CAMBRICON_VISIBLE_DEVICES"
OPTIONAL_CARD_NODES = (
    "/dev/cambr-msgq:{}",
    "/dev/cambr-rpc:{}",
    "/dev/cmsg_ctrl{}",
    "/dev/commu{}",
    "/dev/cambricon_ipcm{}",
)
CONTROL_NODES = ("/dev/cambricon_ctl", "/dev/cambricon_gdr")
MARKER = "cambricon-smlu.json"
NAME_PREFIX = "gpustack"
RECLAIM_MISSES = 3
"""Passes a Pod must be missing from the node before its instances are destroyed."""


def instance_name(pod_uid: str, container: str) -> str:
    digest = hashlib.sha256(container.encode()).hexdigest()[:12]
    return f"{NAME_PREFIX}:{pod_uid}:{digest}"


def pod_of(name: str) -> str:
    """The Pod uid an instance name of ours carries; "" for anyone else's instance."""
    parts = name.split(":")
    return parts[1] if len(parts) == 3 and parts[0] == NAME_PREFIX and parts[1] else ""


@dataclass(frozen=True)
class Marker(HostRecord):
    pod_uid: str
    container: str
    card: str
    instance: str
    profile: int
    cores: int
    memory_mib: int

    KEYS: ClassVar[Mapping[str, str]] = {
        "pod_uid": "podUID",
        "container": "container",
        "card": "card",
        "instance": "instance",
        "profile": "profileID",
        "cores": "coresPct",
        "memory_mib": "memMiB",
    }

    @property
    def valid(self) -> bool:
        return bool(self.pod_uid and self.card and self.instance)


def cndev_index(granted_id: str, found: int | None) -> int:
    if found is None:
        raise ValueError(f"accelerator {granted_id!r} carries no cnDev device index")
    return found


class Cambricon(VendorResponder):
    manufacturer = MANUFACTURER
    slices = True

    def __init__(self, smlu: Callable[[], SmluDriver] | None = None) -> None:
        """`smlu` opens the cnDev sMLU calls on first use (the host's library by default)."""
        self._open = smlu or open_cndev_smlu
        self._driver: SmluDriver | None = None
        self.lock = threading.Lock()
        """Held for a grant's whole reservation and by the reclaimer's pass."""

    def driver(self) -> SmluDriver:
        if self._driver is None:
            self._driver = self._open()
        return self._driver

    def show(self, cards: Cards, nodes: DeviceNodes) -> ContainerResponse:
        indexes = []
        devices: list[DeviceNode] = []
        for granted in cards:
            index = cndev_index(granted.card.id, granted.physical_index(0))
            indexes.append(str(index))
            own = f"/dev/cambricon_dev{index}"
            if not nodes.exists(own):
                raise ValueError(
                    f"accelerator {granted.card.id!r} of card {granted.group.name!r} has no "
                    f"device node {own!r}"
                )
            devices.append(DeviceNode(own, own))
            devices += nodes.optional(*(form.format(index) for form in OPTIONAL_CARD_NODES))
        devices += nodes.optional(*CONTROL_NODES)
        return ContainerResponse(
            envs={VISIBLE_DEVICES_ENV: ",".join(indexes)}, devices=tuple(devices)
        )

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        if len(cards) != 1:
            raise ValueError(
                f"sliced container {request.container!r} allocated {len(cards)} cards, but "
                "Cambricon sMLU slicing is single-card"
            )
        granted = cards[0]
        cores = request.limits.cores()
        mib = memory_limit_mib(granted.group.memory, request.limits)
        slot = cndev_index(granted.card.id, granted.physical_index(0))
        card = granted.card.topology.pci_bus_id
        with self.lock:
            try:
                made = self._reserve(request, card, slot, cores, mib)
            except (ValueError, OSError, SmluUnavailable) as error:
                raise ValueError(f"reserve cambricon smlu instance: {error}") from error
        paths = [f"/dev/cambricon_dev{slot}", f"/dev/cambricon_ipcm{slot}"]
        if made.device_node:
            paths.append(made.device_node)
        envs = {"VIRTUAL_DEVICES": made.device_node} if made.device_node else {}
        return ContainerResponse(
            envs=envs, devices=nodes.optional(*paths), directories=(request.work_dir,)
        )

    def _reserve(
        self, request: SliceRequest, card: str, slot: int, cores: int, mib: int
    ) -> SmluInstance:
        driver = self.driver()
        own = Path(request.work_dir, MARKER)
        mine = Marker.read(own)
        if mine is not None and mine.valid:
            if (mine.card, mine.cores, mine.memory_mib) != (card, cores, mib):
                raise ValueError(
                    f"marker {str(own)!r} mismatches request (card={card} cores={cores} "
                    f"mem={mib}): fail closed"
                )
            for running in driver.instances():
                if running.name == mine.instance:
                    return running
            raise ValueError(
                f"marker {str(own)!r} references missing instance {mine.instance!r}: fail closed"
            )
        self._ensure_mode(driver, card, slot)
        same = [
            i.profile
            for i in driver.instances()
            if i.card == card and (i.cores, i.memory_mib) == (cores, mib)
        ]
        profile = same[0] if same else driver.create_profile(card, cores, mib)
        name = instance_name(request.pod_uid, request.container)
        try:
            driver.create_instance(card, profile, name)
            made = next((i for i in driver.instances() if i.name == name), None)
            if made is None:
                raise ValueError(f"card {card}: created smlu instance {name!r} not found")
            marker = Marker(request.pod_uid, request.container, card, name, profile, cores, mib)
            write_host_file(own, marker.render())
        except Exception:
            self._undo(driver, card, name, None if same else profile)
            raise
        return made

    @staticmethod
    def _undo(driver: SmluDriver, card: str, name: str, profile: int | None) -> None:
        """Take back what a failed grant made: its instance, and the profile it created."""
        try:
            driver.destroy_instance(card, name)
            if profile is not None:
                driver.destroy_profile(card, profile)
        except Exception as error:  # the reclaimer's profile sweep gets what this leaves
            log.warning("undoing smlu instance %s on %s: %s", name, card, error)

    @staticmethod
    def _ensure_mode(driver: SmluDriver, card: str, slot: int) -> None:
        """sMLU mode on (never off); the remedy named when it cannot be turned on."""
        unsliceable = f"card {card} (device index {slot}) cannot be sliced"
        read_error: Exception | None = None
        try:
            if driver.mode_enabled(card):
                return
        except SmluUnavailable as error:
            raise ValueError(f"{unsliceable}: {error}") from error
        except Exception as error:
            read_error = error
        try:
            driver.enable(card)
        except SmluUnavailable as error:
            raise ValueError(f"{unsliceable}: {error}") from error
        except Exception as error:
            also = f" (the mode read failed too: {read_error})" if read_error else ""
            raise ValueError(
                f"card {card} (device index {slot}): enable sMLU mode: {error}{also}; to enable "
                f"it on the host for the card at this PCI address run `cnmon set -c {slot} "
                "-smlu on`, confirming the ordinal with `cnmon`"
            ) from error
        if read_error is not None:
            log.info("enabled sMLU mode without a trustworthy read: %s", read_error)


@dataclass
class CambriconReclaimer:
    """Destroys the sMLU instances of Pods gone from the node (after `RECLAIM_MISSES` passes in a
    row without them), removes their markers, then the profiles no instance uses."""

    responder: Cambricon
    pods_dir: str
    misses: dict[str, int] = field(default_factory=dict)

    def reconcile(self, live: frozenset[str]) -> list[str]:
        with self.responder.lock:
            try:
                driver = self.responder.driver()
                running = driver.instances()
            except Exception as error:
                log.warning("cannot list the sMLU instances: %s", error)
                return []
            owned: dict[str, list[tuple[str, str]]] = {}
            paths: dict[str, list[Path]] = {}
            for path in Path(self.pods_dir).glob(f"*/*/{MARKER}"):
                marker = Marker.read(path)
                if marker is not None and marker.valid:
                    owned.setdefault(marker.pod_uid, []).append((marker.card, marker.instance))
                    paths.setdefault(marker.pod_uid, []).append(path)
            marked = {name for held in owned.values() for _, name in held}
            for instance in running:
                pod = pod_of(instance.name)
                if pod and instance.name not in marked:
                    owned.setdefault(pod, []).append((instance.card, instance.name))
            destroyed = []
            for pod in sorted(owned):
                if pod in live:
                    self.misses[pod] = 0
                    continue
                self.misses[pod] = self.misses.get(pod, 0) + 1
                if self.misses[pod] < RECLAIM_MISSES:
                    continue
                try:
                    for card, name in owned[pod]:
                        driver.destroy_instance(card, name)
                        destroyed.append(name)
                    for path in paths.get(pod, []):
                        path.unlink(missing_ok=True)
                        for folder in (path.parent, path.parent.parent):
                            if folder.is_dir() and not os.listdir(folder):
                                folder.rmdir()
                except Exception as error:
                    log.warning("reclaiming the sMLU instances of Pod %s: %s", pod, error)
                    continue
                del self.misses[pod]
            self.misses = {pod: n for pod, n in self.misses.items() if pod in owned}
            sweep_profiles(driver)
            return destroyed


def sweep_profiles(driver: SmluDriver) -> None:
    """Destroy the profiles no instance uses (one a failed grant or a reclaim left behind)."""
    try:
        used = {(i.card, i.profile) for i in driver.instances()}
        for card in driver.cards():
            for profile in driver.profiles(card):
                if (card, profile) not in used:
                    driver.destroy_profile(card, profile)
    except Exception as error:
        log.warning("sweeping unused sMLU profiles: %s", error)
