from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain import labels
from chain.labels import AcceleratorGroupFacts, accelerator_labels, sanitize_label_value
from chain.manufacturers import ManufacturerTable
from chain.validation import is_qualified_name
from tests.unit.kube_rules import is_label_value

A = "acceleratable.feature.gpustack.ai/"


def test_device_labels_tesla_t4() -> None:
    # docs/design/vectors.md, "Device labels", first group.
    group = AcceleratorGroupFacts(
        manufacturer="nvidia",
        group_id="tesla-t4",
        name="Tesla T4",
        memory_mib=15360,
        cards=4,
        cores=2560,
        driver_version="580.126.09",
        runtime_version="13.0",
        family="Turing",
        compute_capability="7.5",
    )
    assert accelerator_labels([group]) == {
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia": "true",
        A + "nvidia.driver-version": "580.126.09",
        A + "nvidia.runtime-version": "13.0",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.product": "Tesla-T4",
        A + "nvidia-tesla-t4.memory": "15Gi",
        A + "nvidia-tesla-t4.cores": "2560",
        A + "nvidia-tesla-t4.family": "Turing",
        A + "nvidia-tesla-t4.comcap": "7.5",
        A + "nvidia-tesla-t4.count": "4",
    }


def test_device_labels_h100_minimal() -> None:
    # docs/design/vectors.md, "Device labels", second group: no versions, family or comcap.
    group = AcceleratorGroupFacts("nvidia", "h100", "H100", 81920, cards=1)
    assert accelerator_labels([group]) == {
        "feature.gpustack.ai/acceleratable": "true",
        A + "nvidia": "true",
        A + "nvidia-h100": "true",
        A + "nvidia-h100.product": "H100",
        A + "nvidia-h100.memory": "80Gi",
        A + "nvidia-h100.cores": "0",
        A + "nvidia-h100.count": "1",
    }


def test_device_labels_skip_groups_without_cards_or_valid_keys() -> None:
    # docs/design/vectors.md, "Device labels": a group with no cards -> no labels.
    assert accelerator_labels([AcceleratorGroupFacts("nvidia", "h100", "H100", 81920, 0)]) == {}
    assert accelerator_labels([AcceleratorGroupFacts("nvidia", "", "NVIDIA", 81920, 1)]) == {}
    too_long = AcceleratorGroupFacts("nvidia", "x" * 50, "X", 1024, 1)
    assert accelerator_labels([too_long]) == {}


def test_device_labels_two_models() -> None:
    got = accelerator_labels(
        [
            AcceleratorGroupFacts("nvidia", "h100", "H100", 81920, 1),
            AcceleratorGroupFacts("nvidia", "a10g", "NVIDIA A10G", 23028, 2),
        ]
    )
    assert got[A + "nvidia-h100.count"] == "1"
    assert got[A + "nvidia-a10g.count"] == "2"
    assert got[A + "nvidia-a10g.memory"] == "23028Mi"
    assert got[A + "nvidia-a10g.product"] == "NVIDIA-A10G"
    assert all(is_qualified_name(k) and is_label_value(v) for k, v in got.items())


def test_cpu_capacity_labels() -> None:
    # docs/design/vectors.md, "CPU capacity labels" (16 cores).
    assert labels.cpu_capacity_labels("amd", "amd-25-1", 16, None, manual=False) == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-25-1": "true",
        "general.feature.gpustack.ai/amd-25-1.count": "16",
    }
    # An admin's `false` stays.
    opted_out = labels.cpu_capacity_labels("amd", "amd-25-1", 16, "false", manual=False)
    assert opted_out["gpustack.ai/managed"] == "false"
    # Manual mode and no label -> no managed key.
    manual = labels.cpu_capacity_labels("amd", "amd-25-1", 16, None, manual=True)
    assert "gpustack.ai/managed" not in manual
    # Manual mode with an admin `true` keeps it.
    assert labels.cpu_capacity_labels("amd", "amd", 4, "true", True)[labels.MANAGED] == "true"


def test_cpu_capacity_count_is_ceiling_and_positive() -> None:
    got = labels.cpu_capacity_labels("generic", "generic", Fraction(15500, 1000), None, False)
    assert got == {
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/generic": "true",
        "general.feature.gpustack.ai/generic.count": "16",
    }
    no_cpu = labels.cpu_capacity_labels("amd", "amd-25-1", 0, None, False)
    assert "general.feature.gpustack.ai/amd-25-1.count" not in no_cpu


@pytest.mark.parametrize(
    ("existing", "manual", "expected"),
    [
        (None, False, "true"),
        (None, True, None),
        ("false", False, "false"),
        ("true", True, "true"),
        ("false", True, "false"),
    ],
)
def test_managed_label_value(existing: str | None, manual: bool, expected: str | None) -> None:
    assert labels.managed_label_value(existing, manual) == expected


def test_is_managed() -> None:
    assert labels.is_managed({"gpustack.ai/managed": "true"})
    assert not labels.is_managed({"gpustack.ai/managed": "false"})
    assert not labels.is_managed({})


def test_accelerator_keys_of(table: ManufacturerTable) -> None:
    node = {
        A + "nvidia": "true",
        A + "nvidia-tesla-t4": "true",
        A + "nvidia-tesla-t4.count": "4",
        A + "nvidia-h100": "true",
        A + "acme-x1": "true",
        A + "nvidia-off": "false",
        A + "nvidia-": "true",
        "general.feature.gpustack.ai/amd-25-1": "true",
    }
    assert labels.accelerator_keys_of(node, table) == ["nvidia-h100", "nvidia-tesla-t4"]
    assert labels.accelerator_keys_of({}, table) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Tesla T4", "Tesla-T4"),
        ("580.126.09", "580.126.09"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("Intel(R) Data Center GPU Max 1550", "Intel-R--Data-Center-GPU-Max-1550"),
        ("  padded  ", "padded"),
        ("(x)", "x"),
        ("", ""),
        ("!!!", ""),
        ("a" * 70, "a" * 63),
        ("a" * 62 + " b", "a" * 62),
        ("Über", "ber"),
    ],
)
def test_sanitize_label_value(value: str, expected: str) -> None:
    assert sanitize_label_value(value) == expected


@given(st.text())
def test_sanitized_values_are_always_valid(value: str) -> None:
    clean = sanitize_label_value(value)
    assert is_label_value(clean)
    assert sanitize_label_value(clean) == clean


@given(st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True))
def test_valid_values_pass_unchanged(value: str) -> None:
    assert sanitize_label_value(value) == value


def test_key_builders() -> None:
    assert labels.accelerator_feature_key("nvidia-t4") == A + "nvidia-t4"
    assert labels.general_feature_key("amd-25-1") == "general.feature.gpustack.ai/amd-25-1"
    assert labels.count_key(A + "nvidia-t4") == A + "nvidia-t4.count"
    assert labels.capacity_key(A + "nvidia-t4") == A + "nvidia-t4.capacity"
    assert labels.note_key("cpuDetail") == "note.gpustack.ai/cpuDetail"
    assert labels.cpu_annotation("name") == labels.CPU_NAME == "feature.gpustack.ai/cpu-name"
    assert labels.bool_value(True) == "true"
    assert labels.bool_value(False) == "false"


def test_resolved() -> None:
    assert labels.resolved("@cpu.model.name") == ""
    assert labels.resolved(None) == ""
    assert labels.resolved("AMD") == "AMD"


def test_fit_label_keys() -> None:
    assert labels.sliced_fit_key("nvidia-t4") == ("sliced-max-free-units.fit.gpustack.ai/nvidia-t4")
    assert labels.shared_fit_key("nvidia-t4") == "shared-free-cards.fit.gpustack.ai/nvidia-t4"
    assert labels.is_fit_label_key(labels.sliced_fit_key("nvidia-t4"))
    assert labels.is_fit_label_key(labels.shared_fit_key("nvidia-t4"))
    assert not labels.is_fit_label_key(labels.SLICED_FIT_PREFIX)
    assert not labels.is_fit_label_key(labels.shared_fit_key("nvidia-t4-"))
    assert not labels.is_fit_label_key(labels.shared_fit_key("x" * 64))
    assert not labels.is_fit_label_key(A + "nvidia-t4")
