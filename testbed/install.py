"""Install the shipped `manifests/` on a testbed, the way `kubectl apply -k` would.

The testbed has no kubelet, so nothing the manifests deploy as Pods can run there. The overlay
therefore changes only how the hooks are reached, never what is installed:

- each hook Deployment's own gunicorn command line (`... hooks.<name>.app:app`) is served
  locally by the testbed, with the container's env, and its Service is mapped to that local URL;
- its ConfigMap volumes are projected into local directories the env is pointed at, as a
  kubelet would mount them (see `testbed.projection`);
- Metacontroller hooks and admission webhooks that name a Service are pointed at the URL (and
  the testbed CA for https);
- Deployments, Services and DaemonSets are then not applied (they would never start); of the
  verdict driver's Deployment, the pool-cards keeper runs as a testbed process (the
  InstanceType views need it), the rest only where a test starts drivers (`testbed.drivers`).

Everything else (CRDs, the settings singleton, controllers, NFD rules, RBAC, webhook
configurations) is applied as shipped, with server-side apply.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kubeapi import Obj, load_yaml_documents, wait_for
from testbed.crds import crd_established
from testbed.drivers import run_pool_cards_keeper
from testbed.harness import Testbed
from testbed.projection import Projection, configmap_volumes, container_env
from verdictdriver.seed import ensure_settings

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "manifests"
NOT_APPLIED = {"Deployment", "Service", "DaemonSet"}
FIELD_MANAGER = "gpustack-chain-install"


def kustomize(directory: Path) -> list[Obj]:
    """The objects a kustomization lists (resources: files or folders), in order.

    Only `resources` is read: the shipped kustomization uses nothing else, and a test fails if
    that changes (see tests/unit/test_manifests.py).
    """
    kustomization = load_yaml_documents(directory / "kustomization.yaml")[0]
    objects: list[Obj] = []
    for entry in kustomization.get("resources") or []:
        path = directory / entry
        objects += kustomize(path) if path.is_dir() else load_yaml_documents(path)
    return objects


def gunicorn_app(deployment: Obj) -> tuple[str, list[str], Obj] | None:
    """`(module:attr, extra gunicorn args, container)` when the Deployment runs a hook app with
    gunicorn."""
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if argv and argv[0].endswith("gunicorn"):
            app = next((a for a in argv[1:] if not a.startswith("-")), None)
            if app is not None:
                tls = [a for a in argv if a.startswith(("--certfile", "--keyfile"))]
                return app, tls, container
    return None


def service_targets(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    """(namespace, service name) -> the Deployment whose Pods the Service selects."""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    targets: dict[tuple[str, str], Obj] = {}
    for svc in (o for o in objects if o["kind"] == "Service"):
        selector = svc["spec"].get("selector") or {}
        for dep in deployments:
            labels = dep["spec"]["template"]["metadata"].get("labels") or {}
            same_ns = dep["metadata"].get("namespace") == svc["metadata"].get("namespace")
            if same_ns and selector and all(labels.get(k) == v for k, v in selector.items()):
                targets[(svc["metadata"].get("namespace", ""), svc["metadata"]["name"])] = dep
    return targets


@dataclass
class Installed:
    objects: list[Obj]
    urls: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, service) -> the local base URL serving it."""
    projections: list[Projection] = field(default_factory=list)
    """The served hooks' ConfigMap volumes, followed until `stop()` or the run folder goes."""


def _point_hooks(obj: Obj, urls: dict[tuple[str, str], str]) -> Obj:
    """Metacontroller hooks: `service` + `path` -> `url`."""
    for hook in (obj["spec"].get("hooks") or {}).values():
        webhook = hook.get("webhook") if isinstance(hook, dict) else None
        if webhook and "service" in webhook:
            svc = webhook.pop("service")
            base = urls[(svc.get("namespace", ""), svc["name"])]
            webhook["url"] = base + webhook.pop("path", "")
    return obj


def _point_webhooks(obj: Obj, urls: dict[tuple[str, str], str], ca_bundle: str) -> Obj:
    """Admission webhook configurations: `service` -> `url`, with the testbed CA (the hooks
    served here use the testbed's certificate; in a cluster the verdict driver issues one)."""
    for hook in obj.get("webhooks") or []:
        config = hook["clientConfig"]
        if "service" in config:
            svc = config.pop("service")
            config["url"] = urls[(svc["namespace"], svc["name"])] + svc.get("path", "")
            config["caBundle"] = ca_bundle
    return obj


def install(
    bed: Testbed, manifests: Path = MANIFESTS, timeout: float = 60, capture: Path | None = None
) -> Installed:
    """Apply `manifests` on `bed`; with `capture`, record every hook request body there."""
    objects = [copy.deepcopy(o) for o in kustomize(manifests)]
    installed = Installed(objects)
    for (namespace, service), deployment in service_targets(objects).items():
        served = gunicorn_app(deployment)
        if served is None:
            continue
        app, tls, container = served
        name = f"hook-{deployment['metadata']['name']}"
        mounts = {}
        for volume_name, volume in configmap_volumes(deployment, container).items():
            projection = Projection(
                bed.kubeconfig, volume, bed.root / "volumes" / name / volume_name
            )
            projection.start()
            bed.before_down(projection.stop)
            installed.projections.append(projection)
            mounts[volume.mount_path] = projection.directory
        env = {**container_env(container, mounts), "KUBERNETES_POD_NAMESPACE": namespace}
        if "PROMETHEUS_MULTIPROC_DIR" in env:  # a Pod's own /dev/shm; here one host serves all
            env["PROMETHEUS_MULTIPROC_DIR"] = str(bed.root / "metrics" / name)
        if capture is not None:
            env |= {"CAPTURE_APP": app, "CAPTURE_DIR": str(capture / name)}
            app = "testbed.capture:app"
        url = bed.serve(name, app, tls=bool(tls), env=env)
        installed.urls[(namespace, service)] = url
    ca_bundle = base64.b64encode(bed.certs.ca_crt.read_bytes()).decode()

    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    namespaces = [o for o in objects if o["kind"] == "Namespace"]
    for obj in namespaces + crds:
        bed.kube.apply(obj, FIELD_MANAGER)
    for crd in crds:
        name = crd["metadata"]["name"]
        wait_for(partial(crd_established, bed, name), timeout, f"CRD {name} established")
    bed.kube.forget_discovery()
    # What the verdict driver does on its first start (its Deployment is not run here).
    ensure_settings(bed.kube, {})

    for obj in objects:
        if obj["kind"] in NOT_APPLIED or obj in crds or obj in namespaces:
            continue
        if obj["apiVersion"] == "metacontroller.k8s.io/v1alpha1":
            obj = _point_hooks(obj, installed.urls)
        elif obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            obj = _point_webhooks(obj, installed.urls, ca_bundle)
        bed.kube.apply(obj, FIELD_MANAGER)
    # The verdict driver's Deployment does not run here; its pool-cards keeper does, alone.
    run_pool_cards_keeper(bed)
    return installed
