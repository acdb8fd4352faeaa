from __future__ import annotations

import pytest

from chain.manufacturers import ManufacturerTable, default_manufacturers, manufacturers

EXPECTED = {
    # name: (pci vendor, base resource, runtime class, partition kind)
    "amd": ("1002", "amd.com/gpu", "amd", ""),
    "ascend": ("19e5", "huawei.com/npu", "ascend", ""),
    "cambricon": ("cabc", "cambricon.com/mlu", "cambricon", ""),
    "hygon": ("1d94", "hygon.com/dcu", "hygon", "mig"),
    "iluvatar": ("1e3e", "iluvatar.com/gpu", "iluvatar", ""),
    "metax": ("9999", "metax-tech.com/gpu", "metax", ""),
    "mthreads": ("1ed5", "mthreads.com/gpu", "mthreads", ""),
    "nvidia": ("10de", "nvidia.com/gpu", "nvidia", "mig"),
    "thead": ("1ded", "alibabacloud.com/ppu", "", "mig"),
}


def test_builtin_table(table: ManufacturerTable) -> None:
    assert sorted(table) == sorted(EXPECTED)
    assert len(table) == 9
    for name, (vendor, base, runtime, kind) in EXPECTED.items():
        entry = table[name]
        assert (entry.pci_vendor_id, entry.resource_name, entry.runtime_name) == (
            vendor,
            base,
            runtime,
        )
        assert entry.partition_kind == kind
        assert table.by_resource(base) == entry
    assert table.by_resource("example.com/foo") is None
    assert "acme" not in table
    with pytest.raises(KeyError):
        table["acme"]


def test_env_overrides() -> None:
    env = {
        "GPUSTACK_NVIDIA_PCI_VENDOR_ID": "0302_10de",
        "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME": "example.com/gpu",
        "GPUSTACK_NVIDIA_ACCELERATABLE_RUNTIME_NAME": "nvidia-cdi",
        "GPUSTACK_AMD_PARTITION_KIND": "cpx",
        "GPUSTACK_ACME_PCI_VENDOR_ID": "ffff",
    }
    table = manufacturers(env)
    nvidia = table["nvidia"]
    assert nvidia.pci_vendor_id == "0302_10de"
    assert nvidia.pci_vendor == "10de"
    assert nvidia.resource_name == "example.com/gpu"
    assert nvidia.runtime_name == "nvidia-cdi"
    assert table.by_resource("example.com/gpu") == nvidia
    assert table.by_resource("nvidia.com/gpu") is None
    assert table["amd"].partition_kind == "cpx"
    assert "acme" not in table


def test_empty_override_keeps_default() -> None:
    table = manufacturers({"GPUSTACK_NVIDIA_PARTITION_KIND": ""})
    assert table["nvidia"].partition_kind == "mig"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "gpu"}, "AMD_ACCELERATABLE_RESOURCE_NAME"),
        (
            {"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "amd.com/bad name"},
            "AMD_ACCELERATABLE_RESOURCE_NAME",
        ),
        ({"GPUSTACK_NVIDIA_PARTITION_KIND": "MIG-x"}, "NVIDIA_PARTITION_KIND"),
    ],
)
def test_bad_override_names_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ValueError, match=variable):
        manufacturers(env)


def test_two_manufacturers_on_one_base_rejected() -> None:
    with pytest.raises(ValueError, match="share one base"):
        manufacturers({"GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME": "nvidia.com/gpu"})


def test_default_reads_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    default_manufacturers.cache_clear()
    monkeypatch.setenv("GPUSTACK_THEAD_ACCELERATABLE_RUNTIME_NAME", "ppu")
    try:
        first = default_manufacturers()
        monkeypatch.setenv("GPUSTACK_THEAD_ACCELERATABLE_RUNTIME_NAME", "changed")
        assert default_manufacturers() is first
        assert first["thead"].runtime_name == "ppu"
    finally:
        default_manufacturers.cache_clear()
