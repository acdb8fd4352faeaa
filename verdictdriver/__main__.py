"""`python -m verdictdriver`: the command line the driver's Deployment runs (exit statuses:
`chain.cli`)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence

import requests

from chain import cli
from chain.settings import StartupEnv
from kubeapi import Kube, KubeError, kube_parser, run_connected
from kubeapi.events import EventRecorder
from verdictdriver.caches import Caches
from verdictdriver.driver import EVENTS_CONTROLLER, Driver, log, run
from verdictdriver.health import Heartbeat, serve_health
from verdictdriver.lease import LEASE_NAMESPACE, LEASE_SECONDS, Elector
from verdictdriver.lifecycle import keep_lifecycle_in_background
from verdictdriver.metrics import exposition, watch
from verdictdriver.pool_cards import keep_pool_cards_in_background
from verdictdriver.seed import seed_in_background
from verdictdriver.writes import Writers
from webhookcerts.keeper import Keeper, Target, keep_in_background

DESCRIPTION = """\
The verdict driver: judges, one at a time, the Kueue Workloads waiting on the chain's
AdmissionCheck (gpustack-node-devices), admitting each onto cards that are free, and keeps what
no hook may write (the lifecycle, the pools' cards, the webhooks' certificate). It runs as the
gpustack-admission-driver Deployment in gpustack-system; of its replicas, the one holding the
Lease judges."""


def build_parser() -> cli.Parser:
    parser = kube_parser("python -m verdictdriver", DESCRIPTION)
    parser.add_argument(
        "--identity",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the Lease and in the Events it writes (default: this "
        "host's name and this process's id)",
    )
    parser.add_argument(
        "--period", type=float, default=1.0, help="resync period: seconds between ticks"
    )
    parser.add_argument(
        "--lease-seconds",
        type=int,
        default=LEASE_SECONDS,
        help="how long the leader's Lease lasts unrenewed before another replica takes it",
    )
    parser.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE", "") or LEASE_NAMESPACE,
        help=f"where the leader's Lease lives (default: $POD_NAMESPACE, else {LEASE_NAMESPACE})",
    )
    parser.add_argument(
        "--health-port", type=int, default=8080, help="/healthz and /metrics; -1: none"
    )
    parser.add_argument(
        "--writers", type=int, default=4, help="verdict writes in flight at once; 0: one by one"
    )
    parser.add_argument(
        "--webhook-service",
        action="append",
        default=[],
        metavar="NAME",
        help="a webhook Service the serving certificate must name (repeat); none: the "
        "certificate is someone else's (e.g. cert-manager's) and nothing below is kept",
    )
    parser.add_argument(
        "--webhook-secret",
        default="gpustack-webhook-tls",
        help="the Secret the webhooks' serving certificate is kept in",
    )
    parser.add_argument(
        "--no-lifecycle",
        action="store_true",
        help="do not run the lifecycle keeper (verdictdriver/lifecycle.py) in this process",
    )
    parser.add_argument(
        "--no-pool-cards",
        action="store_true",
        help="do not run the pool-cards keeper (verdictdriver/pool_cards.py) in this process",
    )
    parser.add_argument(
        "--webhook-namespace",
        default=os.environ.get("POD_NAMESPACE", "") or LEASE_NAMESPACE,
        help="where the webhook Services, the Secret and the catalog ConfigMap live (default: "
        f"$POD_NAMESPACE, else {LEASE_NAMESPACE})",
    )
    parser.add_argument(
        "--mutating-webhook",
        action="append",
        default=[],
        metavar="NAME",
        help="a MutatingWebhookConfiguration whose caBundle must trust the Secret (repeat)",
    )
    parser.add_argument(
        "--validating-webhook",
        action="append",
        default=[],
        metavar="NAME",
        help="a ValidatingWebhookConfiguration whose caBundle must trust the Secret (repeat)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_connected(build_parser(), argv, drive)


def drive(kube: Kube, args: argparse.Namespace) -> int:
    try:
        release = StartupEnv.from_env(os.environ).ledger_release_terminated_pods
    except ValueError as err:  # a GPUSTACK_* variable: told before anything starts
        raise cli.UsageError(str(err)) from None
    # The elector's own client: its renewals run on a thread of their own (`renew_aside`), and
    # a `requests.Session` is not meant to be shared between threads.
    lease_kube = Kube.from_environment(args.kubeconfig)
    elector = Elector(lease_kube, args.identity, args.lease_seconds, args.lease_namespace)
    # Unhealthy once passes have failed or hung for a whole Lease duration and then some.
    # Unhealthy too until every cache has been listed: a verdict needs them all.
    heartbeat = Heartbeat(max(30.0, 2 * args.lease_seconds + 10 * args.period), started=False)
    if args.health_port >= 0:
        serve_health(heartbeat, args.health_port, metrics=exposition)
    seed_in_background(kube, os.environ)
    if args.webhook_service:
        target = Target(
            namespace=args.webhook_namespace,
            secret=args.webhook_secret,
            services=args.webhook_service,
            mutating=args.mutating_webhook,
            validating=args.validating_webhook,
        )
        keep_in_background(Keeper(kube, target))
    if not args.no_lifecycle:
        keep_lifecycle_in_background(kube, namespace=args.webhook_namespace)
    caches = Caches()
    caches.start(kube)
    if not args.no_pool_cards:
        keep_pool_cards_in_background(kube, caches.devices, elector.still_leading, caches.nodes)
    writers = (
        Writers.threads(lambda: Kube.from_environment(args.kubeconfig), args.writers)
        if args.writers > 0
        else None
    )
    events = EventRecorder(kube, EVENTS_CONTROLLER, args.identity)
    driver = Driver(
        kube,
        elector,
        caches,
        release_terminated=release,
        writers=writers,
        events=events,
        renew_aside=True,
    )
    watch(lambda: len(driver.promises.written), lambda: elector.leading)
    stopping = threading.Event()
    # SIGTERM (a rollout, a drained node): end within a period, then hand the Lease over at
    # once instead of letting the next replica wait for it to lapse.
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    run(driver, args.period, heartbeat, stop=stopping.is_set, freeze=True)
    try:
        elector.release()
    except (KubeError, requests.RequestException) as err:
        log.warning("could not release the lease: %s", err)
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
