from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.normalize import normalize_name, strip_cpu_cruft


@pytest.mark.parametrize(
    ("name", "prefix", "max_length", "strip", "expected"),
    [
        # docs/design/vectors.md, "NormalizeName".
        ("AMD Instinct MI300X OAM", "amd", 49, False, "instinct-mi300x-oam"),
        ("Ascend910B2", "ascend", 46, False, "910b2"),
        ("310P3", "ascend", 46, False, "310p3"),
        ("MXC500", "metax", 47, False, "mxc500"),
        ("NVIDIA A100", "nvidia", 46, False, "a100"),
        ("NVIDIA H100 80GB HBM3", "nvidia", 46, False, "h100-80gb-hbm3"),
        ("Tesla 4", "nvidia", 46, False, "tesla-4"),
        ("Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz", "intel", 0, True, "xeon-platinum-8358"),
        ("Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz", "intel", 10, True, "xeon-plati"),
        ("Intel(R) Core(TM) i9-14900K", "intel", 0, True, "core-i9-14900k"),
        ("Intel(R) Core(TM) i9-14900K", "intel", 0, False, "r-coretm-i9-14900k"),
        ("AMD EPYC 7763 64-Core Processor", "amd", 0, True, "epyc-7763"),
        ("AMD EPYC 7763 64-Core Processor", "amd", 0, False, "epyc-7763-64-core-processor"),
        ("AMD Ryzen 9 7950X 16-Core Processor", "amd", 0, True, "ryzen-9-7950x"),
        ("13th Gen Intel(R) Core(TM) i9-13900K", "intel", 0, True, "core-i9-13900k"),
        ("NVIDIA", "nvidia", 46, False, ""),
        ("", "nvidia", 46, False, ""),
        ("   ", "", 0, False, ""),
        # The quirks the spec names: the prefix trim is by characters and may fire again.
        ("AMD64 Accelerator", "amd", 0, False, "64-accelerator"),
        ("NVIDIA NVIDIA T4", "nvidia", 0, False, "t4"),
        # Multi-word brands are never trimmed.
        ("Moore Threads MTT S4000", "mthreads", 0, False, "moore-threads-mtt-s4000"),
    ],
)
def test_vectors(name: str, prefix: str, max_length: int, strip: bool, expected: str) -> None:
    assert normalize_name(name, prefix, max_length, strip) == expected


def test_separators() -> None:
    assert normalize_name("--a__b..c--", "", 0) == "a_b.c"
    assert normalize_name("A  B", "", 0) == "a-b"
    # Only one trailing separator is dropped, and a cut never leaves one.
    assert normalize_name("abc-def", "", 4) == "abc"
    assert normalize_name("Über GPU™ 5", "", 0) == "ber-gpu-5"


def test_prefix_is_case_insensitive() -> None:
    assert normalize_name("nvidia A10", "NVIDIA", 0) == "a10"


def test_budget_counts_after_prefix_clear() -> None:
    # The prefix fills the buffer to its own length and is cleared before the budget check...
    assert normalize_name("NVIDIA A100", "nvidia", 6) == "a100"
    # ...but a budget shorter than the prefix stops before the prefix is ever complete.
    assert normalize_name("NVIDIA A100 80GB", "nvidia", 3) == "nvi"


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", "Intel Xeon Gold 6348"),
        ("Genuine Intel(R) CPU 0000 @ 2.20GHz", "Intel CPU 0000"),
        ("12th Gen Intel(R) Core(TM) i7-12700", "Intel Core i7-12700"),
        ("AMD EPYC 9654 96-Core Processor", "AMD EPYC 9654"),
        ("AMD Ryzen Threadripper 3990X 64-Cores", "AMD Ryzen Threadripper 3990X"),
        ("Neoverse-N1", "Neoverse-N1"),
    ],
)
def test_strip_cpu_cruft(raw: str, clean: str) -> None:
    assert strip_cpu_cruft(raw) == clean


_SEPARATORS = set("-_.")


@given(
    st.text(max_size=80),
    st.sampled_from(["", "amd", "nvidia", "intel", "ascend"]),
    st.integers(min_value=-1, max_value=70),
    st.booleans(),
)
def test_output_shape(name: str, prefix: str, max_length: int, strip: bool) -> None:
    out = normalize_name(name, prefix, max_length, strip)
    assert all(c.isascii() and (c.islower() or c.isdigit() or c in _SEPARATORS) for c in out)
    if out:
        assert out[0] not in _SEPARATORS
        assert out[-1] not in _SEPARATORS
    assert not any(a in _SEPARATORS and b in _SEPARATORS for a, b in itertools.pairwise(out))
    if max_length > 0:
        assert len(out) <= max_length
    assert normalize_name(out, "", 0) == out
