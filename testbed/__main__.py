"""`python -m testbed build|up|down|status|env|demo|demo-fleet`.

`up` starts a control plane that outlives the command (its components run in their own
sessions); `status`, `env` and `down` find it again through the state file in its run folder.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from chain import cli
from testbed import build, harness


def default_root() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(os.environ.get("GPUSTACK_TESTBED_ROOT", Path(base) / "gpustack-testbed"))


def cmd_build(args: argparse.Namespace) -> int:
    unknown = set(args.components) - set(build.COMPONENTS)
    if unknown:
        print(f"testbed build: unknown components: {sorted(unknown)}", file=sys.stderr)
        return cli.EXIT_USAGE
    took = build.ensure(args.components or None)
    if not args.components:
        # The real nodes' host packages and images (kept by podman; a no-op when current).
        from testbed.cluster import node_images

        start = time.monotonic()
        node_images(lambda msg: print(msg, file=sys.stderr, flush=True))
        took["node images"] = time.monotonic() - start
    total = sum(took.values())
    print(
        "testbed build times: "
        + ", ".join(f"{k} {v:.0f}s" for k, v in took.items())
        + f"; total {total:.0f}s"
    )
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    root = args.root
    if (root / harness.STATE_FILE).exists():
        bed = harness.Testbed.attach(root)
        if not bed.dead() and bed.state.processes:
            print(f"testbed already running in {root}")
            print(f"KUBECONFIG={bed.kubeconfig}")
            return 0
        bed.down()
    build.ensure()
    bed = harness.Testbed(root)
    bed.up()
    for name, state in bed.status().items():
        print(f"{name:26} {state}")
    print(f"KUBECONFIG={bed.kubeconfig}")
    return 0


def _attached(root: Path) -> harness.Testbed | None:
    if not (root / harness.STATE_FILE).exists():
        print(f"no testbed in {root}", file=sys.stderr)
        return None
    return harness.Testbed.attach(root)


def cmd_down(args: argparse.Namespace) -> int:
    bed = _attached(args.root)
    if bed is None:
        return 0
    bed.down()
    print(f"testbed in {args.root} stopped and removed")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    bed = _attached(args.root)
    if bed is None:
        return 1
    rows = bed.status()
    for name, state in rows.items():
        print(f"{name:26} {state}")
    print(f"apiserver                  {bed.server}")
    return 0 if all(s.startswith("running") for s in rows.values()) else 1


def cmd_env(args: argparse.Namespace) -> int:
    bed = _attached(args.root)
    if bed is None:
        return 1
    print(f"KUBECONFIG={bed.kubeconfig}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from testbed import demo

    return demo.main(None)


def cmd_demo_fleet(args: argparse.Namespace) -> int:
    from testbed import fleetdemo

    return fleetdemo.main(None)


DESCRIPTION = """\
The local testbed: a real control plane (etcd, kube-apiserver, Kueue, Metacontroller, NFD)
built from source, for the chain's end-to-end tests and demo. It runs on a developer's or CI's
Linux machine, never in a cluster.

`up` starts a control plane that outlives the command (its components run in their own
sessions); `status`, `env` and `down` find it again through the state file in its run folder."""


def build_parser() -> cli.Parser:
    exits = cli.exits(failed="status: a component is down; status, env: no testbed")
    parser = cli.parser("python -m testbed", DESCRIPTION, exits)
    parser.add_argument(
        "--root",
        type=Path,
        default=default_root(),
        help="run folder of the testbed (default: %(default)s)",
    )
    sub = parser.commands()
    b = sub.add_parser(
        "build",
        help="build missing binaries into the cache",
        description="Build missing binaries into the cache: the components named, or all of "
        "them and the real nodes' images.",
        epilog=exits,
    )
    b.add_argument("components", nargs="*", help="some of: " + ", ".join(build.COMPONENTS))
    b.set_defaults(func=cmd_build)
    for name, func, text in (
        ("up", cmd_up, "build if needed, then start a testbed that outlives this command"),
        ("down", cmd_down, "stop every component and remove the run folder"),
        ("status", cmd_status, "show each component's state (exit 1 if any is down)"),
        ("env", cmd_env, "print KUBECONFIG=... for the running testbed"),
        (
            "demo",
            cmd_demo,
            "the main job: the chain on the testbed, over simulated GPU nodes, then real ones",
        ),
        (
            "demo-fleet",
            cmd_demo_fleet,
            "a fleet of three emulated clusters: a tenant's Job dispatched by MultiKueue to the "
            "member with its cards, its status mirrored back",
        ),
    ):
        sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".", epilog=exits)
        sub.choices[name].set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
