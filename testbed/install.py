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
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

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
    """The objects a kustomization builds, in order: its `resources` (files or folders), then
    each of its `components`, then its own `patches`.

    Only what the shipped kustomizations use is read, as kustomize reads it: a patch's `target`
    (kind, name, namespace, group, version, each a regular expression matched whole), with a
    JSON 6902 list (`add`, `remove`, `replace`) or a strategic merge patch of `$patch: delete`.
    Anything else fails here rather than build something kustomize would not (and a test fails
    if a kustomization uses another field; see tests/unit/test_manifests.py).
    """
    kustomization = load_yaml_documents(directory / "kustomization.yaml")[0]
    objects: list[Obj] = []
    for entry in kustomization.get("resources") or []:
        path = directory / entry
        objects += kustomize(path) if path.is_dir() else load_yaml_documents(path)
    for entry in kustomization.get("components") or []:
        objects = _component(directory / entry, objects)
    return _patched(directory, kustomization, objects)


def _component(directory: Path, objects: list[Obj]) -> list[Obj]:
    """A kustomize Component applied to what was built so far: its resources added, then its
    patches run over everything."""
    component = load_yaml_documents(directory / "kustomization.yaml")[0]
    if component.get("kind") != "Component":
        raise ValueError(f"{directory}: a component must be of kind Component")
    added: list[Obj] = []
    for entry in component.get("resources") or []:
        path = directory / entry
        added += kustomize(path) if path.is_dir() else load_yaml_documents(path)
    return _patched(directory, component, [*objects, *added])


def _targeted(target: Obj, obj: Obj) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj["metadata"]
    found = {
        "kind": obj["kind"],
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
        "group": group,
        "version": version,
    }
    unknown = set(target) - set(found)
    if unknown:
        raise ValueError(f"patch target: {sorted(unknown)} not read here")
    return all(re.fullmatch(str(pattern), found[key]) for key, pattern in target.items())


def _patched(directory: Path, kustomization: Obj, objects: list[Obj]) -> list[Obj]:
    for entry in kustomization.get("patches") or []:
        patch: Any
        if "path" in entry:
            (patch,) = load_yaml_documents(directory / entry["path"])
        else:
            patch = yaml.safe_load(entry["patch"])
        target = entry.get("target") or {}
        hit = [obj for obj in objects if _targeted(target, obj)]
        if isinstance(patch, list):
            for obj in hit:
                for op in patch:
                    _json_patch(obj, op)
        elif isinstance(patch, dict) and patch.get("$patch") == "delete" and target:
            objects = [obj for obj in objects if all(obj is not h for h in hit)]
        else:
            raise ValueError(f"{directory}: a patch of this form is not read here: {entry}")
    return objects


def _json_patch(obj: Obj, op: Obj) -> None:
    """One JSON 6902 operation (add, remove, replace) on `obj`, in place."""
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    node: Any = obj
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    kind = op["op"]
    if isinstance(node, list):
        index = len(node) if last == "-" else int(last)
        if kind == "add":
            node.insert(index, copy.deepcopy(op["value"]))
        elif kind == "remove":
            del node[index]
        elif kind == "replace":
            node[index] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"JSON patch op {kind} not read here")
    elif kind in ("add", "replace"):
        node[last] = copy.deepcopy(op["value"])
    elif kind == "remove":
        del node[last]
    else:
        raise ValueError(f"JSON patch op {kind} not read here")


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
    bed: Testbed,
    manifests: Path = MANIFESTS,
    timeout: float = 60,
    capture: Path | None = None,
    components: tuple[Path, ...] = (),
) -> Installed:
    """Apply `manifests` on `bed`, with `components` as an overlay of the user's would add them
    (`manifests/fleet` on a fleet's manager, `manifests/fleet/member` on a member); with
    `capture`, record every hook request body there."""
    objects = [copy.deepcopy(o) for o in kustomize_with(manifests, *components)]
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


def kustomize_with(directory: Path, *components: Path) -> list[Obj]:
    """What an overlay of `resources: [directory]` and `components: [*components]` builds (a
    fleet's manager: `kustomize_with(MANIFESTS, MANIFESTS / "fleet")`)."""
    objects = kustomize(directory)
    for component in components:
        objects = _component(component, objects)
    return objects
