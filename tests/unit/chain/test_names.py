from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain import names
from tests.unit.kube_rules import is_dns_label, is_label_value


@pytest.mark.parametrize(
    ("text", "digest"),
    [
        # Published FNV-1a 64 test values.
        ("", "cbf29ce484222325"),
        ("a", "af63dc4c8601ec8c"),
        ("foobar", "85944171f73967e8"),
    ],
)
def test_fnv64a_reference_values(text: str, digest: str) -> None:
    assert names.fnv64a(text) == digest


def test_fnv64a_hashes_utf8_bytes() -> None:
    # "é" is two UTF-8 bytes (c3 a9): folding both differs from folding the code point once.
    by_hand = 0xCBF29CE484222325
    for byte in (0xC3, 0xA9):
        by_hand = ((by_hand ^ byte) * 0x100000001B3) % 2**64
    assert names.fnv64a("é") == f"{by_hand:016x}"


@given(st.text())
def test_fnv64a_is_16_lowercase_hex(text: str) -> None:
    digest = names.fnv64a(text)
    assert len(digest) == 16
    assert set(digest) <= set("0123456789abcdef")


@pytest.mark.parametrize(
    ("cluster_queue", "local_queue"),
    [
        # docs/design/vectors.md, "LocalQueue names".
        ("gpustack--generic-linux-amd64", "gpustack-fnv64-3b93966fd73eb9ec"),
        ("gpustack--nvidia-a10g-linux-amd64", "gpustack-fnv64-c4680bb149644f1c"),
        ("gpustack--nvidia-tesla-t4-linux-amd64", "gpustack-fnv64-6b371caa2da0b799"),
        ("gpustack--amd-epyc-7r13-linux-amd64", "gpustack-fnv64-8dde992f64a17a2f"),
        (
            "gpustack--intel-xeon-platinum-8259cl-linux-amd64",
            "gpustack-fnv64-c6aee2b7b5c4dc6b",
        ),
    ],
)
def test_local_queue_names(cluster_queue: str, local_queue: str) -> None:
    assert names.local_queue_name(cluster_queue) == local_queue


@given(st.text())
def test_local_queue_name_is_always_31_valid_characters(cluster_queue: str) -> None:
    name = names.local_queue_name(cluster_queue)
    assert len(name) == 31
    assert name.startswith(names.LOCAL_QUEUE_PREFIX)
    assert is_dns_label(name)
    assert is_label_value(name)
    assert re.fullmatch(names.LOCAL_QUEUE_PREFIX + "[0-9a-f]{16}", name)


def test_hostname_topology_profile() -> None:
    # docs/design/control-plane.md, "Topology profile": the hostname-only profile.
    assert names.HOSTNAME_PROFILE == "fnv64-87bf574bea2a4f23"
    assert names.topology_profile(["kubernetes.io/hostname"]) == names.HOSTNAME_PROFILE
    assert names.topology_name(names.HOSTNAME_PROFILE) == "gpustack-fnv64-87bf574bea2a4f23"
    assert names.topology_profile(["a", "b"]) != names.topology_profile(["ab"])


def test_flavor_names() -> None:
    # docs/design/vectors.md, "Flavors".
    assert names.cpu_flavor_name("amd-25-1", "linux", "amd64", 8) == (
        "gpustack--amd-25-1-linux-amd64-8c"
    )
    assert names.cpu_flavor_name("amd-epyc-7763", "linux", "amd64", 8) == (
        "gpustack--amd-epyc-7763-linux-amd64-8c"
    )
    assert names.device_flavor_name("amd-epyc-7763", "nvidia-tesla-t4", "linux", "amd64", 2) == (
        "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d"
    )


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("gpustack--amd-25-1-linux-amd64-8c", 8),
        ("gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64-2d", 2),
        ("gpustack--generic-linux-arm64-128c", 128),
        ("gpustack--amd-25-1-linux-amd64-8c-fnv64-87bf574bea2a4f23", 8),
        ("gpustack--generic--nvidia-h100-linux-amd64-1d-fnv64-0123456789abcdef", 1),
        ("gpustack--generic-linux-amd64", None),
        ("", None),
        # A key segment that looks like a count (a CPU named "...-4c") is not the count: the
        # scan runs from the end.
        ("gpustack--intel-core-4c--nvidia-tesla-t4-linux-amd64-2d", 2),
    ],
)
def test_flavor_count(name: str, count: int | None) -> None:
    assert names.flavor_count(name) == count


@given(
    st.sampled_from(["generic", "amd-25-1", "intel-xeon-platinum-8358", "intel-core-4c"]),
    st.sampled_from(["", "nvidia-tesla-t4", "ascend-910b2", "vendor-model-16d"]),
    st.integers(min_value=0, max_value=10**6),
)
def test_flavor_count_reads_back(general: str, accelerator: str, count: int) -> None:
    if accelerator:
        name = names.device_flavor_name(general, accelerator, "linux", "amd64", count)
    else:
        name = names.cpu_flavor_name(general, "linux", "amd64", count)
    assert names.flavor_count(name) == count


@pytest.mark.parametrize(
    ("acceleratable", "aware", "expected"),
    [
        (False, False, "gpustack--generic-linux-amd64"),
        (True, False, "gpustack--nvidia-tesla-t4-linux-amd64"),
        (False, True, "gpustack--amd-epyc-7763-linux-amd64"),
        (True, True, "gpustack--amd-epyc-7763--nvidia-tesla-t4-linux-amd64"),
    ],
)
def test_instance_type_names(acceleratable: bool, aware: bool, expected: str) -> None:
    assert (
        names.instance_type_name(
            acceleratable, aware, "amd-epyc-7763", "nvidia-tesla-t4", "linux", "amd64"
        )
        == expected
    )


@pytest.mark.parametrize(
    ("acceleratable", "aware", "expected"),
    [
        (False, False, "gpustack--generic"),
        (True, False, "gpustack--nvidia-tesla-t4"),
        (False, True, "gpustack--amd-epyc-7763"),
        (True, True, "gpustack--amd-epyc-7763--nvidia-tesla-t4"),
    ],
)
def test_instance_type_flavor_names(acceleratable: bool, aware: bool, expected: str) -> None:
    got = names.instance_type_flavor_name(acceleratable, aware, "amd-epyc-7763", "nvidia-tesla-t4")
    assert got == expected
