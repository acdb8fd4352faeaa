"""A fleet of three emulated clusters on this machine (docs/fleet.md, "Installing a fleet").

    bed = FleetBed(root); bed.up()   # ...; bed.down()

- **member-a**: two nodes of 4 T4 each; **member-b**: one node of 4 T4 and one of 2 L4. Each is
  an emulated testbed (`testbed.harness.Testbed`: its own etcd, API server, controller manager
  with the Job controller beside the emulated set, Kueue, JobSet, Metacontroller, NFD master)
  with the normal chain install plus the component `manifests/fleet/member`, as docs/fleet.md
  tells users. Nodes are registered as a kubelet would (no kubelet runs: no container ever
  starts), their hardware published through the real NFD master, and each node's `Devices`
  and fit labels written as its agent would (cards free), so the members' InstanceTypes count
  cards and a pinned slice finds its nodes.
- **the manager**: no nodes, no NFD; Kueue with MultiKueue, its `multiKueue.workerLostTimeout`
  set short in Kueue's Configuration (the one setting docs/fleet.md tells users they may
  change there; `kueue_settings`), Metacontroller, the worker install with the shipped
  component `manifests/fleet` applied unmodified (`testbed.install`), and the worker gateway run
  from its shipped Deployment's command line under its shipped account, with `--orphan-grace`
  at least the timeout as the docs ask.
- **joining a member**, as docs/fleet.md says: on the manager, the gateway's Secret
  `gpustack-gateway-<member>` in `gpustack-fleet` (the member's `gpustack-worker-gateway-token`
  token, its CA inline), MultiKueue's own kubeconfig Secret in Kueue's namespace (the token of
  the account Kueue's MultiKueue setup tells users to make on the member, `kueue_account`, inline:
  Kueue refuses file paths), and the `MultiKueueCluster`.

`stop_member` and `start_member` take a member's API server away and bring it back, so that
Kueue marks it inactive and Active again. `rss` sums the resident memory of every process of
the bed.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from functools import partial
from pathlib import Path

from chain.apis import KUEUE_API, WORKER_API
from chain.devices import Devices
from chain.families import credits_resource
from chain.fit import fit_label_patch, fit_labels
from chain.labels import is_managed
from chain.ledger import Mode
from chain.manufacturers import default_manufacturers
from chain.quantity import parse_quantity
from kubeapi import Kube, Obj, wait_for
from nodeagent.capacity import node_capacity_patch
from testbed.components import KUEUE_NAMESPACE
from testbed.harness import COMPONENT_ORDER, Process, Testbed, free_port, pid_alive
from testbed.install import MANIFESTS, Installed, install, kustomize_with
from testbed.nodes import (
    L4,
    T4,
    device_manager_feature,
    nfd_worker_feature,
    node_object,
    register_node,
)

FLEET_COMPONENT = MANIFESTS / "fleet"
MEMBER_COMPONENT = MANIFESTS / "fleet" / "member"
FLEET_NAMESPACE = "gpustack-fleet"
SYSTEM_NAMESPACE = "gpustack-system"
GATEWAY = "gpustack-worker-gateway"
GATEWAY_TOKEN = "gpustack-worker-gateway-token"
MULTIKUEUE_CLUSTER = "MultiKueueCluster"
KUEUE_ACCOUNT = "multikueue-sa"
"""MultiKueue's ServiceAccount on each member, named as Kueue's setup script names it."""
L4_POOL = "gpustack--nvidia-l4-linux-amd64"
WORKER_LOST_TIMEOUT = 20.0
"""Seconds: the manager Kueue's `multiKueue.workerLostTimeout` here (15 minutes by default)."""
ORPHAN_GRACE = 120.0
"""Seconds: the gateway's `--orphan-grace`, at least the timeout, as docs/fleet.md asks."""


@dataclass(frozen=True)
class FleetNode:
    name: str
    model: str
    """`t4` or `l4`."""
    cards: int


MEMBERS: dict[str, tuple[FleetNode, ...]] = {
    "member-a": (FleetNode("a-t4-0", "t4", 4), FleetNode("a-t4-1", "t4", 4)),
    "member-b": (FleetNode("b-t4-0", "t4", 4), FleetNode("b-l4-0", "l4", 2)),
}

_FEATURES = {"t4": T4, "l4": L4}
_DEVICES = {
    # model: (Devices group id, its name, memory in MiB), as the agent reports them
    "t4": ("tesla-t4", "Tesla T4", 15360),
    "l4": ("l4", "NVIDIA L4", 23034),
}


SLICES_PER_CARD = 128
SHARES_PER_CARD = 10


def add_node(kube: Kube, node: FleetNode) -> None:
    """A node of `node.cards` cards and 16 CPUs, registered with what its kubelet would
    advertise once the agent's device plugins registered (whole cards, shares, slices), and
    what NFD and the agent publish for it."""
    capacity = {
        "nvidia.com/gpu": str(node.cards),
        "nvidia.com/gpu.shared": str(node.cards * SHARES_PER_CARD),
        "nvidia.com/gpu.sliced": str(node.cards * SLICES_PER_CARD),
    }
    register_node(kube, node_object(node.name, cpu="16", capacity=capacity))
    kube.apply(nfd_worker_feature(node.name))
    kube.apply(device_manager_feature(node.name, node.cards, _FEATURES[node.model]))


def _devices_labels(kube: Kube, node: str) -> dict[str, str] | None:
    """What the agent mirrors onto a node's `Devices` (`nodeagent.report.devices_labels`), once
    NFD has labelled the Node: os, arch, the managed mark, CPU and card presence keys."""
    found = kube.get("v1", "Node", node) or {}
    labels: dict[str, str] = (found.get("metadata") or {}).get("labels") or {}
    if not any(key.startswith("acceleratable.feature.gpustack.ai/nvidia-") for key in labels):
        return None
    mirrored = ("kubernetes.io/os", "kubernetes.io/arch", "gpustack.ai/managed")
    out = {key: labels[key] for key in mirrored if labels.get(key)}
    for key, value in labels.items():
        if value == "true" and key.startswith(
            ("general.feature.gpustack.ai/", "acceleratable.feature.gpustack.ai/nvidia-")
        ):
            out[key] = value
    return out


def card_id(node: FleetNode, index: int) -> str:
    """The id of the node's card `index`, in its Devices spec and ledger."""
    return f"{node.name}-gpu-{index}"


def write_devices(kube: Kube, node: FleetNode, timeout: float = 120) -> None:
    """The node's `Devices` as its agent writes them: the cards in the spec, each free in the
    ledger, so that the pool-cards keeper counts them."""
    group, name, mib = _DEVICES[node.model]
    labels = wait_for(lambda: _devices_labels(kube, node.name), timeout, f"{node.name} labelled")
    cards = [
        {
            "id": card_id(node, i),
            "index": i,
            "topology": {"pciBusId": f"0000:0{i}:00.0"},
            "status": {"unhealthy": False, "logicalSliced": {"count": 128}},
        }
        for i in range(node.cards)
    ]
    meta = {"name": node.name, "labels": labels}
    spec_group = {"id": group, "manufacturer": "nvidia", "name": name, "memory": mib}
    kube.apply(
        {
            "apiVersion": WORKER_API,
            "kind": "Devices",
            "metadata": meta,
            "spec": {"groups": [{**spec_group, "accelerators": cards}]},
        }
    )
    write_ledger(kube, node)
    # What the agent writes from its ledger: the fit labels (`chain.fit`; the Workload webhook
    # pins a slice to nodes whose labels show room, and MultiKueue copies the manager's pin
    # here) and the counting keys of the slices (`nodeagent.capacity`; Kueue's topology
    # placement needs the node to offer the folded units).
    devices = Devices.parse(kube.get(WORKER_API, "Devices", node.name) or {})
    found = kube.get("v1", "Node", node.name) or {}
    current = (found.get("metadata") or {}).get("labels") or {}
    patch = fit_label_patch(current, fit_labels(devices, is_managed(current)))
    if patch:
        kube.merge_patch("v1", "Node", node.name, {"metadata": {"labels": patch}})
    status = found.get("status") or {}
    capacity = node_capacity_patch(
        current, status.get("capacity") or {}, devices, default_manufacturers()
    )
    body = capacity.merge_patch()
    if body:
        # The kubelet shows a capacity key as allocatable too; no kubelet runs here.
        counted = body["status"]["capacity"]  # type: ignore[index]
        body = {"status": {"capacity": counted, "allocatable": counted}}
        kube.merge_patch("v1", "Node", node.name, body, subresource="status")


def write_ledger(kube: Kube, node: FleetNode, held: int = 0) -> None:
    """The node's ledger (`Devices.status`) as its agent writes it: its first `held` cards
    taken whole (exclusive), the others free."""
    group = _DEVICES[node.model][0]
    rows = [
        {
            "id": card_id(node, i),
            "index": i,
            "mode": int(Mode.EXCLUSIVE) if i < held else int(Mode.NONE),
            "remaining": 0 if i < held else 1_600_000,
        }
        for i in range(node.cards)
    ]
    kube.apply(
        {
            "apiVersion": WORKER_API,
            "kind": "Devices",
            "metadata": {"name": node.name},
            "status": {"groups": [{"id": group, "manufacturer": "nvidia", "accelerators": rows}]},
        },
        subresource="status",
    )


def inline_kubeconfig(server: str, ca: bytes, user: Obj) -> str:
    """A kubeconfig with nothing in files, as Kueue and the gateway both require."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "member",
                    "cluster": {
                        "server": server,
                        "certificate-authority-data": base64.b64encode(ca).decode(),
                    },
                }
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "member", "context": {"cluster": "member", "user": "user"}}],
            "current-context": "member",
        }
    )


def _secret(name: str, namespace: str, kubeconfig: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    }


def _token(
    member: Testbed, secret: str = GATEWAY_TOKEN, namespace: str = SYSTEM_NAMESPACE
) -> str | None:
    found = member.kube.get("v1", "Secret", secret, namespace) or {}
    token = (found.get("data") or {}).get("token")
    return base64.b64decode(token).decode() if token else None


def _rule(group: str, resources: str, verbs: str) -> Obj:
    return {"apiGroups": [group], "resources": [resources], "verbs": verbs.split()}


def kueue_account() -> list[Obj]:
    """MultiKueue's own account on a member, as Kueue's MultiKueue setup tells users to make it
    (its `create-multikueue-kubeconfig.sh`): the ServiceAccount `multikueue-sa` in Kueue's
    namespace, a ClusterRole on Jobs, JobSets and Workloads and no more, its binding, and a
    legacy token Secret, whose token the manager's `<member>-multikueue` kubeconfig carries.
    Deleting that Secret on the member revokes the token (docs/fleet.md, "Kueue's credentials
    revoked")."""
    dispatch = "create delete get list watch"
    role = f"{KUEUE_ACCOUNT}-role"
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": KUEUE_ACCOUNT, "namespace": KUEUE_NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                _rule("batch", "jobs", dispatch),
                _rule("batch", "jobs/status", "get"),
                _rule("jobset.x-k8s.io", "jobsets", dispatch),
                _rule("jobset.x-k8s.io", "jobsets/status", "get"),
                _rule("kueue.x-k8s.io", "workloads", dispatch),
                _rule("kueue.x-k8s.io", "workloads/status", "get patch update"),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{KUEUE_ACCOUNT}-crb"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": KUEUE_ACCOUNT, "namespace": KUEUE_NAMESPACE}
            ],
        },
        kueue_token_secret(),
    ]


def remove_kueue_account(kube: Kube) -> None:
    """Delete MultiKueue's account (`kueue_account`) from a member that leaves the fleet."""
    for obj in reversed(kueue_account()):
        meta = obj["metadata"]
        kube.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))


def kueue_token_secret() -> Obj:
    """The legacy token Secret of MultiKueue's account on a member (`kueue_account`)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": KUEUE_ACCOUNT,
            "namespace": KUEUE_NAMESPACE,
            "annotations": {"kubernetes.io/service-account.name": KUEUE_ACCOUNT},
        },
    }


def _active(kube: Kube, member: str) -> Obj | None:
    """The `Active` condition Kueue wrote on the member's `MultiKueueCluster`."""
    found = kube.get(KUEUE_API, MULTIKUEUE_CLUSTER, member) or {}
    for condition in (found.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Active":
            return dict(condition)
    return None


def cluster_active(kube: Kube, member: str) -> str | None:
    """The `Active` condition's status Kueue wrote on the member's `MultiKueueCluster`."""
    condition = _active(kube, member)
    return None if condition is None else str(condition.get("status"))


def connected(kube: Kube, member: str) -> bool:
    """Whether Kueue has `member`'s `MultiKueueCluster` Active on the manager `kube`."""
    return cluster_active(kube, member) == "True"


def gateway_argv(kubeconfig: Path, health_port: int, orphan_grace: float) -> list[str]:
    """The shipped gateway Deployment's command line (`manifests/fleet/gateway.yaml`, as the
    manager's overlay builds it), its Pod name filled in and health on `health_port`, with the
    kubeconfig of its shipped account and the grace docs/fleet.md asks for beside a shortened
    `workerLostTimeout`."""
    objects = kustomize_with(MANIFESTS, FLEET_COMPONENT)
    deployment = next(
        obj for obj in objects if obj["kind"] == "Deployment" and obj["metadata"]["name"] == GATEWAY
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [arg.replace("$(POD_NAME)", "gateway-0") for arg in container.get("args") or []]
    args = [
        f"--health-port={health_port}" if arg.startswith("--health-port=") else arg for arg in args
    ]
    assert container.get("command") == ["python"], "the gateway runs as `python -m ...`"
    return [
        sys.executable,
        *args,
        f"--kubeconfig={kubeconfig}",
        f"--orphan-grace={orphan_grace:g}",
    ]


def succeed_pod(kube: Kube, pod: Obj) -> None:
    """SIMULATED: what a kubelet writes once the Pod's one container exited 0. No kubelet runs
    on an emulated member, so no container ever starts; the tests and the demo say so where
    they call this."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}
    containers = pod["spec"]["containers"]
    kube.merge_patch(
        "v1",
        "Pod",
        pod["metadata"]["name"],
        {
            "status": {
                "phase": "Succeeded",
                "startTime": now,
                "containerStatuses": [
                    {
                        "name": container["name"],
                        "image": container.get("image", ""),
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {"terminated": terminated},
                    }
                    for container in containers
                ],
            }
        },
        pod["metadata"]["namespace"],
        subresource="status",
    )


VIEWS = ("accelerator", "acceleratorShared", "acceleratorSliced")
CREDITS = credits_resource("nvidia")


def _q(text: object) -> Fraction:
    return parse_quantity(str(text or "0"))


def instance_type_status(kube: Kube, pool: str) -> Obj:
    """The status of `pool`'s InstanceType on the cluster of `kube` ({} while it has none)."""
    found = kube.get(WORKER_API, "InstanceType", pool) or {}
    status: Obj = found.get("status") or {}
    return status


def views(status: Obj) -> dict[str, tuple[Fraction, Fraction, Fraction]]:
    """Each whole-card, shared and sliced view of an InstanceType status (a member's own, the
    fleet's, or one entry of its `memberViews`): `onceMaxRequest`, `remaining`, `capacity`."""
    return {
        view: (
            _q((status.get(view) or {}).get("onceMaxRequest")),
            _q((status.get(view) or {}).get("remaining")),
            _q((status.get(view) or {}).get("capacity")),
        )
        for view in VIEWS
    }


def members_sum(statuses: Sequence[Obj]) -> dict[str, tuple[Fraction, Fraction, Fraction]]:
    """What the fleet must show, from the members' own InstanceTypes: `remaining` and `capacity`
    add, `onceMaxRequest` is the largest (docs/fleet.md, "How the views sum")."""
    each = [views(status) for status in statuses]
    return {
        view: (
            max((v[view][0] for v in each), default=Fraction(0)),
            sum((v[view][1] for v in each), Fraction(0)),
            sum((v[view][2] for v in each), Fraction(0)),
        )
        for view in VIEWS
    }


def credits_quota(kube: Kube, queue: str) -> Fraction:
    """The credits quota of ClusterQueue `queue`, over all its flavors."""
    found = kube.get(KUEUE_API, "ClusterQueue", queue) or {}
    return sum(
        (
            _q(resource.get("nominalQuota"))
            for group in (found.get("spec") or {}).get("resourceGroups") or []
            for flavor in group.get("flavors") or []
            for resource in flavor.get("resources") or []
            if resource.get("name") == CREDITS
        ),
        Fraction(0),
    )


def sums_match(manager: Kube, members: Mapping[str, Kube], pool: str, summary: str) -> str | None:
    """None once the manager's fleet InstanceType of `pool` shows `summary` and the sums of the
    `members`' own InstanceTypes and queues, read from each member (not from the gateway);
    else what differs, for a timeout's message."""
    fleet = instance_type_status(manager, pool)
    own = [instance_type_status(kube, pool) for kube in members.values()]
    if any(status.get("phase") != "Active" for status in own):
        return f"members' {pool} not all Active: {[s.get('phase') for s in own]}"
    if any(views(status)["accelerator"][2] == 0 for status in own):
        return f"members' {pool} not counting cards yet"
    want = members_sum(own)
    have = views(fleet)
    quota_want = sum((credits_quota(kube, pool) for kube in members.values()), Fraction(0))
    quota_have = credits_quota(manager, pool)
    if (have, fleet.get("memberSummary"), quota_have) != (want, summary, quota_want):
        return (
            f"fleet {have} {fleet.get('memberSummary')!r} quota {quota_have}; "
            f"members {want} {summary!r} quota {quota_want}"
        )
    return None


def wait_sums(manager: Kube, members: Mapping[str, Kube], pool: str, summary: str) -> None:
    """Wait (180 s at most) until `sums_match`; an AssertionError says what differed last."""
    last: list[str | None] = [None]

    def matched() -> bool:
        last[0] = sums_match(manager, members, pool, summary)
        return last[0] is None

    try:
        wait_for(matched, 180, f"the fleet's {pool} to be the sums of {sorted(members)}")
    except TimeoutError as err:
        raise AssertionError(f"{err}: {last[0]}") from None


def _rss_kib(pid: int) -> int:
    """Resident memory of `pid` and every process below it, in KiB."""
    total = 0
    pending = [pid]
    seen: set[int] = set()
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            status = Path(f"/proc/{current}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        pending += children.get(current, [])
    return total


def bed_rss(bed: Testbed) -> int:
    """Resident memory of one emulated cluster, in MiB, every process of it (and below it)."""
    kib = sum(_rss_kib(proc.pid) for proc in bed.state.processes.values() if pid_alive(proc.pid))
    return kib // 1024


def member_bed(root: Path) -> Testbed:
    """An emulated member (not started): a testbed with the Job controller, which a member needs
    to run the Jobs MultiKueue copies to it."""
    return Testbed(root, controllers=("job",))


def member_up(bed: Testbed, nodes: Sequence[FleetNode]) -> Installed:
    """Start the member `bed` (`member_bed`) with the chain and `manifests/fleet/member`, and
    register `nodes` with their cards free, as their agents would write them."""
    bed.up()
    installed = install(bed, components=(MEMBER_COMPONENT,))
    for node in nodes:
        add_node(bed.kube, node)
    for node in nodes:
        write_devices(bed.kube, node)
    return installed


def manager_bed(
    root: Path,
    worker_lost_timeout: float = WORKER_LOST_TIMEOUT,
    frameworks: Sequence[str] | None = None,
) -> Testbed:
    """A fleet's manager (not started): Kueue's MultiKueue with `workerLostTimeout` shortened,
    and Kueue's `integrations.frameworks` set to `frameworks` where given: Kueue connects to a
    member only if it serves the CRDs of every framework the manager integrates (docs/fleet.md,
    "What MultiKueue gives, and what it asks")."""
    settings: dict[str, object] = {"multiKueue": {"workerLostTimeout": f"{worker_lost_timeout:g}s"}}
    if frameworks is not None:
        settings["integrations"] = {"frameworks": list(frameworks)}
    return Testbed(root, kueue_settings=settings)


def manager_up(
    manager: Testbed,
    members: Mapping[str, Testbed],
    orphan_grace: float = ORPHAN_GRACE,
    timings: dict[str, float] | None = None,
) -> Installed:
    """Start `manager` (`manager_bed`) with the chain and the shipped `manifests/fleet`, join
    `members` (each up, with the member component applied), run the gateway, and wait until
    Kueue is connected to every member; each step's seconds go in `timings`."""
    timings = {} if timings is None else timings
    started = time.monotonic()
    # No NFD on the manager: it has no nodes (docs/fleet.md, "Installing a fleet").
    manager.up(components=COMPONENT_ORDER[:-1])
    installed = install(manager, components=(FLEET_COMPONENT,))
    timings["manager"] = time.monotonic() - started
    started = time.monotonic()
    for name, member in members.items():
        join(manager.kube, name, member)
    run_gateway(manager, orphan_grace)
    for name in members:
        try:
            wait_for(partial(connected, manager.kube, name), 120, f"Kueue to connect to {name}")
        except TimeoutError as err:
            # Kueue's reason (a CRD the member lacks, a refused credential) is the diagnosis.
            raise TimeoutError(f"{err}; Kueue's Active: {_active(manager.kube, name)}") from err
    timings["join"] = time.monotonic() - started
    return installed


def multikueue_secret(member: str) -> str:
    """The manager's Secret (in Kueue's namespace) with MultiKueue's kubeconfig for `member`."""
    return f"{member}-multikueue"


def join(manager: Kube, name: str, member: Testbed) -> None:
    """`member` joins as docs/fleet.md tells users: the gateway's Secret with the member's
    read-only token; MultiKueue's account on the member (`kueue_account`) and its kubeconfig
    Secret on the manager; the `MultiKueueCluster`. Applied again, it puts new tokens in the
    manager's Secrets (a rotation)."""
    ca = member.certs.ca_crt.read_bytes()
    token = wait_for(lambda: _token(member), 60, f"{name}'s {GATEWAY_TOKEN}")
    manager.apply(
        _secret(
            f"gpustack-gateway-{name}",
            FLEET_NAMESPACE,
            inline_kubeconfig(member.server, ca, {"token": token}),
        )
    )
    for obj in kueue_account():
        member.kube.apply(obj)
    kueue_token = wait_for(
        lambda: _token(member, KUEUE_ACCOUNT, KUEUE_NAMESPACE), 60, f"{name}'s {KUEUE_ACCOUNT}"
    )
    manager.apply(
        _secret(
            multikueue_secret(name),
            KUEUE_NAMESPACE,
            inline_kubeconfig(member.server, ca, {"token": kueue_token}),
        )
    )
    manager.apply(
        {
            "apiVersion": KUEUE_API,
            "kind": MULTIKUEUE_CLUSTER,
            "metadata": {"name": name},
            "spec": {
                "clusterSource": {
                    "kubeConfig": {"location": multikueue_secret(name), "locationType": "Secret"}
                }
            },
        }
    )


def run_gateway(manager: Testbed, orphan_grace: float = ORPHAN_GRACE) -> None:
    """The worker gateway from its shipped command line, under its shipped account."""
    kubeconfig = manager.service_account_kubeconfig(SYSTEM_NAMESPACE, GATEWAY)
    manager.run("worker-gateway", gateway_argv(kubeconfig, free_port(), orphan_grace))


@dataclass
class FleetBed:
    """The manager and its two members, each in a folder of `root`."""

    root: Path
    worker_lost_timeout: float = WORKER_LOST_TIMEOUT
    orphan_grace: float = ORPHAN_GRACE
    manager: Testbed = field(init=False)
    members: dict[str, Testbed] = field(init=False, default_factory=dict)
    installed: dict[str, Installed] = field(init=False, default_factory=dict)
    timings: dict[str, float] = field(init=False, default_factory=dict)
    """Seconds each start step took (`up`): the members, the manager, joining, the gateway."""
    _halted: dict[str, list[Process]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.manager = manager_bed(self.root / "manager", self.worker_lost_timeout)

    def up(self) -> None:
        try:
            for name, nodes in MEMBERS.items():
                started = time.monotonic()
                bed = member_bed(self.root / name)
                self.members[name] = bed
                self.installed[name] = member_up(bed, nodes)
                self.timings[name] = time.monotonic() - started
            self.installed["manager"] = manager_up(
                self.manager, self.members, self.orphan_grace, self.timings
            )
        except BaseException:
            self.down()
            raise

    def join(self, name: str) -> None:
        join(self.manager.kube, name, self.members[name])

    def stop_member(self, name: str) -> None:
        """The member's API server goes away (its etcd and controllers stay): Kueue loses the
        connection and marks the member inactive."""
        self._halted[name] = self.members[name].halt(("kube-apiserver",))

    def start_member(self, name: str) -> None:
        self.members[name].resume(self._halted.pop(name))

    def beds(self) -> Iterator[Testbed]:
        yield from self.members.values()
        yield self.manager

    def rss(self) -> dict[str, int]:
        """Resident memory per cluster, in MiB, every process of it (and below it) counted."""
        return {
            name: bed_rss(bed) for name, bed in (*self.members.items(), ("manager", self.manager))
        }

    def check_alive(self) -> None:
        for bed in self.beds():
            bed.check_alive()

    def logs(self) -> list[tuple[str, str]]:
        return [
            (f"{cluster}: {name}", bed.log_tail(name))
            for cluster, bed in (*self.members.items(), ("manager", self.manager))
            for name in bed.state.processes
        ]

    def down(self) -> None:
        """All three at once: each waits on its own components' exits (up to 10 s each before a
        KILL), and nothing of one is needed by another's stopping."""
        with ThreadPoolExecutor(max_workers=3) as pool:
            for done in [pool.submit(bed.down) for bed in self.beds()]:
                done.result()
        shutil.rmtree(self.root, ignore_errors=True)  # each bed removed its own folder in it
