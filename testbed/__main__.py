"""`python -m testbed build|up|down|status|env|demo`.

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

from testbed import build, harness


def default_root() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(os.environ.get("GPUSTACK_TESTBED_ROOT", Path(base) / "gpustack-testbed"))


def cmd_build(args: argparse.Namespace) -> int:
    unknown = set(args.components) - set(build.COMPONENTS)
    if unknown:
        print(f"unknown components: {sorted(unknown)}", file=sys.stderr)
        return 2
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed", description=__doc__)
    parser.add_argument(
        "--root",
        type=Path,
        default=default_root(),
        help="run folder of the testbed (default: %(default)s)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build missing binaries into the cache")
    b.add_argument("components", nargs="*", help="some of: " + ", ".join(build.COMPONENTS))
    b.set_defaults(func=cmd_build)
    for name, func, text in (
        ("up", cmd_up, "build if needed, then start a testbed that outlives this command"),
        ("down", cmd_down, "stop every component and remove the run folder"),
        ("status", cmd_status, "show each component's state (exit 1 if any is down)"),
        ("env", cmd_env, "print KUBECONFIG=... for the running testbed"),
        ("demo", cmd_demo, "the main job: the chain on the testbed"),
    ):
        sub.add_parser(name, help=text).set_defaults(func=func)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
