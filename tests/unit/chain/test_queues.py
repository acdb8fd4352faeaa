"""ClusterQueue vocabulary: a flavor's size from its labels, the queue's resource and quota."""

from __future__ import annotations

import pytest

from chain.queues import FlavorSize, flavor_size, nominal_quota, quota_resource

A = "acceleratable.feature.gpustack.ai/"
G = "general.feature.gpustack.ai/"

T4_2D = {
    A + "nvidia-tesla-t4": "true",
    A + "nvidia-tesla-t4.count": "2",
    A + "nvidia-tesla-t4.capacity": "4",
    G + "amd-epyc-7763": "true",
    "feature.gpustack.ai/acceleratable": "true",
}
CPU_8C = {
    G + "amd-epyc-7763": "true",
    G + "amd-epyc-7763.count": "8",
    G + "amd-epyc-7763.capacity": "16",
    "feature.gpustack.ai/acceleratable": "false",
}


def test_device_flavor_size_ignores_the_cpu_key_it_carries() -> None:
    assert flavor_size(T4_2D, acceleratable=True) == FlavorSize(A + "nvidia-tesla-t4", 2, 4)


def test_cpu_flavor_size() -> None:
    assert flavor_size(CPU_8C, acceleratable=False) == FlavorSize(G + "amd-epyc-7763", 8, 16)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({**T4_2D, A + "nvidia-tesla-t4.capacity": "four"}, "nvidia-tesla-t4.capacity']"),
        ({**T4_2D, A + "nvidia-tesla-t4.capacity": "-1"}, "nvidia-tesla-t4.capacity']"),
        ({**T4_2D, A + "nvidia-tesla-t4.count": "0"}, "nvidia-tesla-t4.count']"),
        ({k: v for k, v in T4_2D.items() if not k.endswith(".count")}, "count']: missing"),
        ({k: v for k, v in T4_2D.items() if not k.endswith(".capacity")}, "found 0"),
        ({**T4_2D, A + "nvidia-a10g.capacity": "1"}, "found 2"),
        ({**T4_2D, A + "nvidia-tesla-t4": "false"}, "beside its capacity"),
    ],
)
def test_malformed_flavor_labels_are_named(labels: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=r"^metadata\.labels") as err:
        flavor_size(labels, acceleratable=True)
    assert message in str(err.value)


def test_a_zero_capacity_is_a_size() -> None:
    labels = {**CPU_8C, G + "amd-epyc-7763.capacity": "0"}
    assert flavor_size(labels, acceleratable=False).capacity == 0


def test_quota_resource() -> None:
    assert quota_resource(True, "nvidia") == "credits.gpustack.ai/nvidia"
    assert quota_resource(False, "") == "cpu"


def test_nominal_quota_vectors() -> None:
    # docs/design/vectors.md, "Queues": 1 A10G card -> 1,600,000; 5 T4 cards (4 + 1) -> 8,000,000.
    assert nominal_quota(FlavorSize("", 1, 1), True) == 1_600_000
    t4 = nominal_quota(FlavorSize("", 2, 4), True) + nominal_quota(FlavorSize("", 1, 1), True)
    assert t4 == 8_000_000
    assert nominal_quota(FlavorSize("", 8, 16), False) == 16
