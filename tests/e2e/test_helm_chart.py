"""The Helm chart (`charts/gpustack-chain`, generated from `manifests/`) rendered by a real
`helm` (built from the Go module proxy): with the release namespace gpustack-system and default
values it is exactly what the real `kubectl kustomize manifests/` builds (less what Helm cannot
own, plus Helm's labels), it passes `helm lint --strict`, its schema refuses a wrong value by
name, another release namespace leaves no trace of the manifests' names, and each value lands
where `values.yaml` says. The chart installed, upgraded and uninstalled on real nodes is in
`test_real_nodes_helm.py`."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain.fleet_pools import FLEET_FLAVOR, FLEET_POOLS_RESOURCE
from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from charts.render import FLEET_CRD_PATCHED, HELM_LABELS, KEPT, NAME_LABEL
from testbed import build
from testbed.harness import Testbed
from testbed.install import MANIFESTS
from testbed.kubectl import kubectl
from workergateway.kubeconfig import FLEET_NAMESPACE

CHART = Path(__file__).resolve().parents[2] / "charts" / "gpustack-chain"
KUBE_VERSION = build.versions()["kubernetes"]["version"]
Obj = dict[str, Any]
Key = tuple[str, str, str]
Helm = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def helm() -> Helm:
    build.ensure(["helm"])
    binary = str(build.binary("helm"))

    def run(*args: str, values: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args],
            input=values,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    return run


def _objects(text: str) -> dict[Key, Obj]:
    docs = [doc for doc in yaml.safe_load_all(text) if doc]
    return {(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", "")): d for d in docs}


def template(helm: Helm, values: str = "", namespace: str = SYSTEM_NAMESPACE) -> str:
    args = ["template", "gpustack-chain", str(CHART), "--include-crds", "-n", namespace]
    done = helm(*args, "--kube-version", KUBE_VERSION, "--values", "-", values=values or "{}")
    assert done.returncode == 0, done.stderr
    return done.stdout


def rendered(helm: Helm, values: str = "", namespace: str = SYSTEM_NAMESPACE) -> dict[Key, Obj]:
    return _objects(template(helm, values, namespace))


def as_kustomize(objects: dict[Key, Obj]) -> dict[Key, Obj]:
    """The chart's objects without what Helm adds to each (its labels; the chart's name label
    where the manifests give an object none; `helm.sh/resource-policy: keep` on the
    AdmissionCheck, which Kueue holds while the chain's queues use it), to compare with what
    kustomize builds."""
    stripped = copy.deepcopy(objects)
    for obj in stripped.values():
        annotations = obj["metadata"].get("annotations") or {}
        if annotations == KEPT:
            del obj["metadata"]["annotations"]
        labels = obj["metadata"].get("labels") or {}
        for label in HELM_LABELS:
            labels.pop(label, None)
        if labels.get(NAME_LABEL) == "gpustack-chain":
            labels.pop(NAME_LABEL)
    return stripped


def kustomized(testbed: Testbed, path: Path = MANIFESTS) -> dict[Key, Obj]:
    """What kustomize builds, less the release namespace's Namespace: Helm does not own the
    namespace it installs into (`-n X --create-namespace` makes it, unlabelled, outside the
    release), so the chart renders none; NOTES.txt tells the user the Pod Security label."""
    built = _objects(kubectl(testbed, "kustomize", str(path)))
    assert built.pop(("Namespace", SYSTEM_NAMESPACE, ""))
    return built


def with_component(testbed: Testbed, overlay: Path, component: Path) -> dict[Key, Obj]:
    """What kustomize builds from an overlay (in the folder `overlay`) of the manifests with
    `component`, as a user writes one."""
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(MANIFESTS, overlay)],
                "components": [os.path.relpath(component, overlay)],
            }
        )
    )
    return kustomized(testbed, overlay)


def test_default_values_render_exactly_the_kustomize_install(testbed: Testbed, helm: Helm) -> None:
    lint = helm("lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    chart = as_kustomize(rendered(helm))
    shipped = kustomized(testbed)
    assert chart.keys() == shipped.keys()
    assert [key for key in shipped if chart[key] != shipped[key]] == []


def test_every_object_carries_the_standard_labels_and_no_selector_or_pod_does(
    helm: Helm,
) -> None:
    """Every object the templates render (the CRDs in crds/ are not templates) has Helm's labels;
    a selector or Pod template with the chart's version in it would orphan or restart Pods on
    every upgrade, so none has any."""
    chart = rendered(helm, "monitoring: {enabled: true}")
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
    for (kind, name, _), obj in chart.items():
        if kind == "CustomResourceDefinition":
            continue
        labels = obj["metadata"].get("labels") or {}
        assert labels.get("helm.sh/chart") == f"gpustack-chain-{version}", (kind, name)
        assert labels.get("app.kubernetes.io/instance") == "gpustack-chain", (kind, name)
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", (kind, name)
        assert labels.get("app.kubernetes.io/version"), (kind, name)
        assert labels.get(NAME_LABEL), (kind, name)
        text = json.dumps(obj.get("spec", {}))
        assert not any(label in text for label in HELM_LABELS), (kind, name)


def test_another_release_namespace_leaves_no_trace_of_the_manifests_names(helm: Helm) -> None:
    """`helm install -n infra --create-namespace` with the agents in `infra-agents`: every DNS
    name, subject, policy and selector follows; nothing names gpustack-system or
    gpustack-agents."""
    values = "agentNamespace: {name: infra-agents}\nmonitoring: {enabled: true}"
    chart = {
        key: obj
        for key, obj in rendered(helm, values, namespace="infra").items()
        if key[0] != "CustomResourceDefinition"  # crds/: no namespace in them to follow
    }
    text = json.dumps(list(chart.values()))
    assert SYSTEM_NAMESPACE not in text
    assert AGENT_NAMESPACE not in text
    namespaces = {ns for (_, _, ns) in chart if ns}
    assert namespaces == {"infra", "infra-agents"}
    assert ("Namespace", "infra-agents", "") in chart
    assert ("Namespace", "infra", "") not in chart  # Helm does not own the release namespace
    assert {name for kind, name, ns in chart if kind == "DaemonSet"} and all(
        ns == "infra-agents" for kind, _, ns in chart if kind == "DaemonSet"
    )
    (hook,) = chart[("MutatingWebhookConfiguration", "gpustack-worker-admission", "")]["webhooks"][
        :1
    ]
    assert hook["clientConfig"]["service"]["namespace"] == "infra"
    entrance = chart[("DecoratorController", "gpustack-entrance", "")]["spec"]["hooks"]["sync"]
    assert entrance["webhook"]["service"]["namespace"] == "infra"
    binding = chart[("ClusterRoleBinding", "gpustack-device-manager", "")]
    assert binding["subjects"][0]["namespace"] == "infra-agents"
    policy = chart[("ValidatingAdmissionPolicy", "gpustack-node-agent-scope", "")]
    assert "system:serviceaccount:infra-agents:gpustack-device-manager" in json.dumps(policy)
    env = chart[("Deployment", "gpustack-hook-entrance", "infra")]["spec"]["template"]["spec"]
    assert {"name": "GPUSTACK_AGENT_NAMESPACE", "value": "infra-agents"} in env["containers"][0][
        "env"
    ]


VALUES = """
image: {repository: registry.example/gpustack-chain, tag: "1.2.3", pullPolicy: IfNotPresent}
imagePullSecrets: [{name: regcred}]
priorityClassName: chain-critical
manufacturers: [nvidia, amd]
deviceManager:
  extraArgs: {nvidia: ["--period=30"]}
  extraVolumes: {nvidia: [{name: scratch, emptyDir: {}}]}
  extraVolumeMounts: {nvidia: [{name: scratch, mountPath: /tmp}]}
components:
  gpustack-admission-driver:
    replicas: 3
    resources: {limits: {memory: 2Gi}}
    nodeSelector: {node-role.kubernetes.io/infra: ""}
    affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: []}}
    tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
    podAnnotations: {example.com/scrape: "yes"}
  gpustack-hook-flavor: {priorityClassName: hooks-first}
  gpustack-device-manager-nvidia:
    nodeSelector: {example.com/pool: gpu}
    podAnnotations: {example.com/agent: "1"}
monitoring: {enabled: true, prometheusNamespace: observability}
webhookCertificates: {mode: cert-manager, secretName: chain-webhook-tls}
settings: {node-management-manual: true}
"""


def _pod(objects: dict[Key, Obj], kind: str, name: str) -> Obj:
    namespace = AGENT_NAMESPACE if kind == "DaemonSet" else SYSTEM_NAMESPACE
    template: Obj = objects[(kind, name, namespace)]["spec"]["template"]
    return {**template["spec"], "annotations": template["metadata"].get("annotations")}


def test_each_value_lands_where_values_yaml_says(testbed: Testbed, helm: Helm) -> None:
    chart = rendered(helm, VALUES)
    agents = sorted(name for kind, name, _ in chart if kind == "DaemonSet")
    assert agents == ["gpustack-device-manager-amd", "gpustack-device-manager-nvidia"]
    nvidia = _pod(chart, "DaemonSet", "gpustack-device-manager-nvidia")
    (agent,) = nvidia["containers"]
    assert agent["image"] == "registry.example/gpustack-chain:1.2.3"
    assert agent["imagePullPolicy"] == "IfNotPresent"
    assert agent["args"][-1] == "--period=30"
    assert agent["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/tmp"}
    assert nvidia["volumes"][-1] == {"name": "scratch", "emptyDir": {}}
    # A map merges into the manifests' (the PCI label stays), the component's own class stays.
    assert nvidia["nodeSelector"] == {
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "example.com/pool": "gpu",
    }
    assert nvidia["priorityClassName"] == "system-node-critical"
    assert nvidia["tolerations"] == [{"operator": "Exists"}]
    assert nvidia["annotations"] == {"example.com/agent": "1"}
    assert nvidia["imagePullSecrets"] == [{"name": "regcred"}]
    amd = _pod(chart, "DaemonSet", "gpustack-device-manager-amd")
    assert "--period=30" not in amd["containers"][0]["args"]  # per manufacturer
    assert amd["annotations"] is None

    key = ("Deployment", "gpustack-admission-driver", SYSTEM_NAMESPACE)
    assert chart[key]["spec"]["replicas"] == 3
    driver = _pod(chart, "Deployment", "gpustack-admission-driver")
    assert driver["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
    ]
    assert driver["nodeSelector"] == {"node-role.kubernetes.io/infra": ""}
    assert driver["affinity"] == {
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}
    }
    assert driver["annotations"] == {"example.com/scrape": "yes"}
    assert driver["priorityClassName"] == "chain-critical"  # the release's
    assert driver["imagePullSecrets"] == [{"name": "regcred"}]
    flavor = _pod(chart, "Deployment", "gpustack-hook-flavor")
    assert flavor["priorityClassName"] == "hooks-first"  # the component's own
    assert "tolerations" not in flavor and "nodeSelector" not in flavor
    resources = driver["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "2Gi"}  # merged over the manifests' requests
    assert resources["requests"] == {"cpu": "100m", "memory": "128Mi"}
    # cert-manager issues the certificate: the driver keeps none, the injector fills the CA.
    assert not [a for a in driver["containers"][0]["args"] if a.startswith("--webhook")]
    certificate = chart[("Certificate", "chain-webhook-tls", SYSTEM_NAMESPACE)]["spec"]
    assert certificate["secretName"] == "chain-webhook-tls"
    assert "gpustack-webhook-admission.gpustack-system.svc" in certificate["dnsNames"]
    assert "gpustack-webhook-instancetype.gpustack-system.svc" in certificate["dnsNames"]
    for kind, name, _ in chart:
        if kind.endswith("WebhookConfiguration"):
            meta = chart[(kind, name, "")]["metadata"]
            assert meta["annotations"] == {
                "cert-manager.io/inject-ca-from": "gpustack-system/chain-webhook-tls"
            }
    webhook = _pod(chart, "Deployment", "gpustack-webhook-admission")
    assert {"name": "tls", "secret": {"secretName": "chain-webhook-tls"}} in webhook["volumes"]
    settings = chart[("Settings", "default", "")]
    assert settings["spec"] == {"node-management-manual": True}
    assert ("PodMonitor", "gpustack-chain", SYSTEM_NAMESPACE) in chart
    metrics = chart[("NetworkPolicy", "gpustack-metrics", AGENT_NAMESPACE)]["spec"]
    (source,) = metrics["ingress"][0]["from"]
    assert source["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "observability"
    }


def test_monitoring_renders_the_shipped_component(
    testbed: Testbed, helm: Helm, tmp_path: Path
) -> None:
    """`monitoring.enabled` adds exactly what the kustomize component `manifests/monitoring`
    adds; off (the default), none of it."""
    assert not [key for key in rendered(helm) if key[0] in ("PodMonitor", "ServiceMonitor")]
    chart = as_kustomize(rendered(helm, "monitoring: {enabled: true}"))
    shipped = with_component(testbed, tmp_path, MANIFESTS / "monitoring")
    assert chart.keys() == shipped.keys()
    assert [key for key in shipped if chart[key] != shipped[key]] == []


FLEET_MANAGER = "fleet: {manager: {enabled: true}}"


def test_the_fleet_manager_value_renders_the_shipped_component(
    testbed: Testbed, helm: Helm, tmp_path: Path
) -> None:
    """`fleet.manager.enabled` renders what an overlay of the manifests with the component
    `manifests/fleet` builds (docs/fleet.md, "Installing a fleet"): the fleet's objects added,
    the ones a manager must not run left out; off (the default), none of the fleet. The one
    difference is the patch Helm cannot make to a CRD of crds/: no Members column."""
    assert not [key for key in rendered(helm) if key[2] == FLEET_NAMESPACE or "fleet" in key[1]]
    lint = helm(
        "lint",
        "--strict",
        str(CHART),
        "--kube-version",
        KUBE_VERSION,
        "--values",
        "-",
        values=FLEET_MANAGER,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    raw = rendered(helm, FLEET_MANAGER)
    for kept in (
        ("CustomResourceDefinition", f"{FLEET_POOLS_RESOURCE}.gpustack.ai", ""),
        ("ResourceFlavor", FLEET_FLAVOR, ""),
        ("Namespace", FLEET_NAMESPACE, ""),
    ):
        assert raw[kept]["metadata"]["annotations"] == KEPT, kept
    chart = as_kustomize(raw)
    shipped = with_component(testbed, tmp_path, MANIFESTS / "fleet")
    assert chart.keys() == shipped.keys()
    columns = shipped[("CustomResourceDefinition", FLEET_CRD_PATCHED, "")]["spec"]["versions"][0]
    assert columns["additionalPrinterColumns"].pop()["name"] == "Members"
    assert [key for key in shipped if chart[key] != shipped[key]] == []


def test_the_fleet_manager_follows_the_release_namespace(helm: Helm) -> None:
    """In another release namespace the gateway, the fleet hook and their RBAC, Service and
    hook URLs follow it; the members' Secrets stay in the fleet's own namespace."""
    chart = rendered(helm, FLEET_MANAGER, namespace="infra")
    text = json.dumps([obj for key, obj in chart.items() if key[0] != "CustomResourceDefinition"])
    assert SYSTEM_NAMESPACE not in text
    assert ("Deployment", "gpustack-worker-gateway", "infra") in chart
    assert ("Role", "gpustack-worker-gateway", FLEET_NAMESPACE) in chart
    pools = chart[("DecoratorController", "gpustack-fleet-pools", "")]["spec"]["hooks"]["sync"]
    assert pools["webhook"]["service"]["namespace"] == "infra"
    (subject,) = chart[("RoleBinding", "gpustack-worker-gateway", FLEET_NAMESPACE)]["subjects"]
    assert subject["namespace"] == "infra"


WRONG = [
    # (values, what the error names)
    (
        'components: {gpustack-hook-flavor: {replicas: "two"}}',
        "/components/gpustack-hook-flavor/replicas",
    ),
    ("replicas: 2", "'replicas' not allowed"),
    ("webhookCertificates: {mode: vault}", "/webhookCertificates/mode"),
    ("resources: {}", "'resources' not allowed"),  # 0.1.0's key: now components.<name>.resources
    ("components: {gpustack-device-manager-nvidia: {replicas: 2}}", "'replicas' not allowed"),
    ("manufacturers: [nvidai]", "/manufacturers/0"),
    ("agentNamespace: {name: Agents}", "/agentNamespace/name"),
    ("imagePullSecrets: [regcred]", "/imagePullSecrets/0"),
    ("fleet: {manager: {enabled: yes please}}", "/fleet/manager/enabled"),
    ("fleet: {member: {enabled: true}}", "'member' not allowed"),
]


@pytest.mark.parametrize(("values", "named"), WRONG, ids=[named for _, named in WRONG])
def test_a_wrong_value_is_refused_naming_it(helm: Helm, values: str, named: str) -> None:
    """values.schema.json: `helm template` (as `install` and `upgrade`) and `helm lint
    --strict` refuse the value, saying which."""
    args = ("--kube-version", KUBE_VERSION, "-n", SYSTEM_NAMESPACE, "--values", "-")
    for command in (("template", "gpustack-chain"), ("lint", "--strict")):
        done = helm(*command, str(CHART), *args, values=values)
        assert done.returncode != 0, (command, values)
        assert named in done.stdout + done.stderr, (command, done.stdout + done.stderr)


def test_the_agents_namespace_is_the_users_or_the_charts_never_the_release_one(
    helm: Helm,
) -> None:
    chart = rendered(helm, "agentNamespace: {create: false}")
    assert not [key for key in chart if key[0] == "Namespace"]
    assert ("DaemonSet", "gpustack-device-manager-nvidia", AGENT_NAMESPACE) in chart
    args = ("template", "x", str(CHART), "--kube-version", KUBE_VERSION, "-n", "infra")
    same = helm(*args, "--set", "agentNamespace.name=infra")
    assert same.returncode != 0
    assert 'agentNamespace.name: "infra" is the release namespace' in same.stderr


def test_a_provided_secret_needs_its_ca_and_a_bad_mode_is_named(helm: Helm) -> None:
    args = ("template", "x", str(CHART), "--kube-version", KUBE_VERSION)
    missing = helm(*args, "--set", "webhookCertificates.mode=secret")
    assert missing.returncode != 0
    assert "webhookCertificates.caBundle: the base64 PEM of the CA" in missing.stderr
    given = helm(
        *args,
        "--set",
        "webhookCertificates.mode=secret",
        "--set",
        "webhookCertificates.caBundle=Q0EK",
    )
    assert given.returncode == 0, given.stderr
    objects = _objects(given.stdout)
    hooks = [
        hook
        for (kind, _, _), obj in objects.items()
        if kind.endswith("WebhookConfiguration")
        for hook in obj["webhooks"]
    ]
    assert hooks and all(hook["clientConfig"]["caBundle"] == "Q0EK" for hook in hooks)
    assert not any(kind in ("Certificate", "Issuer") for kind, _, _ in objects)
    bogus = helm(*args, "--set", "webhookCertificates.mode=vault")
    assert bogus.returncode != 0
    assert "value must be one of 'driver', 'cert-manager', 'secret'" in bogus.stderr


def test_the_isolation_library_value_renders_the_shipped_component(
    testbed: Testbed, helm: Helm, tmp_path: Path
) -> None:
    """`deviceManager.isolationLibrary.nvidia.image` adds exactly the init container the
    kustomize component `manifests/isolation/nvidia` adds once its image is named."""
    image = "registry.example/hami:v9.9.9"
    chart = rendered(helm, f"deviceManager: {{isolationLibrary: {{nvidia: {{image: {image}}}}}}}")
    name, tag = image.rsplit(":", 1)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                # kustomize takes relative paths only
                "resources": [os.path.relpath(MANIFESTS, tmp_path)],
                "components": [os.path.relpath(MANIFESTS / "isolation" / "nvidia", tmp_path)],
                "images": [
                    {"name": "gpustack-isolation-library-nvidia", "newName": name, "newTag": tag}
                ],
            }
        )
    )
    shipped = kustomized(testbed, tmp_path)
    chart = as_kustomize(chart)
    assert chart.keys() == shipped.keys()
    assert [key for key in shipped if chart[key] != shipped[key]] == []
    key = ("DaemonSet", "gpustack-device-manager-nvidia", AGENT_NAMESPACE)
    (init,) = chart[key]["spec"]["template"]["spec"]["initContainers"]
    assert init["image"] == image
    # Only NVIDIA's agent stages a library; the others are as shipped.
    amd = ("DaemonSet", "gpustack-device-manager-amd", AGENT_NAMESPACE)
    assert "initContainers" not in chart[amd]["spec"]["template"]["spec"]


def test_an_isolation_library_the_chain_cannot_stage_is_refused_with_what_to_do(
    helm: Helm,
) -> None:
    """A manufacturer without a staging (every one but NVIDIA today) is not silently ignored."""
    values = "deviceManager: {isolationLibrary: {amd: {image: registry.example/vrocm:1}}}"
    args = ["template", "gpustack-chain", str(CHART), "--kube-version", KUBE_VERSION]
    done = helm(*args, "-n", SYSTEM_NAMESPACE, "--values", "-", values=values)
    assert done.returncode != 0
    assert "deviceManager.isolationLibrary.amd" in done.stderr
    assert "/var/lib/gpustack/operator/lib/amd/" in done.stderr
