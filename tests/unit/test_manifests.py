"""The shipped manifests: what `kubectl apply -k manifests/` installs, and what a fleet's manager
installs (the same with the component manifests/fleet), checked statically."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from chain.release import AGENT_NAMESPACE, SYSTEM_NAMESPACE
from nodeagent.manifests import RULE_NAME
from testbed.install import MANIFESTS, gunicorn_app, kustomize, kustomize_with, service_targets
from workergateway.kubeconfig import FLEET_NAMESPACE

OBJECTS = kustomize(MANIFESTS)
MANAGER = kustomize_with(MANIFESTS, MANIFESTS / "fleet")
"""A fleet's manager: the worker install with the component manifests/fleet (docs/fleet.md)."""
INSTALLS = {"worker": OBJECTS, "manager": MANAGER}
NAMESPACE = SYSTEM_NAMESPACE
Objs = list[dict[str, Any]]


def _of(kind: str, objects: Objs = OBJECTS) -> Objs:
    return [o for o in objects if o["kind"] == kind]


def _each(kind: str) -> list[tuple[Objs, dict[str, Any]]]:
    """(its install, object) for every object of `kind` in either install, each once by name
    (an object both installs ship is checked in the worker install)."""
    seen: set[str] = set()
    found = []
    for objects in INSTALLS.values():
        for obj in _of(kind, objects):
            if obj["metadata"]["name"] not in seen:
                seen.add(obj["metadata"]["name"])
                found.append((objects, obj))
    return found


def _id(value: Any) -> str:
    """A test id: an install by its name, a hook call by its Service and path, an object by
    its name."""
    if isinstance(value, tuple):
        return f"{value[0]}{value[1]}"
    if isinstance(value, dict):
        return str(value["metadata"]["name"])
    return next(name for name, objects in INSTALLS.items() if objects is value)


def test_kustomization_uses_only_resources() -> None:
    # testbed.install reads `resources` alone; anything else would be silently skipped there.
    # Optional components (never part of the install, used by a user's own overlay) may patch.
    for path in MANIFESTS.rglob("kustomization.yaml"):
        doc = yaml.safe_load(path.read_text())
        allowed = {"apiVersion", "kind", "resources"}
        if doc.get("kind") == "Component":
            allowed.add("patches")
        assert set(doc) <= allowed, f"{path}: {set(doc) - allowed}"


def test_every_manifest_file_is_installed_or_optional() -> None:
    listed = set()
    for path in MANIFESTS.rglob("kustomization.yaml"):
        doc = yaml.safe_load(path.read_text())
        used = [*doc.get("resources", ()), *(p["path"] for p in doc.get("patches", ()))]
        listed |= {(path.parent / r).resolve() for r in used}
    for path in MANIFESTS.rglob("*.yaml"):
        if path.name == "kustomization.yaml" or path.resolve() in listed:
            continue
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if all(d.get("apiVersion", "").startswith("config.kueue.") for d in docs):
            continue  # Kueue's own configuration: merged into Kueue's, never applied
        pytest.fail(f"{path} is in no kustomization")


def _serves_hooks(deployment: dict[str, Any]) -> bool:
    """Hook and webhook servers run gunicorn; controllers (the verdict driver) do not."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return any((c.get("command") or [""])[0] == "gunicorn" for c in containers)


HOOK_SERVERS = [d for _, d in _each("Deployment") if _serves_hooks(d)]
CONTROLLERS = [d for _, d in _each("Deployment") if not _serves_hooks(d)]


@pytest.mark.parametrize("deployment", HOOK_SERVERS, ids=lambda d: d["metadata"]["name"])
def test_hooks_have_no_credentials_and_are_probed(deployment: dict[str, Any]) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["containers"]:
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["resources"]["requests"] and container["resources"]["limits"]
        # A read-only root: gunicorn's heartbeat files in memory, no control socket in $HOME.
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert "--worker-tmp-dir=/dev/shm" in container["args"]
        assert "--no-control-socket" in container["args"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("deployment", CONTROLLERS, ids=lambda d: d["metadata"]["name"])
def test_controllers_run_as_their_own_least_privilege_account(deployment: dict[str, Any]) -> None:
    """A component that talks to the API has its own ServiceAccount, bound by shipped RBAC."""
    pod = deployment["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert account not in ("", "default")
    bound = {
        s["name"]
        for objects in INSTALLS.values()
        for b in _of("ClusterRoleBinding", objects) + _of("RoleBinding", objects)
        for s in b["subjects"]
        if s["kind"] == "ServiceAccount"
    }
    assert account in bound
    for container in pod["containers"]:
        assert container["resources"]["requests"] and container["resources"]["limits"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize("objects", INSTALLS.values(), ids=INSTALLS)
def test_controller_hooks_point_at_shipped_services(objects: Objs) -> None:
    services = {
        (s["metadata"]["namespace"], s["metadata"]["name"]) for s in _of("Service", objects)
    }
    controllers = _of("DecoratorController", objects) + _of("CompositeController", objects)
    assert controllers
    for controller in controllers:
        for name, hook in controller["spec"]["hooks"].items():
            svc = hook["webhook"]["service"]
            assert (svc["namespace"], svc["name"]) in services, (controller["metadata"], name)
            assert hook["version"] == "v2"


@pytest.mark.parametrize("objects", INSTALLS.values(), ids=INSTALLS)
def test_crds_are_structural(objects: Objs) -> None:
    for crd in _of("CustomResourceDefinition", objects):
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            assert schema["type"] == "object"
            assert "$ref" not in yaml.safe_dump(schema)


def _crd_serving(api_version: str, resource: str) -> dict[str, Any]:
    group = api_version.rpartition("/")[0]
    for crd in _of("CustomResourceDefinition"):
        if (crd["spec"]["group"], crd["spec"]["names"]["plural"]) == (group, resource):
            return crd
    raise AssertionError(f"no shipped CRD serves {resource}.{group}")


def test_every_status_a_composite_controller_writes_declares_its_observed_generation() -> None:
    """Metacontroller's CompositeController writes `status.observedGeneration` (the parent's
    `metadata.generation`) with every status it writes; a CRD without it has the API server drop
    the field with an "unknown field" warning on every write. A DecoratorController writes the
    status its hook answers and adds nothing, so only composite parents need the field."""
    parents = [c["spec"]["parentResource"] for c in _of("CompositeController")]
    assert parents, "no CompositeController shipped: the check would be empty"
    for parent in parents:
        crd = _crd_serving(parent["apiVersion"], parent["resource"])
        for version in crd["spec"]["versions"]:
            status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
            field = status.get("properties", {}).get("observedGeneration")
            where = f"{crd['metadata']['name']} {version['name']}"
            assert field is not None, f"{where}: status.observedGeneration is not declared"
            assert (field["type"], field.get("format")) == ("integer", "int64"), where
            assert field.get("description"), where


def test_every_hook_app_module_exists() -> None:
    root = Path(MANIFESTS).parent
    for deployment in HOOK_SERVERS:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            app = [a for a in container["args"] if not a.startswith("-")][-1]
            module = root / (app.split(":")[0].replace(".", "/") + ".py")
            assert module.is_file(), app


def test_daemonsets_are_generated_from_the_table() -> None:
    from nodeagent.manifests import main

    assert main(["--check"]) == 0, "run python -m nodeagent.manifests"


def test_settings_crd_declares_every_setting() -> None:
    from chain.settings import Settings

    [crd] = [
        c
        for c in _of("CustomResourceDefinition")
        if c["metadata"]["name"] == "settings.gpustack.ai"
    ]
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == set(Settings.names())


@pytest.mark.parametrize("daemonset", _of("DaemonSet"), ids=lambda d: d["metadata"]["name"])
def test_node_agents_serve_the_device_plugin_where_the_kubelet_looks(
    daemonset: dict[str, Any],
) -> None:
    """The sockets and files the agent's flags name lie on host paths it mounts (a flag
    pointing into the container's own filesystem would register nothing with the kubelet)."""
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"])
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    for flag in ("--device-plugin-dir", "--pod-resources-socket", "--pods-dir"):
        path = flags[flag]
        mount = next(m for p, m in mounts.items() if path == p or path.startswith(p + "/"))
        assert host[mount["name"]] == mount["mountPath"], f"{flag} is not on the host's path"
    assert not mounts["/var/lib/kubelet/device-plugins"]["readOnly"]
    port = int(flags["--health-port"])
    assert {"name": "health", "containerPort": port} in container["ports"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize("daemonset", _of("DaemonSet"), ids=lambda d: d["metadata"]["name"])
def test_node_agents_keep_only_the_privileges_a_device_operation_needs(
    daemonset: dict[str, Any],
) -> None:
    """Every agent drops what it does not use: the runtime's seccomp profile, a read-only root;
    NVIDIA's keeps one capability (MIG management) and gets its cards from the toolkit, not
    the host's /dev; only the vendors without a runtime hook stay privileged."""
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    host = {v["hostPath"]["path"] for v in pod["volumes"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True
    assert context["runAsUser"] == 0
    if daemonset["metadata"]["name"].endswith("-nvidia"):
        assert "privileged" not in context
        assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
        assert "/dev" not in host
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
        # `compute` brings libcuda.so.1, which HAMi-core's libvgpu.so needs to load in the
        # agent's slicing isolation check.
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert env["NVIDIA_MIG_CONFIG_DEVICES"] == "all"
    else:
        assert context["privileged"] is True
        assert "/dev" in host


def _driver_flags() -> dict[str, list[str]]:
    [driver] = [
        d for d in _of("Deployment") if d["metadata"]["name"] == "gpustack-admission-driver"
    ]
    flags: dict[str, list[str]] = {}
    for arg in driver["spec"]["template"]["spec"]["containers"][0]["args"]:
        if arg.startswith("--") and "=" in arg:
            flag, value = arg.split("=", 1)
            flags.setdefault(flag, []).append(value)
    return flags


def _granted(kind: str, name: str, resource: str) -> set[str]:
    """The resourceNames the driver's `kind` (Role or ClusterRole) may get and update."""
    [role] = [r for r in _of(kind) if r["metadata"]["name"] == name]
    out: set[str] = set()
    for rule in role["rules"]:
        if resource in rule["resources"] and {"get", "update"} <= set(rule["verbs"]):
            out |= set(rule.get("resourceNames") or ["*"])
    return out


def test_the_driver_keeps_the_certificate_of_every_webhook() -> None:
    """The verdict driver issues one serving certificate naming every webhook Service the
    configurations call, keeps the caBundle of every configuration, and every TLS Deployment
    mounts the Secret it writes; its RBAC reaches those objects by name and nothing more."""
    flags = _driver_flags()
    [secret] = flags["--webhook-secret"]
    services = set(flags["--webhook-service"])
    configs = _of("MutatingWebhookConfiguration") + _of("ValidatingWebhookConfiguration")
    for config in configs:
        assert "annotations" not in config["metadata"], "nothing else injects a CA"
        for hook in config["webhooks"]:
            service = hook["clientConfig"]["service"]
            assert service["name"] in services
            assert service["namespace"] == NAMESPACE
    mutating = {c["metadata"]["name"] for c in _of("MutatingWebhookConfiguration")}
    validating = {c["metadata"]["name"] for c in _of("ValidatingWebhookConfiguration")}
    assert set(flags["--mutating-webhook"]) == mutating
    assert set(flags["--validating-webhook"]) == validating
    driver = "gpustack-admission-driver"
    assert _granted("ClusterRole", driver, "mutatingwebhookconfigurations") == mutating
    assert _granted("ClusterRole", driver, "validatingwebhookconfigurations") == validating
    assert _granted("Role", driver, "secrets") == {secret}
    served = {s["metadata"]["name"] for s in _of("Service")}
    assert services <= served
    for deployment in HOOK_SERVERS:
        volumes = deployment["spec"]["template"]["spec"].get("volumes") or []
        secrets = {v["secret"]["secretName"] for v in volumes if "secret" in v}
        args = " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
        if "--certfile" in args:
            assert secrets == {secret}


@pytest.mark.parametrize("objects", INSTALLS.values(), ids=INSTALLS)
def test_no_custom_resource_of_the_chain_is_applied_with_its_crd(objects: Objs) -> None:
    """`kubectl apply -k` sends everything in one pass, before any CRD of it is established:
    an object of a CRD shipped here would be refused (`no matches for kind`)."""
    shipped = {
        (c["spec"]["group"], c["spec"]["names"]["kind"])
        for c in _of("CustomResourceDefinition", objects)
    }
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        assert (group, obj["kind"]) not in shipped, f"{obj['kind']} {obj['metadata']['name']}"


def _seconds(duration: str) -> float:
    """A Go duration as Metacontroller's hook `timeout` takes it ("10s", "1m30s")."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(number) * units[unit] for number, unit in parts)


METACONTROLLER = "metacontroller"
API_SERVER = "kube-apiserver"


def _callers(objects: Objs = OBJECTS) -> list[tuple[str, str, float, str]]:
    """(Service, path, seconds the caller waits, caller) for every Metacontroller hook and every
    admission webhook the manifests configure (Metacontroller's default hook timeout and the
    API server's default timeoutSeconds are both 10 s)."""
    calls: list[tuple[str, str, float, str]] = []
    for controller in _of("DecoratorController", objects) + _of("CompositeController", objects):
        for hook in controller["spec"]["hooks"].values():
            web = hook["webhook"]
            waits = _seconds(web.get("timeout", "10s"))
            calls.append((web["service"]["name"], web["path"], waits, METACONTROLLER))
    configs = _of("MutatingWebhookConfiguration", objects)
    for config in configs + _of("ValidatingWebhookConfiguration", objects):
        for hook in config["webhooks"]:
            service = hook["clientConfig"]["service"]
            waits = float(hook.get("timeoutSeconds", 10))
            calls.append((service["name"], service["path"], waits, API_SERVER))
    return calls


def _every_call() -> list[tuple[Objs, tuple[str, str, float, str]]]:
    """(its install, call) for every hook and webhook call of either install, each once."""
    found: dict[tuple[str, str], tuple[Objs, tuple[str, str, float, str]]] = {}
    for objects in INSTALLS.values():
        for call in _callers(objects):
            found.setdefault(call[:2], (objects, call))
    return list(found.values())


@pytest.mark.parametrize(("objects", "call"), _every_call(), ids=_id)
def test_every_route_gives_up_before_its_caller_and_before_gunicorn(
    objects: Objs, call: tuple[str, str, float, str]
) -> None:
    """A route stops working on a request before its caller stops waiting (so no worker is
    held for an answer nobody reads), and gunicorn's worker timeout is longer than any of its
    app's deadlines (so it never kills a worker a deadline would have freed)."""
    service, path, waits, _caller = call
    deployment = service_targets(objects)[(NAMESPACE, service)]
    served = gunicorn_app(deployment)
    assert served is not None, service
    module, _, attribute = served[0].partition(":")
    app = getattr(importlib.import_module(module), attribute)
    deadlines = app.config["ROUTE_DEADLINES"]
    assert deadlines[path] < waits, f"{path} works on past its caller's {waits:g} s"
    container = served[2]
    flags = dict(a.split("=", 1) for a in container["args"] if a.startswith("--timeout="))
    assert float(flags["--timeout"]) > max(deadlines.values())


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, and matchExpressions with In) against labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] == "In", "extend this matcher first"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _policies_selecting(labels: dict[str, str], objects: Objs = OBJECTS) -> set[str]:
    return {
        p["metadata"]["name"]
        for p in _of("NetworkPolicy", objects)
        if _selects(p["spec"]["podSelector"], labels)
    }


def _ports(pod: dict[str, Any]) -> set[str]:
    return {port["name"] for c in pod["containers"] for port in c.get("ports", [])}


HOOK_POLICIES = {"gpustack-hooks", "gpustack-fleet-hooks"}
"""The policies opening hook Pods to Metacontroller: the worker install's, and the fleet's."""


@pytest.mark.parametrize(
    ("objects", "workload"),
    _each("Deployment") + _each("DaemonSet"),
    ids=_id,
)
def test_network_policies_let_each_pod_be_called_only_by_its_caller(
    objects: Objs, workload: dict[str, Any]
) -> None:
    """Every chain Pod is under the default deny. A Pod serving Metacontroller hooks is opened
    to Metacontroller's Pods alone, on the port its Service targets; a webhook Pod to anyone on
    its TLS port (the API server is no Pod); both may open no connection. Other Pods (driver,
    agents) are opened to nobody: the kubelet probes them from the node."""
    template = workload["spec"]["template"]
    labels = template["metadata"]["labels"]
    name = workload["metadata"]["name"]
    hook_services = {c[0] for c in _callers(objects) if c[3] == METACONTROLLER}
    webhook_services = {c[0] for c in _callers(objects) if c[3] == API_SERVER}
    assert not hook_services & webhook_services, "one Service, two kinds of caller"
    selected = _policies_selecting(labels, objects)
    assert "gpustack-default-deny" in selected
    policies = {p["metadata"]["name"]: p["spec"] for p in _of("NetworkPolicy", objects)}
    if name in hook_services:
        assert len(selected) == 2 and selected - {"gpustack-default-deny"} <= HOOK_POLICIES
    elif name in webhook_services:
        assert selected == {"gpustack-default-deny", "gpustack-webhooks"}
    else:
        assert selected == {"gpustack-default-deny"}
        return
    (policy,) = [policies[n] for n in selected - {"gpustack-default-deny"}]
    assert policy["policyTypes"] == ["Ingress", "Egress"] and policy["egress"] == []
    for rule in policy["ingress"]:
        for port in rule["ports"]:
            assert port["port"] in _ports(template["spec"]), (name, port)
        if name in hook_services:
            (peer,) = rule["from"]
            assert peer["namespaceSelector"] == {
                "matchLabels": {"kubernetes.io/metadata.name": "metacontroller"}
            }
            assert peer["podSelector"] == {
                "matchLabels": {"app.kubernetes.io/name": "metacontroller"}
            }


ONE_REPLICA = {"gpustack-worker-gateway"}
"""Deployments that run one replica by design, unguarded by a budget: the worker gateway keeps
no state and needs no Lease, so a drain only delays its next pass (docs/fleet.md)."""


@pytest.mark.parametrize("objects", INSTALLS.values(), ids=INSTALLS)
def test_every_deployment_has_a_disruption_budget_that_keeps_one_replica_up(
    objects: Objs,
) -> None:
    budgets = _of("PodDisruptionBudget", objects)
    guarded = [d for d in _of("Deployment", objects) if d["metadata"]["name"] not in ONE_REPLICA]
    for deployment in guarded:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        matching = [b for b in budgets if _selects(b["spec"]["selector"], labels)]
        assert len(matching) == 1, deployment["metadata"]["name"]
        assert matching[0]["spec"].get("maxUnavailable") == 1
        assert deployment["spec"]["replicas"] > 1  # else maxUnavailable 1 protects nothing
    assert len(budgets) == len(guarded)
    for deployment in _of("Deployment", objects):
        if deployment["metadata"]["name"] in ONE_REPLICA:
            assert deployment["spec"]["replicas"] == 1


def test_every_gunicorn_deployment_loads_the_shared_log_settings() -> None:
    for deployment in _of("Deployment"):
        served = gunicorn_app(deployment)
        if served is None:
            continue
        container = served[2]
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        assert "--config=python:hooks.gunicorn_conf" in argv, deployment["metadata"]["name"]


def test_the_monitoring_component_scrapes_every_metrics_port() -> None:
    """The optional component reaches every port serving `/metrics`: its PodMonitor the node
    agents' and the driver's `health` (no Service fronts them), its ServiceMonitor the hooks'
    `http` and the webhooks' `https` through their Services; its NetworkPolicy opens those the
    default deny closes, in each namespace of the chain (the agents have their own)."""
    objects = kustomize(MANIFESTS / "monitoring")
    monitoring = {o["kind"]: o for o in objects}
    pods, services = monitoring["PodMonitor"], monitoring["ServiceMonitor"]
    policies = {o["metadata"]["namespace"]: o for o in objects if o["kind"] == "NetworkPolicy"}
    selected = pods["spec"]["selector"]["matchLabels"]
    assert services["spec"]["selector"]["matchLabels"] == selected
    pod_ports = {e["port"] for e in pods["spec"]["podMetricsEndpoints"]}
    service_ports = {e["port"] for e in services["spec"]["endpoints"]}
    paths = [*pods["spec"]["podMetricsEndpoints"], *services["spec"]["endpoints"]]
    assert {e["path"] for e in paths} == {"/metrics"}
    opened: dict[str, set[str]] = {}
    for namespace, policy in policies.items():
        assert policy["spec"]["podSelector"]["matchLabels"] == selected
        opened[namespace] = {p["port"] for p in policy["spec"]["ingress"][0]["ports"]}
    assert opened == {NAMESPACE: {"health", "http"}, AGENT_NAMESPACE: {"health"}}
    assert set(pods["spec"]["namespaceSelector"]["matchNames"]) == set(opened)
    fronted = {
        tuple(sorted(svc["spec"]["selector"].items())): svc
        for svc in _of("Service")
        if svc["metadata"]["namespace"] == "gpustack-system"
    }
    serving = [*_of("DaemonSet"), *_of("Deployment")]
    metered = 0
    for workload in serving:
        template = workload["spec"]["template"]
        containers = template["spec"]["containers"]
        ports = {p["name"] for c in containers for p in c.get("ports", [])}
        argv = [a for c in containers for a in (*c.get("command", []), *c.get("args", []))]
        is_agent = workload["kind"] == "DaemonSet"
        is_driver = workload["metadata"]["name"] == "gpustack-admission-driver"
        is_hook = bool(argv) and argv[0] == "gunicorn"
        if not (is_agent or is_driver or is_hook):
            continue
        metered += 1
        name = workload["metadata"]["name"]
        assert selected.items() <= template["metadata"]["labels"].items()
        if is_hook:  # behind a Service; gunicorn's workers add up their metrics in one directory
            key = tuple(sorted(workload["spec"]["selector"]["matchLabels"].items()))
            service = fronted[key]
            assert selected.items() <= service["metadata"]["labels"].items(), name
            assert {p["name"] for p in service["spec"]["ports"]} & service_ports, name
            env = {e["name"]: e.get("value") for c in containers for e in c.get("env", [])}
            assert env.get("PROMETHEUS_MULTIPROC_DIR", "").startswith("/dev/shm/")
        else:
            assert ports & pod_ports, name
    assert metered == 9 + 1 + 7  # nine agents, the driver, six hooks and the webhook


def test_the_helm_chart_is_generated_from_the_manifests() -> None:
    from charts.render import main

    assert main(["--check"]) == 0, "run python -m charts.render"


def _documented(path: str, value: Any, properties: dict[str, Any], documented: set[str]) -> None:
    """`path` has a line in VALUE_DOCS, or is a map each of whose keys has (recursively); the
    schema knows each key on the way."""
    if path in documented:
        return
    assert isinstance(value, dict), path
    for inner, nested in value.items():
        assert inner in properties["properties"], f"{path}.{inner}"
        _documented(f"{path}.{inner}", nested, properties["properties"][inner], documented)


def _paths(prefix: str, value: Any) -> set[str]:
    found = {prefix}
    if isinstance(value, dict):
        for inner, nested in value.items():
            found |= _paths(f"{prefix}.{inner}", nested)
    return found


def test_every_chart_value_is_documented_and_checked() -> None:
    """The chart's README and values.yaml comments come from VALUE_DOCS: each value has a line
    there (a nested one by its path, or a parent's), and the schema knows every key."""
    from charts.render import VALUE_DOCS, schema, values

    documented = set(VALUE_DOCS)
    properties = schema()["properties"]
    for key, value in values().items():
        assert key in properties, key
        _documented(key, value, properties[key], documented)
    assert documented <= {path for key, value in values().items() for path in _paths(key, value)}


@pytest.mark.parametrize("objects", INSTALLS.values(), ids=INSTALLS)
def test_only_the_node_agents_run_where_privileged_pods_are_allowed(objects: Objs) -> None:
    """Pod Security: the chain's namespace enforces `restricted`, the agents' own `privileged`;
    every DaemonSet (the agents) is in the latter, every Deployment in the former. A manager
    runs no agent, and its fleet namespace (member credentials only) is `restricted` too."""
    levels = {
        ns["metadata"]["name"]: ns["metadata"]["labels"].get("pod-security.kubernetes.io/enforce")
        for ns in _of("Namespace", objects)
    }
    expected = {SYSTEM_NAMESPACE: "restricted", AGENT_NAMESPACE: "privileged"}
    if objects is MANAGER:
        expected[FLEET_NAMESPACE] = "restricted"
    assert levels == expected
    agents = {d["metadata"]["namespace"] for d in _of("DaemonSet", objects)}
    assert agents == ({AGENT_NAMESPACE} if objects is OBJECTS else set())
    assert {d["metadata"]["namespace"] for d in _of("Deployment", objects)} == {SYSTEM_NAMESPACE}
    for deployment in _of("Deployment", objects):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]


def test_each_agent_selects_the_label_the_pci_vendor_rule_writes() -> None:
    """The NodeFeatureRule writes, per manufacturer, exactly the label its DaemonSet selects,
    from the raw `pci.device` features (vendor and an accelerator class), never from a label the
    worker's configuration decides."""
    (rule,) = [r for r in _of("NodeFeatureRule") if r["metadata"]["name"] == RULE_NAME]
    rules = {r["name"]: r for r in rule["spec"]["rules"]}
    for daemonset in _of("DaemonSet"):
        (selected,) = daemonset["spec"]["template"]["spec"]["nodeSelector"].items()
        maker = daemonset["metadata"]["name"].removeprefix("gpustack-device-manager-")
        written = rules[f"gpustack {maker} pci vendor"]
        assert written["labels"] == {selected[0]: selected[1]}
        (match,) = written["matchFeatures"]
        assert match["feature"] == "pci.device"
        vendor = selected[0].removeprefix("feature.node.kubernetes.io/pci-").split(".")[0]
        assert match["matchExpressions"]["vendor"] == {"op": "In", "value": [vendor]}
        assert match["matchExpressions"]["class"]["op"] == "InRegexp"
    assert len(rules) == len(_of("DaemonSet"))


def test_the_testbed_nodes_show_the_hardware_their_agents_simulate() -> None:
    """Each real test node's PCI bus (what nfd-worker reads) comes from the same profile the
    overlay gives its agent."""
    from testbed.cluster import OVERLAY, REAL_NODES

    ops = yaml.safe_load((OVERLAY / "simulate-nvidia.yaml").read_text())
    (flag,) = [op["value"] for op in ops if str(op["value"]).startswith("--simulate=")]
    given = dict(entry.split("=", 1) for entry in flag.removeprefix("--simulate=").split(","))
    assert given == {spec.name: spec.hardware for spec in REAL_NODES}


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return [node] if isinstance(node, str) else []


def test_no_string_reads_as_a_number_to_the_api_server() -> None:
    """PyYAML (YAML 1.1) reads `19e5` as a string; kubectl, Helm and the API server (YAML 1.2)
    read a number. Every such string in the manifests and the chart's templates is quoted."""
    yaml12_number = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
    chart = MANIFESTS.parent / "charts" / "gpustack-chain" / "templates"
    for path in [*MANIFESTS.rglob("*.yaml"), *chart.glob("*.yaml")]:
        text = path.read_text()
        try:
            docs = list(yaml.safe_load_all(re.sub(r"(?m)^\{\{.*\}\}$", "", text)))
        except yaml.YAMLError:
            continue  # a template whose lines are not YAML until Helm renders them
        for doc in docs:
            for value in _strings(doc):
                if yaml12_number.fullmatch(value):
                    assert f"'{value}'" in text or f'"{value}"' in text, (path, value)


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
TENANT_ROLES = {
    "gpustack-chain-tenant-view": {"view", "edit", "admin"},
    "gpustack-chain-tenant-edit": {"edit", "admin"},
    "gpustack-chain-instancetype-reader": set(),
}
CHAIN_INTERNAL = {"devices", "settings", "nodeflavors", "poolcards", "kvcachepools"}


def test_tenant_roles_aggregate_and_leave_the_chains_own_kinds_alone() -> None:
    """docs/security.md, "Tenant roles": Instances through `view`/`edit`/`admin`, InstanceTypes
    through a reader role the platform team binds; nothing on the cluster-internal kinds."""
    roles = {r["metadata"]["name"]: r for r in _of("ClusterRole")}
    for name, aggregates in TENANT_ROLES.items():
        role = roles[name]
        labels = role["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "gpustack-chain"
        assert {k.removeprefix(AGGREGATE) for k in labels if k.startswith(AGGREGATE)} == (
            aggregates
        )
        assert all(labels[AGGREGATE + a] == "true" for a in aggregates)
        for rule in role["rules"]:
            assert rule["apiGroups"] == ["worker.gpustack.ai"]
            named = {r.partition("/")[0] for r in rule["resources"]}
            assert "*" not in named and "*" not in rule["verbs"]
            assert not named & CHAIN_INTERNAL, (name, rule)
            # Status is the chain's: tenants only read it.
            if any("/" in r for r in rule["resources"]):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, (name, rule)
    # The aggregated roles stay namespaced (Instances); the cluster-scoped reader is bound
    # by the platform team, never shipped bound to everyone.
    assert {
        r
        for n in ("gpustack-chain-tenant-view", "gpustack-chain-tenant-edit")
        for rule in roles[n]["rules"]
        for r in rule["resources"]
    } == {"instances", "instances/status"}
    bound = {b["roleRef"]["name"] for b in _of("ClusterRoleBinding") + _of("RoleBinding")}
    assert not bound & set(TENANT_ROLES)
