"""Members a pool keeps listing after they are lost (docs/fleet.md, "A member turning inactive").

When a member stops being Active (Kueue marks its `MultiKueueCluster` `Active=False`, or the
gateway cannot read it), its cards leave every sum at once: MultiKueue dispatches nothing new
there. Its name must not leave the pool's MultiKueueConfig at once, though. A Workload that was
admitted there when the connection went is Kueue's to recover: Kueue v0.19.2 keeps its check
Ready for `multiKueue.workerLostTimeout` (15 minutes by default) from when it first saw the
worker lost, and only then dispatches it again; but it waits so only for a worker that is still
among the config's clusters. A worker taken out of the config "no longer exists" to Kueue, and
the Workload is dispatched again at once, while the lost worker may still be running it
(`pkg/controller/admissionchecks/multikueue/workload.go`, step 6a). So a lost member stays listed
until a grace (the gateway's `--orphan-grace`, at least the timeout) has passed since the
gateway first saw it lost, then leaves.

The gateway keeps no state between passes, so when each member was first seen lost lives on
the pool's `FleetPool` as the annotation `gpustack.ai/members-lost-since` (a JSON object,
member name to an RFC 3339 UTC time), which the fleet hook copies onto the MultiKueueConfig
where the listed names are read. The clock is the caller's.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chain.fleet_pools import MEMBERS_LOST_SINCE

STAMP = "%Y-%m-%dT%H:%M:%SZ"


def stamp(time: datetime) -> str:
    return time.astimezone(UTC).strftime(STAMP)


def parse_lost_since(raw: str | None) -> dict[str, datetime]:
    """The annotation's member -> time; {} when there is none. A ValueError names what is
    wrong with one that is not ours to read (not a JSON object of names to RFC 3339 times)."""
    if raw is None or raw == "":
        return {}
    try:
        loaded = json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{MEMBERS_LOST_SINCE}: not JSON: {err}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{MEMBERS_LOST_SINCE}: expected a JSON object of member to time")
    found: dict[str, datetime] = {}
    for member, value in loaded.items():
        if not member:
            raise ValueError(f"{MEMBERS_LOST_SINCE}: a member without a name")
        try:
            found[member] = datetime.strptime(str(value), STAMP).replace(tzinfo=UTC)
        except ValueError:
            raise ValueError(
                f"{MEMBERS_LOST_SINCE}: member {member}: expected a time such as "
                f"2026-12-05T08:00:00Z, got {value!r}"
            ) from None
    return found


def render_lost_since(lost: Mapping[str, datetime]) -> str:
    """Sorted by name, so that the same members and times are always the same text (the gateway
    writes only what changed)."""
    return json.dumps({member: stamp(lost[member]) for member in sorted(lost)}, sort_keys=True)


@dataclass(frozen=True)
class Kept:
    """What one pool keeps of its lost members on this pass."""

    members: tuple[str, ...]
    """Lost members still listed, in the order they were listed."""
    lost_since: dict[str, datetime]
    """When each of `members` was first seen lost: the annotation to write (empty: none)."""
    dropped: tuple[str, ...]
    """Lost members whose grace has passed (or that found no room): listed no more."""


def keep_lost(
    listed: Sequence[str],
    current: Collection[str],
    lost: Collection[str],
    since: Mapping[str, datetime],
    now: datetime,
    grace: timedelta,
    room: int,
) -> Kept:
    """The lost members a pool keeps listing after its `current` members.

    `listed`: the pool's members as last written. `current`: the Active members that have the
    pool now (listed first, by the sums). `lost`: the members whose `MultiKueueCluster` exists
    and that are not Active, or that the gateway could not read. `since`: the annotation as last
    written. `room`: how many names the config holds beside `current` (20 in all).

    A listed member that is neither current nor lost (its `MultiKueueCluster` deleted, or Active
    and without the pool now) leaves at once: Kueue has nothing to wait for there. A member first
    seen lost now starts its grace now; a time in the future (a clock that went back) counts as
    now, so a member is never kept longer than the grace from the time it is seen again. A member
    that is back (current) or gone has no entry any more."""
    kept: list[str] = []
    lost_since: dict[str, datetime] = {}
    dropped: list[str] = []
    for member in dict.fromkeys(listed):
        if member in current or member not in lost:
            continue
        first = min(since.get(member, now), now)
        if now - first >= grace or len(kept) >= room:
            dropped.append(member)
            continue
        kept.append(member)
        lost_since[member] = first
    return Kept(tuple(kept), lost_since, tuple(dropped))
