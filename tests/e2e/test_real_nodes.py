"""Real nodes: kubelet + containerd + runc + CNI + kube-proxy, CoreDNS, the project's image.

These run on `real_cluster`, a control plane with two real nodes on this machine. They prove the
ground the shipped install stands on: nodes register and become Ready, the project's image runs
as the manifests run it (non-root, read-only root filesystem), Pod and Service traffic crosses
nodes, cluster DNS answers, `kubectl logs` reaches a kubelet, and `down` leaves nothing behind.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

from kubeapi import Obj, wait_for
from testbed import build, images, network
from testbed.cluster import start_nodes
from testbed.harness import COMPONENT_ORDER, Testbed, pid_alive
from testbed.kubectl import kubectl
from testbed.pytest_plugin import REAL_NODES
from testbed.realnode import NodeSpec, node_pids

NAMESPACE = "default"


def pod(name: str, node: str, command: list[str], **container: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {"name": "main", "image": images.PROJECT_IMAGE, "command": command, **container}
            ],
        },
    }


def finished(bed: Testbed, name: str, timeout: float = 90) -> str:
    """Wait until the Pod ends; its log (the test fails if it did not succeed)."""

    def phase() -> str | None:
        found = bed.kube.get("v1", "Pod", name, NAMESPACE)
        value = (found or {}).get("status", {}).get("phase")
        return value if value in ("Succeeded", "Failed") else None

    result = wait_for(phase, timeout, f"pod {name} to finish")
    log = kubectl(bed, "logs", "-n", NAMESPACE, name)
    assert result == "Succeeded", f"pod {name} {result}:\n{log}"
    return log


def test_nodes_are_ready_with_the_pinned_runtime(real_cluster: Testbed) -> None:
    pins = build.versions()
    for spec in REAL_NODES:
        node = real_cluster.kube.get("v1", "Node", spec.name)
        assert node is not None
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == pins["kubernetes"]["version"]
        assert info["containerRuntimeVersion"] == "containerd://" + pins["containerd"][
            "version"
        ].lstrip("v")
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == real_cluster.network.node(spec.name, spec.index).ip
        taints = [t["key"] for t in node["spec"].get("taints", [])]
        assert "node.kubernetes.io/not-ready" not in taints


def test_the_project_image_runs_as_the_manifests_run_it(real_cluster: Testbed) -> None:
    """Non-root, read-only root filesystem, no privilege: the agent's detection and a hook's
    import both work from the image (stubs generated at build time, bytecode precompiled). The
    simulated hardware writes a fake sysfs, so it gets a scratch /tmp, as in the testbed's
    overlay; real detection only reads /sys."""
    check = pod(
        "image-check",
        REAL_NODES[0].name,
        [
            "sh",
            "-c",
            "id -u; python -m nodeagent detect --simulate t4x4 -o json | head -c 400; echo;"
            " python -c 'import hooks.flavor.app, nodeagent.plugin.protos as p;"
            ' p.deviceplugin(); print("imports ok")\'',
        ],
        securityContext={
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
        },
        volumeMounts=[{"name": "scratch", "mountPath": "/tmp"}],
    )
    check["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    real_cluster.kube.create(check)
    log = finished(real_cluster, "image-check")
    lines = log.splitlines()
    assert lines[0] == "65532"
    assert '"tesla-t4"' in log
    assert "imports ok" in log


def test_services_route_across_nodes_by_dns_name(real_cluster: Testbed) -> None:
    server = pod(
        "echo-server",
        REAL_NODES[1].name,
        ["python", "-m", "http.server", "8080", "--directory", "/etc"],
        ports=[{"containerPort": 8080}],
        readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1},
    )
    real_cluster.kube.create(server)
    real_cluster.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "echo", "namespace": NAMESPACE},
            "spec": {
                "selector": {"app": "echo-server"},
                "ports": [{"port": 80, "targetPort": 8080}],
            },
        }
    )

    def ready() -> bool:
        found = real_cluster.kube.get("v1", "Pod", "echo-server", NAMESPACE) or {}
        conditions = found.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_for(ready, 60, "echo-server to be ready")
    # kube-proxy programs a Service a moment after its endpoints appear (and rejects until
    # then): the client retries for a while, as any client of a new Service must.
    fetch = (
        "import socket, time, urllib.request\n"
        f"print(socket.gethostbyname('echo.{NAMESPACE}.svc.{network.CLUSTER_DOMAIN}'))\n"
        "for attempt in range(40):\n"
        "    try:\n"
        "        answer = urllib.request.urlopen('http://echo/os-release', timeout=5)\n"
        "        print(answer.read().decode())\n"
        "        break\n"
        "    except OSError as error:\n"
        "        last = error\n"
        "        time.sleep(0.5)\n"
        "else:\n"
        "    raise SystemExit(f'echo never answered: {last}')\n"
    )
    real_cluster.kube.create(pod("echo-client", REAL_NODES[0].name, ["python", "-c", fetch]))
    log = finished(real_cluster, "echo-client")
    service = real_cluster.kube.get("v1", "Service", "echo", NAMESPACE)
    assert service is not None
    assert log.splitlines()[0] == service["spec"]["clusterIP"]
    assert "Debian GNU/Linux" in log


def _snapshot() -> dict[str, str]:
    """What a testbed with real nodes could leave behind on the host."""

    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout

    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    return {
        "netns": run("ip", "netns", "list"),
        "links": " ".join(
            sorted(line.split()[0] for line in run("ip", "-br", "link").splitlines())
        ),
        "routes": run("ip", "route"),
        "iptables": "\n".join(
            line for line in run("iptables-save").splitlines() if not line.startswith("#")
        ),
        "cgroups": " ".join(sorted(str(p) for p in Path("/sys/fs/cgroup").glob("*/gpustack*"))),
        "mounts": "\n".join(line for line in mounts if "gpustack" in line),
    }


def test_down_leaves_nothing_behind(real_cluster: Testbed) -> None:
    """A second testbed with one real node and a running Pod, brought down: no process, mount,
    network namespace, veth, route, iptables rule or cgroup of it is left. It comes up beside
    `real_cluster` (in the next network slot), which must stay untouched."""
    before = _snapshot()
    bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-down-check-")), real_nodes=True)
    try:
        bed.up(components=COMPONENT_ORDER[:3])
        assert bed.state.slot != real_cluster.state.slot
        start_nodes(bed, [NodeSpec("down-check", 0)])
        bed.kube.create(pod("sleeper", "down-check", ["sleep", "3600"]))
        wait_for(
            lambda: (
                (bed.kube.get("v1", "Pod", "sleeper", NAMESPACE) or {})
                .get("status", {})
                .get("phase")
                == "Running"
            ),
            60,
            "the sleeper pod to run",
        )
        pids = node_pids(bed, "down-check")
        assert len(pids) >= 5  # holder, containerd, kubelet, a shim, pause and sleep
    finally:
        bed.down()
    assert not [pid for pid in pids if pid_alive(pid)]
    assert not bed.root.exists()
    assert _snapshot() == before
    assert real_cluster.kube.get("v1", "Node", REAL_NODES[0].name) is not None
