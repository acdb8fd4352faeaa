"""Upstream parts installed in a testbed's cluster the way a user installs them.

Kueue from its release manifests (with the chain's configuration merged into its ConfigMap, the path
docs/install.md documents), Metacontroller and NFD from their own manifests, each rendered by the
real kubectl from its module in the Go module cache, with the image reference swapped for one that
packs the testbed's binary where upstream's image has it.
"""

from __future__ import annotations

import subprocess
import sys

import yaml

from kubeapi import wait_for
from testbed import build, images
from testbed.harness import Testbed
from testbed.kubectl import kubectl
from testbed.registry import image_name

METACONTROLLER_UPSTREAM_IMAGE = "metacontrollerio/metacontroller"
PRIVILEGED_NAMESPACE_LABEL = "pod-security.kubernetes.io/enforce=privileged"


def metacontroller_image() -> str:
    """The testbed's Metacontroller binary where upstream's image has it (its StatefulSet names
    the command `/usr/bin/metacontroller`)."""
    version = build.versions()["metacontroller"]["version"]
    binary = build.binary("metacontroller")
    return images.ensure_scratch_image(
        image_name("metacontroller", version), binary, "/usr/bin/metacontroller"
    )


KUEUE_MANAGER_CONFIG = "kueue-manager-config"
KUEUE_CONFIG_KEY = "controller_manager_config.yaml"


def kueue_image() -> str:
    """The testbed's Kueue binary where Kueue's image has it (its Deployment runs `/manager`,
    and insists on a non-root user: distroless's 65532)."""
    version = build.versions()["kueue"]["version"]
    binary = build.binary("kueue")
    return images.ensure_scratch_image(image_name("kueue", version), binary, "/manager", "65532")


def install_metacontroller(bed: Testbed, timeout: float = 180.0) -> None:
    """Metacontroller as its own manifests install it (`manifests/production` of its module:
    namespace, RBAC, StatefulSet), rendered by the real kubectl, with the image reference
    swapped for the testbed's. Its CRDs stay the ones the testbed installed (widened by v4's two
    fields, `crds.metacontroller_v4_fields`)."""
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
    documented way (`python -m hooks.queue.write_kueue_config --merge`, docs/install.md), and its
    image swapped for one packing the testbed's binary (pulled from the testbed's registry, with
    upstream's own pull policy)."""
    rendered = kubectl(bed, "kustomize", str(build.module_dir("kueue") / "config/default"))
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    image = kueue_image()
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == KUEUE_MANAGER_CONFIG:
            stock = bed.root / "kueue-stock-config.yaml"
            stock.write_text(obj["data"][KUEUE_CONFIG_KEY])
            merge = [sys.executable, "-m", "hooks.queue.write_kueue_config", "--merge", str(stock)]
            done = subprocess.run(merge, capture_output=True, text=True, check=True)
            obj["data"][KUEUE_CONFIG_KEY] = done.stdout
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                container["image"] = image
    stream = yaml.safe_dump_all(objects)
    kubectl(bed, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)

    def ready() -> bool:
        found = bed.kube.get("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system")
        return bool((found or {}).get("status", {}).get("availableReplicas"))

    wait_for(ready, timeout, "Kueue's controller manager to be available")


NFD_UPSTREAM_IMAGE = "registry.k8s.io/nfd/node-feature-discovery"
NFD_PROGRAMS = ("nfd-master", "nfd-worker", "nfd-gc")


def nfd_image() -> str:
    """NFD's programs where its image has them (its manifests run them by name from PATH), as
    its image's user 65534 (the manifests insist on a non-root user)."""
    version = build.versions()["nfd"]["version"]
    files = {f"/usr/bin/{name}": build.binary(name) for name in NFD_PROGRAMS}
    return images.ensure_scratch_files(image_name("nfd", version), files, user="65534:65534")


NFD_NAMESPACE = "node-feature-discovery"


def install_nfd(bed: Testbed, timeout: float = 180.0) -> None:
    """NFD as its default overlay installs it (master, worker DaemonSet, garbage collector),
    applied server-side over the CRDs the testbed already installed from the same module. Its
    namespace is made first and labelled for privileged Pods, as docs/operations.md tells users
    of a cluster that enforces a Pod Security default: nfd-worker mounts host paths, which
    `baseline` refuses."""
    kubectl(bed, "create", "namespace", NFD_NAMESPACE)
    kubectl(bed, "label", "namespace", NFD_NAMESPACE, PRIVILEGED_NAMESPACE_LABEL)
    source = build.module_dir("nfd") / "deployment/overlays/default"
    objects = [o for o in yaml.safe_load_all(kubectl(bed, "kustomize", str(source))) if o]
    image = nfd_image()
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            if container["image"].startswith(NFD_UPSTREAM_IMAGE + ":"):
                container["image"] = image
    stream = yaml.safe_dump_all(objects)
    kubectl(bed, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stream)

    def ready() -> bool:
        ns = NFD_NAMESPACE
        master = bed.kube.get("apps/v1", "Deployment", "nfd-master", ns) or {}
        worker = bed.kube.get("apps/v1", "DaemonSet", "nfd-worker", ns) or {}
        return bool(
            master.get("status", {}).get("availableReplicas")
            and worker.get("status", {}).get("numberReady")
        )

    wait_for(ready, timeout, "NFD's master and workers to be ready")
