"""Every object name the chain derives, for every model in the catalogue, is one the API server
accepts: ResourceFlavors, InstanceTypes, their ClusterQueues and PoolCards and catalog entries
are DNS-1123 subdomains (Kueue's flavor and queue references say the same); LocalQueues and the
Topology are DNS-1123 labels (a LocalQueue's name is also the `kueue.x-k8s.io/queue-name` label
value). The catalogue is what the node agent simulates (`nodeagent/simulate/profiles`, read by
the real detectors, with and without the memory suffix) plus every product family of the unit
presets; the keys go through the labels the node agent publishes and back, as in a cluster.

Label keys keep the ids as published (`_` included): only the object names are rewritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain import names
from chain.keys import accelerator_key, cpu_key, group_id
from chain.labels import (
    ARCH,
    OS,
    accelerator_feature_key,
    count_key,
    general_feature_key,
)
from chain.manufacturers import manufacturers
from chain.pools import FlavorIdentity, node_flavors
from chain.validation import is_dns_subdomain, is_qualified_name
from hooks.flavor.presets import PRESETS
from nodeagent.report import node_feature_labels
from nodeagent.simulate import shipped_profiles
from tests.unit.kube_rules import is_dns_label, is_label_value
from tests.unit.nodeagent.helpers import detect

MAKERS = tuple(entry.name for entry in manufacturers({}).entries)
# CPU keys a pool may carry: the collapsed one, two real ones, and one at the key budget
# (`CPU_KEY_MAX`, 54 characters).
CPUS = (
    cpu_key(""),
    cpu_key("AMD", "AMD EPYC 7763 64-Core Processor"),
    cpu_key("Intel", "Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz"),
    cpu_key("AMD", "AMD " + "x" * 80),
)
PLATFORMS = (("linux", "amd64"), ("linux", "arm64"))


@cache
def _profile_labels(profile: str, with_memory: bool) -> dict[str, str]:
    """The accelerator labels the node agent publishes for a simulated node."""
    return node_feature_labels(detect(profile, with_memory))


def _catalogue() -> Iterator[tuple[str, dict[str, str]]]:
    """(where it comes from, the node's accelerator labels) for every catalogued model."""
    for profile in shipped_profiles():
        for with_memory in (False, True):
            yield f"{profile} memory={with_memory}", _profile_labels(profile, with_memory)
    for maker, entries in PRESETS.items():
        for entry in entries:
            product = " ".join(entry.family).upper()
            key = accelerator_feature_key(accelerator_key(maker, group_id(maker, product, 0)))
            yield f"preset {maker} {product}", {key: "true", count_key(key): "1"}


def _flavors(accelerators: dict[str, str]) -> list[FlavorIdentity]:
    """Every flavor a node of those cards feeds, for each CPU and platform."""
    found = []
    for cpu in CPUS:
        for os, arch in PLATFORMS:
            cpu_feature = general_feature_key(cpu.key)
            labels = {**accelerators, OS: os, ARCH: arch, cpu_feature: "true"}
            labels[count_key(cpu_feature)] = "64"
            found += node_flavors(labels, cpu, MAKERS)
    return found


def _derived_names(flavor: FlavorIdentity) -> dict[str, list[str]]:
    """The names derived from one flavor, by what they must be."""
    subdomains = [flavor.name]
    labels = []
    for aware in (False, True):
        pool = flavor.instance_type_name(aware)  # the InstanceType, ClusterQueue and PoolCards
        subdomains += [pool, flavor.instance_type_flavor_name(aware)]
        labels.append(names.local_queue_name(pool))
    labels.append(names.topology_name(names.HOSTNAME_PROFILE))
    return {"subdomain": subdomains, "label": labels}


CATALOGUE = list(_catalogue())


def test_the_catalogue_has_every_simulated_model_and_a_model_with_an_underscore() -> None:
    akeys = {key for _, labels in CATALOGUE for key in labels if key.endswith("-k100_ai")}
    assert akeys == {accelerator_feature_key("hygon-k100_ai")}
    assert len(CATALOGUE) == 2 * len(shipped_profiles()) + sum(map(len, PRESETS.values()))


@pytest.mark.parametrize(("source", "labels"), CATALOGUE, ids=[source for source, _ in CATALOGUE])
def test_every_derived_name_of_every_catalogued_model_is_valid(
    source: str, labels: dict[str, str]
) -> None:
    flavors = _flavors(labels)
    assert any(flavor.acceleratable for flavor in flavors), source
    for flavor in flavors:
        derived = _derived_names(flavor)
        for name in derived["subdomain"]:
            assert is_dns_subdomain(name), (source, name)
        for name in derived["label"]:
            assert is_dns_label(name) and is_label_value(name), (source, name)
        # The label keys stay as the node agent publishes them.
        assert is_qualified_name(count_key(flavor.feature_key))
        if flavor.acceleratable:
            assert flavor.feature_key in labels, source


def test_distinct_keys_of_the_catalogue_never_share_a_name() -> None:
    pools: dict[str, str] = {}
    for _, labels in CATALOGUE:
        for flavor in _flavors(labels):
            if flavor.acceleratable:
                pool = flavor.instance_type_name(aware=False)
                assert pools.setdefault(pool, flavor.accelerator_key) == flavor.accelerator_key


def test_hygon_k100_ai() -> None:
    """Hygon's DCU reports `K100_AI`: its aKey keeps the `_` (the label keys on the node are
    unchanged), and every object name spells it `k100-ai` plus the aKey's hash."""
    labels = _profile_labels("k100-ai-x2", False)
    assert labels[count_key(accelerator_feature_key("hygon-k100_ai"))] == "2"
    epyc = CPUS[1]
    device, cpu = (
        FlavorIdentity(epyc.key, "hygon-k100_ai", "linux", "amd64", 2),
        FlavorIdentity(epyc.key, "", "linux", "amd64", 64),
    )
    assert device in _flavors(labels)
    assert names.name_segment("hygon-k100_ai") == "hygon-k100-ai-1190daf9"
    assert device.name == "gpustack--amd-epyc-7763--hygon-k100-ai-1190daf9-linux-amd64-2d"
    assert device.instance_type_name(aware=False) == "gpustack--hygon-k100-ai-1190daf9-linux-amd64"
    assert device.instance_type_name(aware=True) == (
        "gpustack--amd-epyc-7763--hygon-k100-ai-1190daf9-linux-amd64"
    )
    assert device.instance_type_flavor_name(aware=False) == "gpustack--hygon-k100-ai-1190daf9"
    assert names.flavor_count(device.name) == 2
    # The pool's spec and labels keep the key as published: they select the node's labels.
    assert device.pool(aware=False).accelerator_group == "hygon-k100_ai"
    assert device.feature_key == "acceleratable.feature.gpustack.ai/hygon-k100_ai"
    assert cpu.name == "gpustack--amd-epyc-7763-linux-amd64-64c"


@pytest.mark.parametrize(
    "key",
    ["generic", "nvidia-tesla-t4", "amd-instinct-mi300x", "ascend-910b3", "qemu-version-2.5"],
)
def test_a_key_that_is_already_a_name_segment_is_kept(key: str) -> None:
    """Existing pools keep their names: only keys an object name cannot hold are rewritten."""
    assert names.name_segment(key) == key


@given(
    st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,52}[A-Za-z0-9])?", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True),
    st.sampled_from(PLATFORMS),
    st.integers(min_value=1, max_value=10**6),
)
def test_any_label_key_name_gives_valid_names(
    general: str, accelerator: str, platform: tuple[str, str], count: int
) -> None:
    """Whatever a label key may hold (capitals, `_`, `.` next to `-`), the names are valid and
    the `--` between the two keys stays the only one."""
    os, arch = platform
    device = FlavorIdentity(general, accelerator, os, arch, count)
    for name in _derived_names(device)["subdomain"] + [
        FlavorIdentity(general, "", os, arch, count).name
    ]:
        assert is_dns_subdomain(name), name
        assert name.removeprefix(names.CHAIN_PREFIX).count("--") <= 1, name
    assert names.flavor_count(device.name) == count
