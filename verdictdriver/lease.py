"""Leader election for the verdict driver: a coordination.k8s.io Lease, standard semantics.

Two judges could each promise the same free card, so of all driver replicas only the holder of
the Lease judges; the others follow (and keep their Workload cache warm) until it lapses.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from kubeapi import Kube, KubeError, Obj
from kubeapi.events import micro_time

log = logging.getLogger("admission-driver")

LEASE_API = "coordination.k8s.io/v1"
LEASE_NAME = "gpustack-admission-driver"
LEASE_NAMESPACE = "gpustack-system"
LEASE_SECONDS = 15


# --- pure: the Lease --------------------------------------------------------------------------


def next_lease(
    lease: Obj | None, identity: str, expired: bool, seconds: int, now: str
) -> Obj | None:
    """The Lease to write to lead (create when `lease` is None), or None to follow.

    Standard semantics: a holder keeps it by renewing; another may take it only once it is
    vacant or its record has not changed for its whole duration (`expired`, judged on the local
    clock, so clock skew between replicas does not matter)."""
    spec = dict((lease or {}).get("spec") or {})
    holder = str(spec.get("holderIdentity") or "")
    if lease is not None and holder and holder != identity and not expired:
        return None
    if holder != identity:
        spec["acquireTime"] = now
        if lease is not None:
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update({"holderIdentity": identity, "leaseDurationSeconds": seconds, "renewTime": now})
    if lease is None:
        return {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE},
            "spec": spec,
        }
    return {**lease, "spec": spec}


def released_lease(lease: Obj | None, identity: str, now: str) -> Obj | None:
    """The Lease that gives it up (vacant, so another replica takes it at its next pass rather
    than a whole duration later), or None when `identity` does not hold it."""
    spec = dict((lease or {}).get("spec") or {})
    if lease is None or str(spec.get("holderIdentity") or "") != identity:
        return None
    spec.update({"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now})
    return {**lease, "spec": spec}


# --- I/O ------------------------------------------------------------------------------------


@dataclass
class Elector:
    kube: Kube
    identity: str
    seconds: int = LEASE_SECONDS
    namespace: str = LEASE_NAMESPACE
    clock: Callable[[], float] = time.monotonic
    _observed: tuple[str, str] | None = None
    _observed_at: float = 0.0
    leading: bool = False
    _renewed_at: float = 0.0

    def still_leading(self) -> bool:
        """Within a pass: True while the last renewal is recent enough that no other replica
        can have taken the Lease (it waits a whole duration after the last change it saw)."""
        return self.leading and self.clock() - self._renewed_at < self.seconds / 2

    def renewal_due(self) -> bool:
        """Not leading, or a quarter of the Lease has passed since the last renewal: renewing
        more often only costs two requests; less often risks `still_leading` lapsing."""
        return not self.leading or self.clock() - self._renewed_at >= self.seconds / 4

    def lead(self) -> bool:
        """Take or renew the Lease; True while this replica may judge."""
        # Counted from before the read: the write can only have landed later than this.
        started = self.clock()
        lease = self.kube.get(LEASE_API, "Lease", LEASE_NAME, self.namespace)
        expired = False
        if lease is not None:
            spec = lease.get("spec") or {}
            record = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
            if record != self._observed:
                self._observed, self._observed_at = record, self.clock()
            duration = int(spec.get("leaseDurationSeconds") or self.seconds)
            expired = self.clock() - self._observed_at > duration
        wanted = next_lease(lease, self.identity, expired, self.seconds, micro_time())
        if wanted is not None:
            wanted["metadata"]["namespace"] = self.namespace
            try:
                written = self.kube.replace(wanted) if lease else self.kube.create(wanted)
            except KubeError as err:
                if err.status != 409:
                    raise
                wanted = None  # another replica wrote first
            else:
                spec = written["spec"]
                self._observed = (self.identity, str(spec.get("renewTime")))
                self._observed_at = self.clock()
        leading = wanted is not None
        if leading:
            self._renewed_at = started
        if leading != self.leading:
            log.info("%s %s the lease", self.identity, "holds" if leading else "does not hold")
        self.leading = leading
        return leading

    def release(self) -> bool:
        """Give the Lease up (on the way out: a rollout then waits for no lapse); True when a
        vacant Lease was written. Written with the version read, so a Lease someone else took
        meanwhile is left alone."""
        self.leading = False
        lease = self.kube.get(LEASE_API, "Lease", LEASE_NAME, self.namespace)
        vacant = released_lease(lease, self.identity, micro_time())
        if vacant is None:
            return False
        try:
            self.kube.replace(vacant)
        except KubeError as err:
            log.info("%s did not release the lease: %s", self.identity, err)
            return False
        log.info("%s released the lease", self.identity)
        return True
