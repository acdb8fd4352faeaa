"""The `FleetPool`: one pool of a fleet of clusters, as the worker gateway writes it on the
manager and the fleet hooks read it (docs/fleet.md, "The `FleetPool` object").

Two rooms share the shape, so it lives here: the gateway renders it (`workergateway/sums.py`,
`FleetPool.render`, wrapped by `fleet_pool_object`), and the fleet hooks read it back
(`FleetPoolView.parse`) into the manager's ClusterQueue, AdmissionCheck, MultiKueueConfig and
fleet InstanceType. The reader refuses what the hooks could not turn into those objects (a
member list MultiKueue would refuse, a quota that is no quantity, a missing view) with a
`ValueError` naming the field, so a hook answers a 400 rather than children made of guesses.

Also here: the names of the manager-side objects (the check's FNV name, the one flavor) and the
label that marks a fleet InstanceType, each needed by the hook that writes the object and the
one that reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from chain import fields
from chain.apis import CHAIN_API
from chain.names import fnv64a
from chain.pools import PoolIdentity
from chain.quantity import parse_quantity
from chain.views import AcceleratorViews, View

FLEET_POOL = "FleetPool"
FLEET_POOLS_RESOURCE = "fleetpools"
FLEET_POOL_API = CHAIN_API

MULTIKUEUE_CONFIG = "MultiKueueConfig"
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
"""An AdmissionCheck's `controllerName` that hands its Workloads to MultiKueue."""
KUEUE_GROUP = "kueue.x-k8s.io"
FLEET_FLAVOR = "gpustack-fleet"
"""The one ResourceFlavor of every fleet ClusterQueue: no node labels, the manager has no nodes."""
FLEET_CHECK_PREFIX = "gpustack-fleet-"
FLEET_LABEL = "resource.gpustack.ai/fleet"
FLEET_LABEL_VALUE = "true"
"""On a fleet InstanceType: what the fleet status decorator selects, so that no other
InstanceType is its parent. A fixed value, since a pool's name may be longer than a label's 63
characters."""

MEMBERS_LOST_SINCE = "gpustack.ai/members-lost-since"
"""On a `FleetPool`, and copied onto its MultiKueueConfig: the lost members the pool still
lists, and since when (`workergateway.lost` writes and reads it; the hook only copies it)."""

MAX_MEMBERS = 20
"""`MultiKueueConfig.spec.clusters` holds 1 to 20 names (Kueue v1beta2)."""
MAX_RESOURCES = 64
"""A ClusterQueue resource group's `coveredResources` holds at most 64 names (Kueue v1beta2)."""


def fleet_check_name(pool: str) -> str:
    """`gpustack-fleet-<fnv64a(pool)>`: 31 characters whatever the pool's name, as the entrance
    hook's LocalQueue names are."""
    return FLEET_CHECK_PREFIX + fnv64a(pool)


@dataclass(frozen=True)
class Quota:
    """One resource of the fleet's summed quota, with its text as the gateway wrote it."""

    name: str
    amount: Fraction
    text: str

    def render(self) -> dict[str, object]:
        return {"name": self.name, "nominalQuota": self.text}


def _quota(obj: fields.Obj, path: str) -> tuple[Quota, ...]:
    found: list[Quota] = []
    for entry, at in fields.items(obj, "quota", path, required=True):
        name = fields.string(entry, "name", at, required=True)
        if any(quota.name == name for quota in found):
            raise ValueError(f"{fields.at(at, 'name')}: {name} is listed twice")
        text = fields.string(entry, "nominalQuota", at, required=True)
        try:
            amount = parse_quantity(text)
        except ValueError as err:
            raise ValueError(f"{fields.at(at, 'nominalQuota')}: {err}") from None
        if amount < 0:
            raise ValueError(f"{fields.at(at, 'nominalQuota')}: expected at least 0, got {text}")
        found.append(Quota(name, amount, text))
    if len(found) > MAX_RESOURCES:
        raise ValueError(f"{fields.at(path, 'quota')}: at most {MAX_RESOURCES} resources")
    return tuple(found)


@dataclass(frozen=True)
class MemberView:
    """One member's entry of `memberViews`: what it adds to the pool, or would while counted."""

    name: str
    phase: str
    counted: bool
    views: AcceleratorViews
    cpu: View
    quota: tuple[Quota, ...]

    @classmethod
    def parse(cls, obj: fields.Obj, path: str) -> MemberView:
        return cls(
            fields.string(obj, "name", path, required=True),
            fields.string(obj, "phase", path, required=True),
            fields.boolean(obj, "counted", path),
            AcceleratorViews.parse(obj, path),
            View.parse(fields.child(obj, "cpu", path, required=True), fields.at(path, "cpu")),
            _quota(obj, path),
        )

    def render(self) -> dict[str, object]:
        return {
            "name": self.name,
            "phase": self.phase,
            "counted": self.counted,
            **self.views.render(),
            "cpu": self.cpu.render(),
            "quota": [quota.render() for quota in self.quota],
        }


def _members(spec: fields.Obj, path: str) -> tuple[str, ...]:
    """The MultiKueueConfig's `clusters`: 1 to 20 names, each once (Kueue refuses others)."""
    where = fields.at(path, "members")
    if spec.get("members") is None:
        raise ValueError(f"{where}: required")
    members = fields.strings(spec, "members", path)
    if not 1 <= len(members) <= MAX_MEMBERS:
        raise ValueError(f"{where}: expected 1 to {MAX_MEMBERS} names, got {len(members)}")
    for number, name in enumerate(members):
        if not name:
            raise ValueError(f"{where}[{number}]: required, got an empty string")
        if name in members[:number]:
            raise ValueError(f"{where}[{number}]: {name} is listed twice")
    return members


@dataclass(frozen=True)
class FleetPoolView:
    """A `FleetPool` as the fleet hooks read it."""

    name: str
    identity: PoolIdentity
    instance_type: Mapping[str, object]
    """The fleet InstanceType's spec, as the gateway agreed it from the members'."""
    members: tuple[str, ...]
    quota: tuple[Quota, ...]
    views: AcceleratorViews
    cpu: View
    member_summary: str
    member_views: tuple[MemberView, ...]
    lost_since: str = ""
    """The gateway's `MEMBERS_LOST_SINCE` annotation, as written (the hook copies it)."""

    @classmethod
    def parse(cls, obj: fields.Obj) -> FleetPoolView:
        """A ValueError names the field (`spec.members[2]: ...`) of anything the hooks cannot
        make the manager's objects from."""
        if obj.get("apiVersion") != FLEET_POOL_API or obj.get("kind") != FLEET_POOL:
            raise ValueError(f"kind: expected a {FLEET_POOL_API} {FLEET_POOL}")
        meta = fields.child(obj, "metadata", "", required=True)
        name = fields.string(meta, "name", "metadata", required=True)
        spec = fields.child(obj, "spec", "", required=True)
        instance_type = fields.child(spec, "instanceType", "spec", required=True)
        identity = PoolIdentity.of_spec(instance_type, "spec.instanceType")
        # What the InstanceType webhook requires of the child, refused here by name rather
        # than by the API server on Metacontroller's write.
        for key in ("os", "arch", *(("acceleratorGroup",) if identity.acceleratable else ())):
            fields.string(instance_type, key, "spec.instanceType", required=True)
        members = _members(spec, "spec")
        breakdown = tuple(
            MemberView.parse(entry, at) for entry, at in fields.items(spec, "memberViews", "spec")
        )
        for number, member in enumerate(breakdown):
            if member.name not in members:
                at = f"spec.memberViews[{number}].name"
                raise ValueError(f"{at}: {member.name} is not one of spec.members")
        return cls(
            name=name,
            identity=identity,
            instance_type=instance_type,
            members=members,
            quota=_quota(spec, "spec"),
            views=AcceleratorViews.parse(spec, "spec"),
            cpu=View.parse(fields.child(spec, "cpu", "spec", required=True), "spec.cpu"),
            member_summary=fields.string(spec, "memberSummary", "spec"),
            member_views=breakdown,
            lost_since=fields.string(
                fields.child(meta, "annotations", "metadata"),
                MEMBERS_LOST_SINCE,
                "metadata.annotations",
            ),
        )


def fleet_pool_object(name: str, spec: Mapping[str, object]) -> dict[str, object]:
    """The `FleetPool` the gateway applies on the manager: `spec` is `FleetPool.render()`."""
    return {
        "apiVersion": FLEET_POOL_API,
        "kind": FLEET_POOL,
        "metadata": {"name": name},
        "spec": dict(spec),
    }
