"""Real nodes joined to a testbed control plane: the images they run, the nodes, cluster DNS.

    bed = Testbed(root, real_nodes=True); bed.up(components=...)
    start_nodes(bed, [NodeSpec("node-a", 0), NodeSpec("node-b", 1)])

The nodes' images (the project's, built from its Containerfile; the Pod sandbox; CoreDNS) are
made here if missing and imported into each node's containerd. Once the nodes are Ready, CoreDNS
(testbed/addons/coredns.yaml) answers at the cluster DNS address, so Pods reach Services by
name. `bed.down()` removes the nodes.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import yaml

from hooks.admission.lease import LEASE_NAMESPACE
from nodeagent.plugin import nvidia as nvidia_plugin
from nodeagent.plugin.nvidia import OPERATOR_LIB_DIR
from testbed import build, images, network, realnode, system
from testbed.harness import Testbed
from testbed.install import install
from testbed.kube import load_yaml_documents, wait_for
from testbed.nodes import nfd_worker_feature
from testbed.realnode import NodeSpec, RealNode

ADDONS = Path(__file__).with_name("addons")
# The real nodes of the e2e tests and the demo: two, so that traffic crosses nodes; the overlay
# (testbed/overlay) gives node-a 4 simulated T4 and node-b 2 simulated L4.
REAL_NODES = (NodeSpec("node-a", 0), NodeSpec("node-b", 1))


def coredns_image() -> str:
    version = build.versions()["coredns"]["version"]
    return images.ensure_scratch_image(f"localhost/coredns:{version}", build.binary("coredns"))


METACONTROLLER_UPSTREAM_IMAGE = "metacontrollerio/metacontroller"


def metacontroller_image() -> str:
    """The testbed's Metacontroller binary where upstream's image has it (its StatefulSet names
    the command `/usr/bin/metacontroller`)."""
    version = build.versions()["metacontroller"]["version"]
    binary = build.binary("metacontroller")
    return images.ensure_scratch_image(
        f"localhost/metacontroller:{version}", binary, "/usr/bin/metacontroller"
    )


KUEUE_MANAGER_CONFIG = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


def kueue_image() -> str:
    """The testbed's Kueue binary where Kueue's image has it (its Deployment runs `/manager`,
    and insists on a non-root user: distroless's 65532)."""
    version = build.versions()["kueue"]["version"]
    binary = build.binary("kueue")
    return images.ensure_scratch_image(f"localhost/kueue:{version}", binary, "/manager", "65532")


def node_images(log: Callable[[str], None] = print) -> list[Path]:
    """Archives of every image a node starts with (built when missing)."""
    system.ensure(log)
    makers = (
        images.ensure_project_image,
        images.ensure_pause_image,
        coredns_image,
        metacontroller_image,
        kueue_image,
    )
    return [images.archive(make()) for make in makers]


HAMI_PLACEHOLDER = (
    "PLACEHOLDER written by the gpustack-chain testbed: HAMi-core's libvgpu.so cannot be built\n"
    "from the registries this testbed reaches. Sliced grants mount this file where a GPU node\n"
    "has the real library; slice isolation itself is proven only on a GPU machine.\n"
)


def place_hami_placeholders(node: RealNode) -> None:
    """What a GPU node's install puts under the agent's lib dir (HAMi-core per CUDA major and
    the preload list), as clearly named placeholders: a sliced container then starts, and the
    dynamic loader says on its stderr that the placeholder is not a library."""
    lib = f"{OPERATOR_LIB_DIR}/{nvidia_plugin.MANUFACTURER}"
    preload = node.host_path(f"{lib}/ld.so.preload")
    preload.parent.mkdir(parents=True, exist_ok=True)
    preload.write_text(nvidia_plugin.LIBVGPU + "\n")
    for major in (11, 12, 13):
        library = node.host_path(f"{lib}/cuda-{major}/libvgpu.so")
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_text(HAMI_PLACEHOLDER)


def start_nodes(bed: Testbed, specs: Sequence[NodeSpec], timeout: float = 180.0) -> list[RealNode]:
    archives = node_images()
    nodes = []
    for spec in specs:
        node = RealNode(bed, spec)
        node.start(list(specs), archives)
        place_hami_placeholders(node)
        nodes.append(node)
    realnode.wait_ready(bed, [s.name for s in specs], timeout)
    start_dns(bed, timeout)
    return nodes


def start_dns(bed: Testbed, timeout: float) -> None:
    text = (ADDONS / "coredns.yaml").read_text()
    text = text.replace("COREDNS_IMAGE", coredns_image())
    text = text.replace("DNS_SERVICE_IP", network.DNS_SERVICE_IP)
    path = bed.root / "coredns.yaml"
    path.write_text(text)
    bed.kube.apply_all(load_yaml_documents(path))

    def ready() -> bool:
        bed.check_alive()
        deployment = bed.kube.get("apps/v1", "Deployment", "coredns", "kube-system")
        return bool(deployment and deployment.get("status", {}).get("readyReplicas"))

    wait_for(ready, timeout, "CoreDNS to be ready")


OVERLAY = Path(__file__).with_name("overlay")
AGENT_NAMESPACE = "gpustack-system"
NVIDIA_AGENT = "gpustack-device-manager-nvidia"
NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"


def ready_agents(bed: Testbed) -> int:
    found = bed.kube.get("apps/v1", "DaemonSet", NVIDIA_AGENT, AGENT_NAMESPACE) or {}
    return int(found.get("status", {}).get("numberReady", 0))


def install_chain(bed: Testbed, nodes: Sequence[NodeSpec], timeout: float = 180.0) -> None:
    """The chain on a testbed with real nodes.

    The node agents are the shipped DaemonSets from `kubectl kustomize testbed/overlay` (the
    local image, simulated NVIDIA hardware per node), applied with the real kubectl; the
    kubelets register their plugins. The rest is installed by `testbed.install` as for every
    e2e test (hooks and webhooks served on the host, their Deployments not run), and the
    verdict driver runs as a host process under its shipped ServiceAccount. What nfd-worker
    would publish for these nodes (their CPU, NVIDIA's vendor on the simulated PCI bus) is
    published as its NodeFeature."""
    install(bed)
    for spec in nodes:
        feature = nfd_worker_feature(spec.name)
        feature["spec"]["labels"][NVIDIA_PCI_LABEL] = "true"
        bed.kube.apply(feature)
    kubeconfig = bed.service_account_kubeconfig(LEASE_NAMESPACE, "gpustack-admission-driver")
    argv = [sys.executable, "-m", "hooks.admission.driver", "--kubeconfig", str(kubeconfig)]
    bed.run("admission-driver", [*argv, "--identity", "driver", "--period", "0.5"])
    rendered = kubectl(bed, "kustomize", str(OVERLAY))
    daemonsets = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "DaemonSet"]
    kubectl(bed, "apply", "-f", "-", stdin=yaml.safe_dump_all(daemonsets))
    wait_for(lambda: ready_agents(bed) == len(nodes), timeout, "the node agents to be ready")
    for spec in nodes:
        wait_for(partial(offers_cards, bed, spec.name), timeout, f"{spec.name} to offer cards")


def pool_views(bed: Testbed, pool: str) -> str | None:
    """A pool's four views (EX/SH/SL/PT, `onceMaxRequest/remaining` each) once its cards are
    counted: None while the InstanceType has no status yet or still counts no card."""
    found = bed.kube.get("worker.gpustack.ai/v1alpha1", "InstanceType", pool) or {}
    summary = str(found.get("status", {}).get("acceleratorSummary") or "")
    exclusive_remaining = summary.split(" ")[0].partition("/")[2]
    return summary if exclusive_remaining not in ("", "0") else None


def offers_cards(bed: Testbed, node: str) -> bool:
    """The kubelet took the agent's registration and the agent wrote the counting keys."""
    found = bed.kube.get("v1", "Node", node) or {}
    offered = found.get("status", {}).get("allocatable", {})
    return bool(offered.get("nvidia.com/gpu")) and "nvidia.com/gpu.sliced.units" in offered


def install_metacontroller(bed: Testbed, timeout: float = 180.0) -> None:
    """Metacontroller as its own manifests install it (`manifests/production` of its module:
    namespace, RBAC, StatefulSet), rendered by the real kubectl, with the image reference
    swapped for the testbed's. Its CRDs stay the ones the testbed installed (widened by v4's two
    fields, `harness.metacontroller_v4_fields`)."""
    source = build.module_dir("metacontroller") / "manifests/production"
    rendered = yaml.safe_load_all(kubectl(bed, "kustomize", str(source)))
    objects = [o for o in rendered if o and o["kind"] != "CustomResourceDefinition"]
    image = metacontroller_image()
    for obj in objects:
        for container in (
            obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        ):
            if container["image"].startswith(METACONTROLLER_UPSTREAM_IMAGE + ":"):
                container["image"] = image
    kubectl(bed, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))

    def ready() -> bool:
        found = bed.kube.get("apps/v1", "StatefulSet", "metacontroller", "metacontroller") or {}
        return bool(found.get("status", {}).get("readyReplicas"))

    wait_for(ready, timeout, "Metacontroller's StatefulSet to be ready")


def install_kueue(bed: Testbed, timeout: float = 240.0) -> None:
    """Kueue as its release installs it (`config/default` of its module, rendered by the real
    kubectl, applied server-side), with the chain's configuration merged into its ConfigMap the
    documented way (`python -m hooks.queue.kueue_config --merge`, README), and its image swapped
    for one packing the testbed's binary (pulled never: upstream's `Always` would ask a
    registry this machine cannot reach)."""
    rendered = kubectl(bed, "kustomize", str(build.module_dir("kueue") / "config/default"))
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    image = kueue_image()
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == KUEUE_MANAGER_CONFIG:
            stock = bed.root / "kueue-stock-config.yaml"
            stock.write_text(obj["data"][KUEUE_CONFIG_KEY])
            merge = [sys.executable, "-m", "hooks.queue.kueue_config", "--merge", str(stock)]
            done = subprocess.run(merge, capture_output=True, text=True, check=True)
            obj["data"][KUEUE_CONFIG_KEY] = done.stdout
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                container["image"] = image
                container["imagePullPolicy"] = "IfNotPresent"
    stream = yaml.safe_dump_all(objects)
    kubectl(bed, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)

    def ready() -> bool:
        found = bed.kube.get("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system")
        return bool((found or {}).get("status", {}).get("availableReplicas"))

    wait_for(ready, timeout, "Kueue's controller manager to be available")


def kubectl(bed: Testbed, *args: str, stdin: str | None = None) -> str:
    """The real kubectl of the pinned Kubernetes version, as a user runs it."""
    argv = [str(build.bin_dir("kubernetes-node") / "kubectl"), f"--kubeconfig={bed.kubeconfig}"]
    done = subprocess.run(
        [*argv, *args], input=stdin, capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout
