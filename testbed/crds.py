"""The upstream CRDs and webhook configurations the testbed installs, read from the Go module
cache (never copied into the repository): Kueue's (its conversion webhook pointed at the
testbed's Kueue), JobSet's (its release manifests, their webhooks pointed at the testbed's JobSet
controller), Metacontroller's (widened by the fields v4 added) and NFD's."""

from __future__ import annotations

import base64
import copy
import re
import subprocess
from functools import cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from kubeapi import Obj, load_yaml_documents, wait_for
from testbed import build

if TYPE_CHECKING:
    from testbed.harness import Testbed

# Kueue webhooks we install: its own API and the job frameworks the testbed enables. The
# others would answer 404 for frameworks that are off and, being failurePolicy Fail, block
# creating Deployments or Pods for no reason.
KUEUE_WEBHOOK_GROUPS = ("kueue.x-k8s.io", "batch", "jobset.x-k8s.io")
JOBSET_MANAGER_CONFIG = "jobset-manager-config"
"""The ConfigMap of JobSet's release manifests that holds its stock Configuration."""
JOBSET_CONFIG_KEY = "controller_manager_config.yaml"


def ca_bundle(bed: Testbed) -> str:

    return base64.b64encode(bed.certs.ca_crt.read_bytes()).decode()


def kueue_crds(bed: Testbed) -> list[Obj]:
    crd_dir = build.module_dir("kueue") / "config/components/crd"
    crds = [
        doc for f in sorted((crd_dir / "bases").glob("*.yaml")) for doc in load_yaml_documents(f)
    ]
    # Upstream's kustomization names the CRDs that get a conversion webhook, one patch each
    # (patches/webhook_in_<plural>.yaml); a patch file it does not list is not applied.
    kustomization = load_yaml_documents(crd_dir / "kustomization.yaml")[0]
    converted = {
        m.group(1)
        for patch in kustomization.get("patches") or []
        if (m := re.fullmatch(r"patches/webhook_in_(.+)\.yaml", patch.get("path", "")))
    }
    url = f"https://127.0.0.1:{bed.state.ports['kueue_webhook']}/convert"
    for crd in crds:
        if crd["spec"]["names"]["plural"] in converted:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": url, "caBundle": ca_bundle(bed)},
                    "conversionReviewVersions": ["v1"],
                },
            }
    return crds


def kueue_webhooks(bed: Testbed) -> list[Obj]:
    src = build.module_dir("kueue") / "config/components/webhook/manifests.yaml"
    out = []
    for doc in load_yaml_documents(src):
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
        hooks = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            if not groups & set(KUEUE_WEBHOOK_GROUPS):
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{bed.state.ports['kueue_webhook']}{path}",
                "caBundle": ca_bundle(bed),
            }
            hooks.append(hook)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


@cache
def _jobset_release(source: Path) -> tuple[Obj, ...]:
    """JobSet's release manifests: `config/default` of its module as the real kubectl renders
    them (its CRD, webhook configurations, RBAC, Deployment and Configuration), once per run."""
    kubectl = build.bin_dir("kubernetes-node") / "kubectl"
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(source / "config/default")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(rendered) if doc)


def jobset_release(kind: str) -> list[Obj]:
    """The objects of one kind among JobSet's release manifests (copies, free to change)."""
    docs = _jobset_release(build.module_dir("jobset"))
    return [copy.deepcopy(doc) for doc in docs if doc.get("kind") == kind]


def _served_by(bed: Testbed, port: str, client_config: Obj) -> Obj:
    """A webhook's in-cluster Service reference made the host process's URL on `port`, trusted
    through the testbed CA."""
    path = client_config["service"].get("path", "")
    return {"url": f"https://127.0.0.1:{bed.state.ports[port]}{path}", "caBundle": ca_bundle(bed)}


def jobset_crds(bed: Testbed) -> list[Obj]:
    """JobSet's CRD as its release installs it, its conversion webhook at the testbed's JobSet."""
    crds = jobset_release("CustomResourceDefinition")
    for crd in crds:
        webhook = (crd["spec"].get("conversion") or {}).get("webhook")
        if webhook:
            webhook["clientConfig"] = _served_by(bed, "jobset_webhook", webhook["clientConfig"])
    return crds


def jobset_webhooks(bed: Testbed) -> list[Obj]:
    """JobSet's webhook configurations as its release installs them (names, rules, object
    selectors, failure policies), each pointed at the testbed's JobSet controller."""
    configs = jobset_release("MutatingWebhookConfiguration") + jobset_release(
        "ValidatingWebhookConfiguration"
    )
    for config in configs:
        for hook in config["webhooks"]:
            hook["clientConfig"] = _served_by(bed, "jobset_webhook", hook["clientConfig"])
    return configs


def jobset_stock_config() -> Obj:
    """JobSet's own Configuration, what its release manifests install."""
    for config_map in jobset_release("ConfigMap"):
        if config_map["metadata"]["name"] == JOBSET_MANAGER_CONFIG:
            stock: Obj = yaml.safe_load(config_map["data"][JOBSET_CONFIG_KEY])
            return stock
    raise LookupError(f"no ConfigMap {JOBSET_MANAGER_CONFIG} in JobSet's release manifests")


def metacontroller_crds(bed: Testbed) -> list[Obj]:
    src = build.module_dir("metacontroller") / "manifests/production/metacontroller-crds-v1.yaml"
    return [metacontroller_v4_fields(crd) for crd in load_yaml_documents(src)]


def nfd_crds(bed: Testbed) -> list[Obj]:
    src = build.module_dir("nfd") / "deployment/base/nfd-crds/nfd-api-crds.yaml"
    return load_yaml_documents(src)


def install_crds(bed: Testbed, timeout: float, kueue: bool = True) -> None:
    """The CRDs of the controllers the testbed runs; Kueue's and JobSet's only when Kueue runs
    here (JobSet runs wherever Kueue does, testbed.harness)."""
    jobs = kueue_crds(bed) + jobset_crds(bed) if kueue else []
    crds = jobs + metacontroller_crds(bed) + nfd_crds(bed)
    for crd in crds:
        bed.kube.apply(crd)
    for crd in crds:
        name = crd["metadata"]["name"]
        wait_for(partial(crd_established, bed, name), timeout, f"CRD {name} to be established")
    bed.kube.forget_discovery()


def crd_established(bed: Testbed, name: str) -> bool:
    crd = bed.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    conds = ((crd or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conds)


def metacontroller_v4_fields(crd: Obj) -> Obj:
    """Widen a Metacontroller v1.5.x CRD schema by the two fields v4 added, so the shipped
    controllers apply unmodified (`kubectl apply` validates strictly) on the testbed's older
    Metacontroller.

    Hook `version` and `ignoreStatusChanges` on resource rules arrived in v4. v1.5.20 ignores
    both: without `version` it speaks hook version v1, whose requests differ from v2 only in map
    keys our hooks never read; without `ignoreStatusChanges` it also syncs on status-only
    changes, which costs calls and changes no answer. Every object schema with a `webhook`
    property is a hook; every one with `apiVersion` and `resource` is a resource rule.
    """
    major = int(build.versions()["metacontroller"]["version"].lstrip("v").split(".")[0])
    if major >= 4:
        return crd
    widened = copy.deepcopy(crd)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                if "webhook" in props:
                    props.setdefault("version", {"type": "string"})
                if "apiVersion" in props and "resource" in props:
                    props.setdefault("ignoreStatusChanges", {"type": "boolean"})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(widened.get("spec", {}).get("versions", []))
    return widened
