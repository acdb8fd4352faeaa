"""Which profile a node is in, and the names a profile gives its flavors and Topology."""

from __future__ import annotations

from chain.names import flavor_count, profiled_flavor_name, topology_name
from chain.profiles import node_domain, node_levels, node_profile

HOST = "kubernetes.io/hostname"
RACK = "cloud.provider.com/topology-rack"
BLOCK = "cloud.provider.com/topology-block"
HOST_PROFILE = "fnv64-87bf574bea2a4f23"
RACK_PROFILE = "fnv64-58d7a1ce21b8b67c"
FLAVOR = "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-8d"


def test_a_node_with_every_level_is_in_the_profile() -> None:
    labels = {HOST: "n1", RACK: "r1", BLOCK: "b1"}
    assert node_levels((RACK, HOST), labels) == (RACK, HOST)
    assert node_profile((RACK, HOST), labels) == RACK_PROFILE
    assert node_levels((BLOCK, RACK, HOST), labels) == (BLOCK, RACK, HOST)


def test_a_node_missing_a_level_falls_back_to_the_hostname() -> None:
    assert node_levels((BLOCK, RACK, HOST), {HOST: "n1", RACK: "r1"}) == (HOST,)
    assert node_profile((RACK, HOST), {HOST: "n1"}) == HOST_PROFILE
    # Present with an empty value is a domain to Kueue, not a missing level.
    assert node_profile((RACK, HOST), {HOST: "n1", RACK: ""}) == RACK_PROFILE


def test_profile_names() -> None:
    assert profiled_flavor_name(FLAVOR, HOST_PROFILE) == FLAVOR
    suffixed = profiled_flavor_name(FLAVOR, RACK_PROFILE)
    assert suffixed == FLAVOR + "-fnv64-58d7a1ce21b8b67c"
    assert flavor_count(suffixed) == 8
    assert topology_name(RACK_PROFILE) == "gpustack-fnv64-58d7a1ce21b8b67c"


def test_a_nodes_domain_names_every_level_above_the_hostname() -> None:
    labels = {HOST: "n1", RACK: "r1", BLOCK: "b1"}
    assert node_domain((BLOCK, RACK, HOST), labels) == "b1/r1"
    assert node_domain((RACK, HOST), labels) == "r1"
    assert node_domain((HOST,), labels) is None
    assert node_domain((RACK, HOST), {HOST: "n1"}) is None
