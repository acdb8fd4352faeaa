from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.settings import Settings, StartupEnv, env_name

DEFAULTS = {
    "node-management-manual": False,
    "instance-type-mixed-on-node": True,
    "instance-type-derived-from-node": True,
    "instance-type-drain-when-no-flavors": True,
    "instance-type-aware-cpu-manufacturer": False,
    "workload-fit-affinity": True,
    "instance-general-resources-overcommit": True,
    "instance-privileged-allowed": False,
    "instance-host-path-volume-allowed": False,
    "instance-persistent-volume-placement": True,
    "entrance-excluded-namespaces": [],
    "topology-levels": ["kubernetes.io/hostname"],
}
BOOLEAN_SETTINGS = [name for name, value in DEFAULTS.items() if isinstance(value, bool)]
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"


def test_topology_levels() -> None:
    assert Settings().topology_levels == (HOST,)
    assert Settings.from_spec({"topology-levels": [RACK, HOST]}).topology_levels == (RACK, HOST)
    assert Settings.from_spec({"topology-levels": f"{RACK}, {HOST}"}).topology_levels == (
        RACK,
        HOST,
    )
    env = {"GPUSTACK_TOPOLOGY_LEVELS": f"{RACK},{HOST}"}
    assert Settings.from_env(env).topology_levels == (RACK, HOST)
    refusals = {
        r"^spec\.topology-levels: the last \(lowest\) level must be": [RACK],
        r"^spec\.topology-levels: the last": [HOST, RACK],
        r"^spec\.topology-levels\[1\]: 'kubernetes.io/hostname' is named twice": [HOST, HOST],
        r"^spec\.topology-levels\[0\]: 'rack id' is not a node label key": ["rack id", HOST],
        r"^spec\.topology-levels: 17 levels, Kueue allows 16": [
            *(f"l{i}" for i in range(16)),
            HOST,
        ],
        r"^spec\.topology-levels: expected a list": True,
    }
    for pattern, value in refusals.items():
        with pytest.raises(ValueError, match=pattern):
            Settings.from_spec({"topology-levels": value})
    with pytest.raises(ValueError, match=r"^GPUSTACK_TOPOLOGY_LEVELS: the last"):
        Settings.from_env({"GPUSTACK_TOPOLOGY_LEVELS": RACK})


def test_defaults_and_names() -> None:
    assert Settings().to_spec() == DEFAULTS
    assert Settings.names() == tuple(DEFAULTS)
    assert Settings.from_spec(None) == Settings()
    assert Settings.from_spec({}) == Settings()


def test_from_spec() -> None:
    got = Settings.from_spec(
        {
            "instance-type-aware-cpu-manufacturer": True,
            "node-management-manual": "true",
            "workload-fit-affinity": "False",
        }
    )
    assert got.instance_type_aware_cpu_manufacturer
    assert got.node_management_manual
    assert not got.workload_fit_affinity
    assert got.instance_type_mixed_on_node


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"workload-fit-afinity": False}, "spec.workload-fit-afinity"),
        ({"node-management-manual": "yes"}, "spec.node-management-manual"),
        ({"node-management-manual": 1}, "spec.node-management-manual"),
        ({"instance-type-mixed-on-node": None}, "spec.instance-type-mixed-on-node"),
        (["node-management-manual"], "spec"),
    ],
)
def test_bad_spec_names_the_field(spec: object, field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        Settings.from_spec(spec)


def test_excluded_namespaces() -> None:
    assert Settings().entrance_excluded_namespaces == ()
    got = Settings.from_spec({"entrance-excluded-namespaces": ["kueue-system", "monitoring"]})
    assert got.entrance_excluded_namespaces == ("kueue-system", "monitoring")
    assert Settings.from_spec(
        {"entrance-excluded-namespaces": "a, b"}
    ).entrance_excluded_namespaces == (
        "a",
        "b",
    )
    env = {"GPUSTACK_ENTRANCE_EXCLUDED_NAMESPACES": "x,y"}
    assert Settings.from_env(env).entrance_excluded_namespaces == ("x", "y")
    with pytest.raises(ValueError, match=r"^spec\.entrance-excluded-namespaces:"):
        Settings.from_spec({"entrance-excluded-namespaces": [1]})
    with pytest.raises(ValueError, match=r"^spec\.entrance-excluded-namespaces:"):
        Settings.from_spec({"entrance-excluded-namespaces": True})


def test_frozen() -> None:
    with pytest.raises(AttributeError):
        Settings().workload_fit_affinity = False  # type: ignore[misc]


@given(st.fixed_dictionaries({}, optional=dict.fromkeys(BOOLEAN_SETTINGS, st.booleans())))
def test_round_trip(spec: dict[str, bool]) -> None:
    settings = Settings.from_spec(spec)
    assert Settings.from_spec(settings.to_spec()) == settings
    assert settings.to_spec() == {**DEFAULTS, **spec}


def test_seed_from_env() -> None:
    assert env_name("node-management-manual") == "GPUSTACK_NODE_MANAGEMENT_MANUAL"
    env = {
        "GPUSTACK_NODE_MANAGEMENT_MANUAL": "true",
        "GPUSTACK_WORKLOAD_FIT_AFFINITY": "0",
        "GPUSTACK_INSTANCE_TYPE_MIXED_ON_NODE": "",
    }
    got = Settings.from_env(env)
    assert got.node_management_manual
    assert not got.workload_fit_affinity
    assert got.instance_type_mixed_on_node
    with pytest.raises(ValueError, match="GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED"):
        Settings.from_env({"GPUSTACK_INSTANCE_PRIVILEGED_ALLOWED": "maybe"})


def test_startup_env() -> None:
    default = StartupEnv.from_env({})
    assert default == StartupEnv()
    assert not default.devices_group_id_with_memory
    assert default.ledger_release_terminated_pods
    assert default.device_plugin_sliced_allocate_gate
    assert default.system_namespace == "gpustack-system"
    assert default.pci_class_prefixes == ("02", "03", "0b", "12")
    assert default.reserved_namespaces == {"gpustack-system", "gpustack-agents", "kube-system"}

    got = StartupEnv.from_env(
        {
            "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY": "true",
            "GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS": "false",
            "GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE": "F",
            "KUBERNETES_POD_NAMESPACE": "chain",
            "GPUSTACK_PCI_CLASS_PREFIXES": "03, 12,",
        }
    )
    assert got == StartupEnv(True, False, False, "chain", ("03", "12"))
    with pytest.raises(ValueError, match="GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS"):
        StartupEnv.from_env({"GPUSTACK_LEDGER_RELEASE_TERMINATED_PODS": "on"})


def test_the_reserved_namespaces_follow_a_helm_release() -> None:
    """Installed with Helm elsewhere, the chain skips its own namespace (the Pod's) and the
    agents' (the chart's `agentNamespace.name`), not the manifests' names."""
    env = StartupEnv.from_env(
        {"KUBERNETES_POD_NAMESPACE": "infra", "GPUSTACK_AGENT_NAMESPACE": "infra-agents"}
    )
    assert env.reserved_namespaces == {"infra", "infra-agents", "kube-system"}


def test_the_first_deploy_seeds_only_what_the_environment_names() -> None:
    from chain.settings import seeded_spec

    env = {"GPUSTACK_NODE_MANAGEMENT_MANUAL": "true", "GPUSTACK_OTHER": "x"}
    assert seeded_spec(env) == {"node-management-manual": True}
    assert seeded_spec({}) == {}
