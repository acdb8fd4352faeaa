"""`python -m hooks plan --cluster FILE [--cluster FILE ...] [--setting NAME=VALUE ...]
[-o json|yaml|table]`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from chain import cli
from chain.manufacturers import default_manufacturers
from chain.settings import StartupEnv
from chain.times import timestamp
from hooks.plan import parse_setting, plan, table
from hooks.plan_admission import admission, admission_table
from hooks.request import BadRequest

DESCRIPTION = """\
Offline tools for the chain's Metacontroller hooks, run on a workstation: they read files and
touch no cluster (the hooks themselves are served by gunicorn in the gpustack-system
Deployments)."""
PLAN = """\
Run the chain's hooks over a cluster snapshot in chain order, as Metacontroller would call them,
and print the objects the cluster would converge to, then what the webhooks and the per-card
check make of the snapshot's Instances, Pods and Workloads."""


def build_parser() -> cli.Parser:
    parser = cli.parser("python -m hooks", DESCRIPTION, cli.exits())
    sub = parser.commands()
    p = sub.add_parser(
        "plan",
        help="run the chain's hooks over a cluster snapshot, offline",
        description=PLAN,
        epilog=cli.exits(),
    )
    p.add_argument(
        "--cluster",
        type=Path,
        action="append",
        required=True,
        metavar="FILE",
        help="a Kubernetes List, e.g. `kubectl get nodes,namespaces -o json` (repeatable: the "
        "Lists' items are read as one snapshot, in order; on a fleet's manager, add the "
        "FleetPools `python -m workergateway.plan -o json` prints)",
    )
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one chain setting (repeatable)",
    )
    p.add_argument(
        "-o",
        "--output",
        choices=("json", "yaml", "table"),
        default="table",
        help="how to print the objects and the admissions",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse(argv)
    label = f"{parser.label} plan"

    items: list[Any] = []
    for path in args.cluster:
        try:
            snapshot = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            print(f"{label}: {cli.unreadable(path, err)}", file=sys.stderr)
            return cli.EXIT_USAGE
        listed = snapshot.get("items") if isinstance(snapshot, dict) else None
        if not isinstance(listed, list):
            print(f"{label}: {path}: expected a Kubernetes List with items", file=sys.stderr)
            return cli.EXIT_USAGE
        items += listed
    try:
        overrides = dict(parse_setting(s) for s in args.setting)
        now = timestamp(time.time())
        objects = plan(items, overrides, StartupEnv.from_env(os.environ), now)
        results = admission(items, objects, default_manufacturers())
    except (OSError, ValueError, yaml.YAMLError) as err:
        print(f"{label}: {err}", file=sys.stderr)
        return cli.EXIT_USAGE
    except BadRequest as err:
        print(f"{label}: the snapshot is not what the hooks expect: {err}", file=sys.stderr)
        return cli.EXIT_USAGE

    if args.output == "json":
        json.dump({"objects": objects, "admission": results}, sys.stdout, indent=2, sort_keys=True)
        print()
    elif args.output == "yaml":
        yaml.safe_dump_all([*objects, {"admission": results}], sys.stdout, sort_keys=True)
    else:
        sys.stdout.write(table(objects))
        sys.stdout.write(admission_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
