"""`python -m workergateway`: the worker gateway's process, and its composition root (`serve`)
(docs/fleet.md, "The gateway process"; exit statuses: `chain.cli`).

Everything the gateway is made of is built here and handed in: the manager's client (in-cluster
credentials, or `--kubeconfig`), the members' clients from their Secrets (`SecretClients`), the
Event recorder, the pass (`Gateway`), the watches that wake the loop (`workergateway.watches`:
the `MultiKueueCluster`s, the members' Secrets, and each Active member's InstanceTypes and
pool ClusterQueues),
`/healthz` and `/metrics`. A pass runs at start, soon after any watched change (a burst of
changes is one pass: the loop waits for `--debounce` seconds of quiet, at most `HOLD` seconds),
and at least every `--resync` seconds, which is what still catches a change every watch missed.

No Lease: every replica computes the same `FleetPool`s from the same reads and applies them
under the same field manager, so a second replica only repeats writes that change nothing. The
Deployment runs one.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence

import requests

from chain import cli
from chain.apis import KUEUE_API
from kubeapi import Kube, KubeError, kube_parser, run_connected
from kubeapi.events import EventRecorder
from kubeapi.watch import Watcher
from workergateway import health
from workergateway.clients import SecretClients
from workergateway.gateway import EVENTS_CONTROLLER, WORKER_LOST_TIMEOUT, Gateway, PassReport
from workergateway.kubeconfig import FLEET_NAMESPACE, member_kube
from workergateway.members import MULTIKUEUE_CLUSTER
from workergateway.watches import (
    Doorbell,
    RingingCache,
    kube_member_watches,
    member_credentials,
    spec_and_status,
)

log = logging.getLogger("gpustack.workergateway")

DEBOUNCE = 0.1
"""Seconds of quiet the loop waits for after a watched change, so that a burst (a member's
status hook rewriting several types, a rollout) is one pass."""
HOLD = 0.5
"""Seconds a pass is put off at most by a burst that does not fall quiet: a member that
changes all the time still reaches the fleet this often. With `DEBOUNCE`, what a change waits
before its pass begins; the lag goal is one watch event plus 1 s (docs/benchmarks.md)."""

DESCRIPTION = """\
The worker gateway of a fleet of clusters on Kueue's MultiKueue: on the manager cluster, reads
each Active member's InstanceTypes and ClusterQueues (with the kubeconfig in the Secret
gpustack-gateway-<member> of the fleet namespace) and writes one FleetPool per pool, the sums
of the members' views and quota, for the fleet hooks to turn into the manager's queue, check,
MultiKueueConfig and InstanceType."""


def build_parser() -> cli.Parser:
    parser = kube_parser("python -m workergateway", DESCRIPTION)
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME", "") or f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the Events it writes (default: $POD_NAME, else this "
        "host's name and this process's id)",
    )
    parser.add_argument(
        "--resync",
        type=float,
        default=30.0,
        help="seconds between passes at most (a MultiKueueCluster change starts one at once)",
    )
    parser.add_argument(
        "--debounce",
        type=float,
        default=DEBOUNCE,
        help="seconds of quiet after a watched change before the pass it wakes (a burst is "
        f"one pass; put off {HOLD:g}s at most)",
    )
    parser.add_argument(
        "--orphan-grace",
        type=float,
        default=WORKER_LOST_TIMEOUT,
        help="seconds a lost member stays listed in its pools' MultiKueueConfigs, and a "
        "FleetPool no Active member has is kept at zero, before they go; at least Kueue's "
        "multiKueue.workerLostTimeout (default: 900, that timeout's default)",
    )
    parser.add_argument(
        "--fleet-namespace",
        default=FLEET_NAMESPACE,
        help="the namespace of the members' gpustack-gateway-<member> Secrets",
    )
    parser.add_argument(
        "--health-port", type=int, default=8080, help="/healthz and /metrics; -1: none"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_connected(build_parser(), argv, serve)


def _said(report: PassReport) -> None:
    """One line for a pass that changed something or left a member out; quiet otherwise."""
    if report.applied or report.deleted or report.unreadable or report.failed_writes:
        log.info(
            "pass: %d members read, %d unreadable; applied %s, deleted %s, %d writes failed",
            len(report.members),
            len(report.unreadable),
            ",".join(report.applied) or "none",
            ",".join(report.deleted) or "none",
            len(report.failed_writes),
        )


def _settle(
    wake: Callable[[int, float], int],
    seen: int,
    debounce: float,
    stopping: threading.Event,
    clock: Callable[[], float],
) -> int:
    """After a change: wait until no other comes for `debounce` seconds, or `HOLD` seconds have
    passed; the count last seen, so that a change after it wakes the next pass."""
    limit = clock() + HOLD
    while not stopping.is_set() and (left := min(debounce, limit - clock())) > 0:
        now = wake(seen, left)
        if now == seen:
            break
        seen = now
    return seen


def run(
    gateway: Gateway,
    wake: Callable[[int, float], int],
    resync: float,
    stopping: threading.Event,
    liveness: health.Liveness,
    debounce: float = DEBOUNCE,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Passes until `stopping`: one now, then after a change `wake` reports (a count other than
    the one it was given) has settled (`_settle`), or after `resync` seconds. A pass that fails
    on the manager is logged and made again: nothing carries over from it. A change during a
    pass wakes the next at once: the count is read before the pass, never after."""
    seen = wake(-1, 0.0)  # the count now, whatever it is: no wait
    while not stopping.is_set():
        try:
            _said(gateway.run_pass())
            liveness.passed()
        except (KubeError, requests.RequestException) as err:
            log.warning("pass failed on the manager: %s", err)
        due = clock() + resync
        before = seen
        # In slices, so that SIGTERM ends the wait within a second.
        while not stopping.is_set() and (left := due - clock()) > 0:
            seen = wake(before, min(1.0, left))
            if seen != before:
                seen = _settle(wake, seen, debounce, stopping, clock)
                break


def serve(kube: Kube, args: argparse.Namespace) -> int:
    if args.resync <= 0 or args.orphan_grace < 0 or args.debounce < 0:
        raise cli.UsageError("--resync must be above 0, --orphan-grace and --debounce at least 0")
    events = EventRecorder(kube, EVENTS_CONTROLLER, args.identity)
    bell = Doorbell()
    # The watch has a client of its own: it reads on a thread of its own, and a
    # `requests.Session` is not meant to be shared between threads.
    watcher = Watcher(
        Kube.from_environment(args.kubeconfig),
        KUEUE_API,
        MULTIKUEUE_CLUSTER,
        cache=RingingCache(bell, spec_and_status),
    )
    # The members' Secrets, in the fleet's namespace only (the one its Role covers).
    secrets = Watcher(
        Kube.from_environment(args.kubeconfig),
        "v1",
        "Secret",
        cache=RingingCache(bell, member_credentials),
        namespace=args.fleet_namespace,
    )
    clients = SecretClients(kube, args.fleet_namespace)
    watches = kube_member_watches(bell, lambda name: member_kube(clients.credentials(name)))
    gateway = Gateway(
        kube,
        clients,
        events,
        grace=args.orphan_grace,
        fleet_namespace=args.fleet_namespace,
        watches=watches,
    )
    liveness = health.Liveness(stale_after=3 * args.resync + 60)
    if args.health_port >= 0:
        health.serve(liveness, health.registry(gateway), args.health_port)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    watcher.start()
    secrets.start()
    log.info("worker gateway %s: a pass every %.0fs at most", args.identity, args.resync)
    try:
        run(gateway, bell.wait, args.resync, stopping, liveness, args.debounce)
    finally:
        watches.stop()
        clients.close()
    watcher.stop()
    secrets.stop()
    events.drain(timeout=5.0)
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
