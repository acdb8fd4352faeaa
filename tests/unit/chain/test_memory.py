from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chain.memory import format_group_memory, format_memory_label, memory_mib
from chain.quantity import MAX_LENGTH, QuantityError, parse_quantity


@pytest.mark.parametrize(
    ("mib", "expected"),
    [
        # docs/design/vectors.md, "formatMemory", and docs/design/node-agent.md, "Product names".
        (0, "0g"),
        (1, "1g"),
        (1024, "1g"),
        (1025, "1g"),
        (44280, "43g"),
        (15360, "15g"),
        (16384, "16g"),
        (143771, "140g"),
        (1023, "1g"),
        (1024 * 1024, "1t"),
        (1024 * 1024 * 3 - 1, "2t"),
    ],
)
def test_format_group_memory(mib: int, expected: str) -> None:
    assert format_group_memory(mib) == expected


@pytest.mark.parametrize(
    ("mib", "expected"),
    [
        # docs/design/node-agent.md, "Node labels": the `.memory` label.
        (15360, "15Gi"),
        (81920, "80Gi"),
        (196608, "192Gi"),
        (44280, "44280Mi"),
        (512, "512Mi"),
        (1024 * 1024, "1Ti"),
        (0, "0"),
    ],
)
def test_format_memory_label(mib: int, expected: str) -> None:
    assert format_memory_label(mib) == expected


@pytest.mark.parametrize(
    ("text", "mib"),
    [("15Gi", 15360), ("44280Mi", 44280), ("0", 0), ("1Ti", 1048576), ("1G", 953), ("1.5Gi", 1536)],
)
def test_memory_mib(text: str, mib: int) -> None:
    assert memory_mib(text) == mib


def test_memory_mib_rejects() -> None:
    with pytest.raises(ValueError):
        memory_mib("-1Gi")
    with pytest.raises(ValueError):
        memory_mib("lots")


@given(st.integers(min_value=0, max_value=2**40))
def test_label_round_trips(mib: int) -> None:
    assert memory_mib(format_memory_label(mib)) == mib


@given(st.integers(min_value=1024, max_value=2**40))
def test_group_memory_never_overstates(mib: int) -> None:
    text = format_group_memory(mib)
    assert memory_mib(text.upper() + "i") <= mib


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("2k", Fraction(2000)),
        ("1Ki", Fraction(1024)),
        ("1e3", Fraction(1000)),
        ("1E-3", Fraction(1, 1000)),
        ("+4", Fraction(4)),
        ("-4", Fraction(-4)),
        ("100n", Fraction(1, 10**7)),
        ("3u", Fraction(3, 10**6)),
        ("2M", Fraction(2 * 10**6)),
        ("1Ei", Fraction(2**60)),
    ],
)
def test_parse_quantity(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1gi", "1KiB", "1.2.3", "1 Gi", "0x10", "1\n", " 16 "])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["10e9999999", "1e31", "1e-31", "5E+100000"])
def test_parse_quantity_refuses_exponents_nothing_counts_in(text: str) -> None:
    """Kubernetes accepts them; computing 10^9999999 exactly would take seconds per request."""
    with pytest.raises(ValueError, match="exponent beyond"):
        parse_quantity(text)
    assert parse_quantity("1e30") == 10**30


def test_parse_quantity_refuses_numbers_too_long_to_read() -> None:
    with pytest.raises(ValueError):
        parse_quantity("1" * 10_000)


@pytest.mark.parametrize(
    ("text", "shown", "reason"),
    [
        ("10e9999999", "10e9999999", "exponent beyond 10^±30"),
        ("abc", "abc", "is not a quantity"),
        ("1" * 5000, "1" * 40 + "... (5000 chars)", "longer than any quantity the chain counts"),
    ],
)
def test_a_refused_quantity_is_a_typed_error_naming_the_value(
    text: str, shown: str, reason: str
) -> None:
    """Webhooks word it as a field error (`Invalid value: "<text>": <reason>`); a value of
    thousands of digits is shown cut, so no message quotes megabytes."""
    with pytest.raises(QuantityError) as refused:
        parse_quantity(text)
    assert refused.value.text == shown
    assert reason in refused.value.reason


def test_the_longest_quantity_read_holds_every_value_the_chain_counts() -> None:
    """10^30 in full and its finest nano fraction still read; a character more does not."""
    assert parse_quantity("1" + "0" * 30) == 10**30
    assert parse_quantity("1" + "0" * 30 + "." + "0" * 8 + "1") > 10**30
    with pytest.raises(QuantityError):
        parse_quantity("1" * (MAX_LENGTH + 1))
