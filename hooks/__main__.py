"""`python -m hooks plan --cluster FILE [--setting NAME=VALUE ...] [-o json|yaml|table]`."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

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
        required=True,
        metavar="FILE",
        help="a Kubernetes List, e.g. `kubectl get nodes,namespaces -o json`",
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

    try:
        snapshot = yaml.safe_load(args.cluster.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        print(f"{label}: {cli.unreadable(args.cluster, err)}", file=sys.stderr)
        return cli.EXIT_USAGE
    try:
        items = snapshot.get("items") if isinstance(snapshot, dict) else None
        if not isinstance(items, list):
            raise ValueError(f"{args.cluster}: expected a Kubernetes List with items")
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
