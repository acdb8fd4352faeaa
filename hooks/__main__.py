"""`python -m hooks plan --cluster FILE [--setting NAME=VALUE ...] [-o json|yaml|table]`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from chain.manufacturers import default_manufacturers
from chain.settings import StartupEnv
from hooks.plan import parse_setting, plan, table
from hooks.plan_admission import admission, admission_table
from hooks.shell import BadRequest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hooks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="run the chain's hooks over a cluster snapshot, offline")
    p.add_argument(
        "--cluster",
        type=Path,
        required=True,
        help="a Kubernetes List, e.g. `kubectl get nodes,namespaces -o json`",
    )
    p.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one chain setting (repeatable)",
    )
    p.add_argument("-o", "--output", choices=("json", "yaml", "table"), default="table")
    args = parser.parse_args(argv)

    try:
        snapshot = yaml.safe_load(args.cluster.read_text())
        items = snapshot.get("items") if isinstance(snapshot, dict) else None
        if not isinstance(items, list):
            raise ValueError(f"{args.cluster}: expected a Kubernetes List with items")
        overrides = dict(parse_setting(s) for s in args.setting)
        objects = plan(items, overrides, StartupEnv.from_env(os.environ))
        results = admission(items, objects, default_manufacturers())
    except (OSError, ValueError, yaml.YAMLError) as err:
        print(f"plan: {err}", file=sys.stderr)
        return 2
    except BadRequest as err:
        print(f"plan: the snapshot is not what the hooks expect: {err}", file=sys.stderr)
        return 2

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
