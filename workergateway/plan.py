"""`python -m workergateway.plan`: the worker gateway's pass, offline (docs/fleet.md, "Planning a
fleet offline").

Each member's InstanceTypes and ClusterQueues are read from a file instead of the member's API
server, and the `FleetPool`s the gateway would write on the manager are printed. The reading and
the sums are the gateway's own pure functions (`members.read_pools`, `sums.fleet_pools`), so a
plan and a pass over the same objects agree, conflicts included.

A member's file is either what `kubectl get instancetypes,clusterqueues -o json` prints on the
member (its pools as they stand, Kueue's word on each queue included) or what
`python -m hooks plan -o json` prints for a snapshot of it (its pools as the chain would make
them). Other objects in it are passed over, and of the ClusterQueues only the pools' own are
read, as the gateway reads them.

Whether MultiKueue reaches a member is Kueue's word on the manager: its `MultiKueueCluster`'s
`Active` condition. Given the manager's `MultiKueueCluster`s (`--clusters`, `kubectl get
multikueueclusters -o json` there), each member is read as a pass reads it
(`members.read_member`): an inactive one is left out whole, its objects not read. Without them,
every member named counts as `Active`.

The printed List is a `--cluster` input of `python -m hooks plan`, which then runs the fleet
hooks over it: the manager's queues, checks, MultiKueueConfigs and fleet InstanceTypes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from chain import cli
from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.quantity import format_quantity
from workergateway.members import (
    MULTIKUEUE_CLUSTER,
    MemberError,
    MemberState,
    read_member,
    read_pools,
)
from workergateway.sums import Fleet, fleet_pools

Obj = dict[str, object]

PLANNED = "Planned"
"""The reason of a member's `Active` state in a plan without the manager's
`MultiKueueCluster`s: named on the command line."""

DESCRIPTION = """\
Sum the fleet's pools offline, as the worker gateway would: read each member's InstanceTypes
and ClusterQueues from a file and print the FleetPools the gateway would write on the manager.
A member counts as its MultiKueueCluster on the manager says (--clusters), else as Active.
Touches no cluster."""


def member_objects(document: object, where: str) -> list[Obj]:
    """The objects of a member's file: a Kubernetes List (`items`) or the output of
    `python -m hooks plan -o json` (`objects`)."""
    for key in ("items", "objects"):
        found = document.get(key) if isinstance(document, dict) else None
        if isinstance(found, list):
            if not all(isinstance(obj, dict) for obj in found):
                raise ValueError(f"{where}: every entry of {key} must be an object")
            return found
    raise ValueError(
        f"{where}: expected a Kubernetes List (items) or `python -m hooks plan -o json` "
        "output (objects)"
    )


def _of(objects: Sequence[Obj], api: str, kind: str) -> list[Obj]:
    return [obj for obj in objects if obj.get("apiVersion") == api and obj.get("kind") == kind]


def _name(obj: Obj) -> object:
    meta = obj.get("metadata")
    return meta.get("name") if isinstance(meta, dict) else None


def plan_fleet(
    members: Mapping[str, Sequence[Obj]], clusters: Sequence[Obj] | None = None
) -> Fleet:
    """The fleet's pools from each member's objects (a `MemberError` names the member, the
    object and the field it cannot read). With the manager's `clusters`, each member is Active
    or not as its `MultiKueueCluster` says, and one without any is a ValueError; without them,
    every member is Active."""
    by_name = {_name(obj): obj for obj in _of(clusters or [], KUEUE_API, MULTIKUEUE_CLUSTER)}
    read = []
    for name, objects in members.items():
        types = _of(objects, WORKER_API, INSTANCE_TYPE)
        names = {_name(obj) for obj in types}
        queues = [obj for obj in _of(objects, KUEUE_API, CLUSTER_QUEUE) if _name(obj) in names]
        if clusters is None:
            state = MemberState(name, True, PLANNED, "named on the command line")
            read.append((state, read_pools(name, types, queues)))
        elif name in by_name:
            read.append(read_member(by_name[name], types, queues))
        else:
            raise ValueError(f"member {name}: no {MULTIKUEUE_CLUSTER} of that name")
    return fleet_pools(read)


def fleet_list(fleet: Fleet) -> Obj:
    """The `FleetPool`s as a Kubernetes List, by pool name."""
    return {"apiVersion": "v1", "kind": "List", "items": [p.object() for p in fleet.pools.values()]}


def table(fleet: Fleet) -> str:
    """Pools, the members that count of those that have each, the summed cards and quota; then
    the conflicts."""
    rows = [("POOL", "MEMBERS", "ACCELERATORS", "QUOTA")]
    for pool in fleet.pools.values():
        quota = ", ".join(f"{name}={format_quantity(amount)}" for name, amount in pool.quota)
        rows.append((pool.name, pool.member_summary(), pool.views.summary() or "-", quota or "-"))
    lines = [*cli.columns(rows), *(f"conflict: {conflict}" for conflict in fleet.conflicts)]
    return "\n".join(lines) + "\n"


def _member_flag(raw: str) -> tuple[str, Path]:
    name, sep, path = raw.partition("=")
    if not sep or not name or not path:
        raise cli.UsageError(f"--member {raw!r}: expected NAME=FILE")
    return name, Path(path)


def build_parser() -> cli.Parser:
    parser = cli.parser("python -m workergateway.plan", DESCRIPTION, cli.exits())
    parser.add_argument(
        "--member",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="a member (its MultiKueueCluster's name) and its objects: `kubectl get "
        "instancetypes,clusterqueues -o json` there, or `python -m hooks plan -o json` "
        "(repeatable, one per member)",
    )
    parser.add_argument(
        "--clusters",
        type=Path,
        metavar="FILE",
        help="the manager's MultiKueueClusters (`kubectl get multikueueclusters -o json` "
        "there): a member is counted as Kueue says it is reached (default: every member named "
        "counts as Active)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "table"),
        default="table",
        help="json and yaml print a List of FleetPools (a `python -m hooks plan --cluster` input)",
    )
    return parser


def _objects(path: Path) -> list[Obj]:
    """The objects of a file named on the command line (a UsageError says why not)."""
    try:
        document = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise cli.UsageError(cli.unreadable(path, err)) from None
    try:
        return member_objects(document, str(path))
    except ValueError as err:
        raise cli.UsageError(str(err)) from None


def _load(raw: Sequence[str]) -> dict[str, list[Obj]]:
    if not raw:
        raise cli.UsageError("name at least one member: --member NAME=FILE")
    members: dict[str, list[Obj]] = {}
    for name, path in (_member_flag(flag) for flag in raw):
        if name in members:
            raise cli.UsageError(f"--member {name}: named twice")
        members[name] = _objects(path)
    return members


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse(argv)

    def body() -> int:
        members = _load(args.member)
        clusters = _objects(args.clusters) if args.clusters else None
        try:
            fleet = plan_fleet(members, clusters)
        except (MemberError, ValueError) as err:
            raise cli.UsageError(str(err)) from None
        for conflict in fleet.conflicts:
            print(f"{parser.label}: left out, {conflict}", file=sys.stderr)
        if args.output == "json":
            json.dump(fleet_list(fleet), sys.stdout, indent=2, sort_keys=True)
            print()
        elif args.output == "yaml":
            yaml.safe_dump(fleet_list(fleet), sys.stdout, sort_keys=True)
        else:
            sys.stdout.write(table(fleet))
        return cli.EXIT_OK

    return cli.run(parser.label, body)


if __name__ == "__main__":
    sys.exit(main())
