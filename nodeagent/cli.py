"""The agent's command line: `python -m nodeagent <command>`.

`preflight` answers, for each manufacturer, whether its cards are detected (cross-checked with the
host's own CLI), can be sliced (their isolation library staged and loading) and can be managed
while sliced (`nodeagent/preflight.py`); exit status 1 means some allocation would be refused.

`detect` prints what detection finds now, as the `spec.groups` of the node's `Devices` object: a
pure read that writes nothing anywhere. `--simulate PROFILE` runs the real NVIDIA detector on a
simulated NVML and sysfs (a shipped profile name, or a profile file). Without a driver the answer
is an empty list and the exit status 0: a node without cards is not an error. Exit status 1 means
a detector failed (could not measure), 2 a usage or profile error.

`serve` exits 3 when its kubeconfig or service account cannot be used and 4 when the API server
does not answer at start-up: the codes every process shares (`chain.cli`).

`serve` is the agent's composition root: each part is built here with its collaborators passed
in, in this order, so an Allocate's way to the ledger reads top to bottom in `serve`:
1. `NodeRecords.connect`: the watch of this node's Pods and `KubeNode` over it, the journal and
   its `JournaledWriter` (which lands records on the Pods), and the `NodeState` that owns the
   reservations, over those Pods and that writer.
2. `Reporter`: the ledger (`Devices.status`), read from the same Pods and from the records the
   journal cannot land yet (`NodeRecords.unrecorded`).
3. `DevicePlugins`: the servers over those records, told to write the ledger (`on_pods`) after
   every change of the Pods, or of what the journal cannot land.
An Allocate then runs: the server's allocator decides and reserves under the `NodeState` mutex,
records the grant through the writer (journaled; the annotation lands on the Pod from a writer
thread), and answers; the Pod's new annotation comes back through the watch, and the follower
calls the `Reporter`, which rebuilds and writes the ledger.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

import logline as logs
from chain import cli
from chain.devices import DevicesGroup
from chain.manufacturers import manufacturers
from chain.release import AGENT_NAMESPACE
from chain.settings import StartupEnv
from kubeapi import Kube, add_kubeconfig_flag
from kubeapi.events import EventRecorder
from kubeapi.watch import Watcher
from nodeagent.agent import Reporter, label_waker, node_name, stop_on_signals
from nodeagent.detect.loop import (
    MONITOR_PERIOD_SECONDS,
    REDETECT_EVERY_MONITOR_ROUNDS,
    DetectionRound,
    DetectLoop,
)
from nodeagent.detect.registry import (
    ALL,
    DetectorSetup,
    detections,
    requested_manufacturers,
)
from nodeagent.detect.sysfs import Sysfs
from nodeagent.health import Health
from nodeagent.health import serve as serve_health
from nodeagent.metrics import exposition
from nodeagent.node_events import EVENTS_CONTROLLER
from nodeagent.plugin.grants import OPERATOR_LIB_DIR, DeviceNodes, Responder
from nodeagent.plugin.isolation import OFFERED, IsolationCheck, Slicing
from nodeagent.plugin.journal import JOURNAL_NAME
from nodeagent.plugin.mig import MigNvml
from nodeagent.plugin.responders import RESPONDERS
from nodeagent.preflight import preflight
from nodeagent.report import align_device_groups
from nodeagent.simulate import shipped_profiles
from nodeagent.simulate.host import SimulatedHost, simulated_host
from nodeagent.topology.nics import read_network
from nodeagent.topology.node import read_node_links
from nodeagent.vendors.registry import vendor_named

if TYPE_CHECKING:
    from nodeagent.plugin.running import NodeRecords

HOST_ROOT = "/host"
"""Where a preflight container finds the host's root filesystem (bind-mounted read-only)."""
LIB_DIR_HELP = (
    "where the isolation libraries sliced grants preload are staged on the host, one directory "
    "per manufacturer; a group whose library there is missing or does not load is published "
    f"without logical slices (default {OPERATOR_LIB_DIR})"
)


DESCRIPTION = """\
The node agent: detects the accelerator cards of the node it runs on, reports them to the
cluster (the node's Devices object, NodeFeature labels, capacity) and serves the kubelet device
plugins that grant them. `serve` runs in the gpustack-device-manager-<manufacturer> DaemonSets
of gpustack-agents; `detect` and `preflight` are one-shot checks, on a node or in an agent's
container."""
DETECT = """\
Print what detection finds now, as the spec.groups of the node's Devices object: a pure read
that writes nothing anywhere. Without a driver the answer is an empty list and the exit status
0: a node without cards is not an error."""
PREFLIGHT = """\
Answer, for each manufacturer, whether its cards are detected (cross-checked with the host's own
CLI), can be sliced (their isolation library staged and loading) and can be managed while
sliced, asked as Allocate will ask it."""
SERVE = """\
The agent itself: detect and report until stopped (SIGTERM), and with --device-plugin-dir serve
the kubelet device plugins and keep the Devices ledger."""
SIMULATE_HELP = (
    f"simulated hardware: a profile file or one of {', '.join(shipped_profiles())} (the real "
    "detector of the profile's manufacturer on its simulated library and sysfs)"
)
OUTPUT_HELP = "how to print the answer"
NO_PCI_CHECK_HELP = "ask the drivers even with no device on the bus"


def build_parser() -> cli.Parser:
    exits = cli.exits(
        failed="detect: a detector failed; preflight: some allocation would be refused",
        kube=True,
    )
    parser = cli.parser("python -m nodeagent", DESCRIPTION, exits)
    commands = parser.commands()
    detect = commands.add_parser(
        "detect",
        help="print the detected spec.groups (a pure read)",
        description=DETECT,
        epilog=cli.exits(failed="a detector failed (could not measure)"),
    )
    detect.add_argument("--simulate", metavar="PROFILE", help=SIMULATE_HELP)
    detect.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml", help=OUTPUT_HELP
    )
    detect.add_argument(
        "--manufacturer", default=ALL, help="manufacturers to detect, comma separated"
    )
    detect.add_argument("--no-pci-check", action="store_true", help=NO_PCI_CHECK_HELP)
    check = commands.add_parser(
        "preflight",
        help="what this host offers, asked as Allocate will ask it (exit 1: an allocation "
        "would be refused)",
        description=PREFLIGHT,
        epilog=cli.exits(failed="some allocation would be refused"),
    )
    check.add_argument("--simulate", metavar="PROFILE", help="simulated hardware, as for detect")
    check.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml", help=OUTPUT_HELP)
    check.add_argument(
        "--manufacturer", default=ALL, help="manufacturers to check, comma separated"
    )
    check.add_argument("--no-pci-check", action="store_true", help=NO_PCI_CHECK_HELP)
    check.add_argument(
        "--host-root",
        default=HOST_ROOT if os.path.isdir(HOST_ROOT) else "/",
        help=f"the host's root filesystem, entered with chroot for its own vendor CLI and read "
        f"for its device nodes and staged libraries (default {HOST_ROOT} when mounted, else /)",
    )
    check.add_argument("--lib-dir", default=OPERATOR_LIB_DIR, help=LIB_DIR_HELP)
    serve = commands.add_parser(
        "serve",
        help="the agent: detect and report, until stopped",
        description=SERVE,
        epilog=cli.exits(kube=True),
    )
    serve.add_argument("--node", help="this node's name (default: $NODE_NAME)")
    serve.add_argument(
        "--namespace",
        default=os.environ.get("KUBERNETES_POD_NAMESPACE", AGENT_NAMESPACE),
        help="where the NodeFeature lives (default: $KUBERNETES_POD_NAMESPACE, else "
        f"{AGENT_NAMESPACE})",
    )
    add_kubeconfig_flag(serve)
    serve.add_argument(
        "--simulate",
        metavar="PROFILE",
        help="simulated hardware, as for detect; or NODE=PROFILE,... for one DaemonSet over "
        "nodes with different simulated hardware (a node not named detects its real hardware)",
    )
    serve.add_argument("--manufacturer", default=ALL, help="manufacturers served, comma separated")
    serve.add_argument("--no-pci-check", action="store_true", help=NO_PCI_CHECK_HELP)
    serve.add_argument(
        "--no-fast-failed",
        action="store_true",
        help="publish an empty first detection instead of holding back until a card answers",
    )
    serve.add_argument(
        "--period", type=float, default=MONITOR_PERIOD_SECONDS, help="monitor period, seconds"
    )
    serve.add_argument(
        "--redetect-every",
        type=int,
        default=REDETECT_EVERY_MONITOR_ROUNDS,
        help="monitor rounds between two detections (and reports)",
    )
    serve.add_argument(
        "--device-plugin-dir",
        metavar="DIR",
        help="serve the kubelet device plugins in DIR (e.g. /var/lib/kubelet/device-plugins) "
        "and keep the Devices ledger; off by default",
    )
    serve.add_argument(
        "--pod-resources-socket",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        help="kubelet's pod-resources socket, read by the device plugins",
    )
    serve.add_argument(
        "--pods-dir",
        default="/var/lib/gpustack/operator/pods",
        help="where the sliced plugin keeps its per-Pod work dirs",
    )
    serve.add_argument("--lib-dir", default=OPERATOR_LIB_DIR, help=LIB_DIR_HELP)
    serve.add_argument(
        "--mig-dir",
        help="where the partitioned plugin keeps the ownership markers of its MIG instances "
        "(default: mig/ beside the pods dir, /var/lib/gpustack/operator/mig)",
    )
    serve.add_argument(
        "--allocation-journal",
        help="the file a grant is journaled to before Allocate answers, its annotation written "
        "right after (default: <manufacturer>-allocations.journal beside the pods dir, so in "
        "/var/lib/gpustack/operator by default); 'off': the annotation is written before the "
        "answer",
    )
    serve.add_argument(
        "--health-port",
        type=int,
        default=0,
        help="serve /healthz and /readyz for the kubelet's probes on this port (default 0: "
        "off; the DaemonSets use 8081)",
    )
    return parser


def detect(args: argparse.Namespace) -> int:
    table = manufacturers(os.environ)
    env = StartupEnv.from_env(os.environ)
    names = requested_manufacturers(args.manufacturer, table)
    with ExitStack() as stack:
        if args.simulate:
            host = stack.enter_context(simulated_host(args.simulate))
            setup = DetectorSetup(table, env, host.sysfs, host.nvml, host.injected)
        else:
            setup = DetectorSetup(table, env, Sysfs("/"))
        passes = [entry.detect(args.no_pci_check) for entry in detections(names, setup)]
    groups = align_device_groups([], (group for entry in passes for group in entry.groups), names)
    if args.output == "json":
        print(json.dumps(groups, indent=2))
    else:
        print(yaml.safe_dump(groups, sort_keys=False), end="")
    failed = [entry for entry in passes if not entry.measured]
    for entry in failed:
        print(f"{entry.manufacturer}: detection failed: {entry.error}", file=sys.stderr)
    return 1 if failed else 0


def run_preflight(args: argparse.Namespace) -> int:
    table = manufacturers(os.environ)
    env = StartupEnv.from_env(os.environ)
    names = requested_manufacturers(args.manufacturer, table)
    with ExitStack() as stack:
        nodes = DeviceNodes(args.host_root)
        host: SimulatedHost | None = None
        if args.simulate:
            host = stack.enter_context(simulated_host(args.simulate))
            setup = DetectorSetup(table, env, host.sysfs, host.nvml, host.injected)
            nodes = host.device_nodes or nodes
        else:
            setup = DetectorSetup(table, env, Sysfs("/"))
        passes = [entry.detect(args.no_pci_check) for entry in detections(names, setup)]
        # The simulated host's staged directory is read as the real one is: a simulated node
        # whose library is not staged refuses its slices too.
        isolation = IsolationCheck(lib_dir=args.lib_dir, root=args.host_root)
        report = preflight(
            passes,
            table,
            nodes,
            args.host_root,
            isolation=isolation,
            simulated=host,
        )
    rendered = report.render()
    if args.output == "json":
        print(json.dumps(rendered, indent=2))
    else:
        print(yaml.safe_dump(rendered, sort_keys=False), end="")
    return report.exit_status()


def simulated_profile(flag: str | None, node: str) -> str | None:
    """The profile `--simulate` gives this node: the flag itself, or this node's entry of a
    `NODE=PROFILE,...` map (None when the map does not name the node)."""
    if not flag or "=" not in flag:
        return flag
    entries = dict(entry.split("=", 1) for entry in flag.split(",") if entry)
    return entries.get(node)


def _journal_path(flag: str | None, pods_dir: str, manufacturer: str) -> Path | None:
    """The allocation journal: the flag's file, none for 'off', else beside the pods dir, one
    per agent (each manufacturer's DaemonSet shares the host's state dir)."""
    if flag == "off":
        return None
    if flag:
        return Path(flag)
    name = JOURNAL_NAME if manufacturer == ALL else f"{manufacturer}-{JOURNAL_NAME}"
    return Path(os.path.dirname(os.path.normpath(pods_dir))) / name


def _partition_libraries(names: Sequence[str]) -> dict[str, MigNvml]:
    """The libraries this host's partitions are made with, by manufacturer: each one's
    `Vendor.partition_library`, opened only for the manufacturers this agent serves."""
    found: dict[str, MigNvml] = {}
    for name in names:
        vendor = vendor_named(name)
        if vendor is None or vendor.partition_library is None:
            continue
        if (library := vendor.partition_library()) is not None:
            found[name] = library
    return found


def _ignore(detected: frozenset[str]) -> None:
    """`publish` without device plugins: nobody subscribes."""


def _offered(group: DevicesGroup) -> Slicing:
    """Without the device plugins nothing hands out slices here: no group's are withheld."""
    return OFFERED


def _report_and_refresh(
    reporter: Reporter, refresh: Callable[[], None], current: DetectionRound
) -> None:
    reporter(current)
    refresh()  # ListAndWatch lists the spec just written


def serve(args: argparse.Namespace) -> int:
    """The composition root of the agent (the module's docstring reads its Allocate path)."""
    table = manufacturers(os.environ)
    env = StartupEnv.from_env(os.environ)
    names = requested_manufacturers(args.manufacturer, table)
    node = node_name(args.node)
    # Checked before anything starts: a kubeconfig or API server that cannot work is one line
    # and exit 3 or 4, not a loop logging failed reports.
    kube = Kube.connect(args.kubeconfig)
    logs.setup()
    events = EventRecorder(kube, EVENTS_CONTROLLER, node)
    publish: Callable[[frozenset[str]], None] = _ignore
    # Alive while the loop wakes up at least once in three monitor periods.
    health = Health(stale_after=3 * args.period + 30)
    with ExitStack() as stack:
        if args.health_port:
            probes = serve_health(health, args.health_port, metrics=exposition)
            stack.callback(probes.shutdown)
        # The partitioned plugins cut partitions through the same NVML-shaped library the
        # detector reads (a simulator keeps its instances in that one object).
        partitions: dict[str, MigNvml] = {}
        device_nodes: DeviceNodes | None = None
        responders: dict[str, Responder] = dict(RESPONDERS)
        profile = simulated_profile(args.simulate, node)
        if profile:
            host = stack.enter_context(simulated_host(profile))
            setup = DetectorSetup(table, env, host.sysfs, host.nvml, host.injected)
            partitions, device_nodes = host.partition_libraries(), host.device_nodes
            responders.update(host.responders())  # its simulated drivers, not the host's
        else:
            setup = DetectorSetup(table, env, Sysfs("/"))
            partitions = _partition_libraries(names)
        # 1. With the device plugins: the node's Pods (one watch), its allocation state and the
        # journal's writer, which the plugins grant through and the ledger is written from.
        records: NodeRecords | None = None
        if args.device_plugin_dir is not None:  # imported here: gRPC stubs are made on first use
            from nodeagent.plugin.running import DevicePlugins, NodeRecords

            records = NodeRecords.connect(
                kube,
                node,
                watch_pods=kube,
                journal=_journal_path(args.allocation_journal, args.pods_dir, args.manufacturer),
                env=env,
            )
        # 2. The reports and, with the plugins, the ledger: from the same Pods and the records the
        # journal cannot land yet. A simulated host is checked like a real one (its responders,
        # the same staged directory): a group whose isolation library is not usable publishes
        # no slices.
        reporter = Reporter(
            kube,
            node,
            args.namespace,
            names,
            table,
            ledger=records is not None,
            release_terminated=env.ledger_release_terminated_pods,
            pods=None if records is None else records.io.pods,
            unrecorded=None if records is None else records.unrecorded,
            events=events,
            network=partial(read_network, setup.sysfs.root),
            slicing=_offered if records is None else IsolationCheck(responders, args.lib_dir),
        )
        report: Callable[[DetectionRound], None] = reporter
        # 3. The servers over those records, the ledger following every change of the Pods.
        if records is not None:
            servers = DevicePlugins(
                records,
                table,
                args.device_plugin_dir,
                args.pod_resources_socket,
                args.pods_dir,
                partition_libraries=partitions,
                mig_dir=args.mig_dir
                or os.path.join(os.path.dirname(os.path.normpath(args.pods_dir)), "mig"),
                env=env,
                environ=os.environ,
                device_nodes=device_nodes,
                responders=responders,
                lib_dir=args.lib_dir,
                on_pods=reporter.write_ledger,
                # How each manufacturer's cards and the RDMA cards connect, read from the host
                # when its servers start (docs/topology.md, "Best-connected card sets").
                links=lambda maker, cards: read_node_links(setup, (maker,), cards),
            )
            stack.callback(servers.stop)
            publish = servers.publish
            report = partial(_report_and_refresh, reporter, servers.refresh)

        def report_and_mark(current: DetectionRound) -> None:
            report(current)
            health.mark_reported()

        node_watch = Watcher(kube, "v1", "Node", field_selector=f"metadata.name={node}").start()
        stack.callback(node_watch.stop)
        stopping = stop_on_signals(wake=node_watch.cache.wake)
        # A signal or a change of the Node's labels ends the sleep at once.
        sleep = label_waker(stopping, node_watch.cache, node, lambda: reporter.reported_labels)

        def sleep_and_beat(seconds: float) -> None:
            health.beat()
            sleep(seconds)
            health.beat()

        loop = DetectLoop(
            detections(names, setup),
            names,
            publish=publish,
            report=report_and_mark,
            sleep=sleep_and_beat,
            no_fast_failed=args.no_fast_failed,
            no_pci_check=args.no_pci_check,
            period=args.period,
            redetect_every=args.redetect_every,
            report_due=reporter.node_changed,
            held_back=reporter.held_back,
        )
        loop.run(stopping.is_set)
    # Every server, watch and writer stopped by the stack: the shutdown is over.
    stopping.stopped()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse(argv)
    commands = {"serve": serve, "detect": detect, "preflight": run_preflight}

    def command() -> int:
        try:
            return commands[args.command](args)
        except ValueError as error:  # a bad profile, manufacturer or GPUSTACK_* variable
            raise cli.UsageError(str(error)) from None

    return cli.run(parser.label, command)
