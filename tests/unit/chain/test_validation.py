from __future__ import annotations

import pytest

from chain.validation import is_dns_subdomain, is_qualified_name
from tests.unit.kube_rules import is_dns_label, is_label_value


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.partitioned.mig-1g.10gb", True),
        ("nvidia.com/gpu.partitioned.mig-1g.10gb+me", False),
        ("cpu", True),
        ("a/b/c", False),
        ("/name", False),
        ("Example.com/x", False),
        ("example.com/" + "x" * 63, True),
        ("example.com/" + "x" * 64, False),
        ("example.com/-x", False),
        ("example.com/x-", False),
        ("", False),
    ],
)
def test_qualified_names(key: str, valid: bool) -> None:
    assert is_qualified_name(key) == valid


def test_label_values() -> None:
    assert is_label_value("")
    assert is_label_value("Tesla-T4")
    assert not is_label_value("Tesla T4")
    assert not is_label_value("x" * 64)
    assert not is_label_value("x\n")


def test_dns_names() -> None:
    assert is_dns_label("gpustack-fnv64-3b93966fd73eb9ec")
    assert not is_dns_label("a.b")
    assert is_dns_subdomain("a.b")
    assert not is_dns_subdomain("A.b")
    assert not is_dns_subdomain("a" * 254)
