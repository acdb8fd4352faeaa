"""Exact parsing of Kubernetes quantities (`15Gi`, `500m`, `1e3`).

Labels, notes and status fields carry sizes and counts as quantity strings; reading them through
floats would turn `0.1` CPU or a large byte count into a rounding error, so every value is exact.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from chain.fields import shown

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:(?P<exponent>[eE][+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)"
)

MIB = 2**20
# Kubernetes accepts `1e9999999`; nothing the chain counts is beyond 10^30 or below 10^-30 (a
# nano-unit is 10^-9), and computing 10^9999999 exactly takes seconds. Larger exponents are
# refused as not a usable quantity.
MAX_EXPONENT = 30
# The longest quantity string read. 10^30 written out in full takes 31 characters and its finest
# nano fraction a dozen more; anything longer is beyond what the chain counts, and would
# otherwise reach Python's 4,300-digit integer limit (or a refusal quoting megabytes) instead of
# a refusal that names the value.
MAX_LENGTH = 64


class QuantityError(ValueError):
    """A string that is not a quantity the chain can count: malformed, or beyond 10^±30.

    A ValueError, so every reader that names its field around `parse_quantity` keeps working;
    `text` is the value (shortened when long) and `reason` the rule it broke, so a webhook can
    word the refusal as Kubernetes does (`Invalid value: "<text>": <reason>`).
    """

    def __init__(self, text: str, reason: str) -> None:
        self.text = shown(text)
        self.reason = reason
        super().__init__(f"{self.text!r} {reason}")


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string; QuantityError if it is not one the chain counts."""
    if len(text) > MAX_LENGTH:
        raise QuantityError(text, f"is longer than any quantity the chain counts ({MAX_LENGTH})")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(text, "is not a quantity (e.g. 2, 500m, 16Gi)")
    value = Fraction(match["number"])
    if match["exponent"] is not None:
        # Compared as written, before any power is computed: `10e9999999` costs nothing here.
        exponent = int(match["exponent"][1:])
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(
                text, f"has an exponent beyond 10^±{MAX_EXPONENT}, more than the chain counts"
            )
        return value * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


_SCALES = (("", 1), ("m", 10**3), ("u", 10**6), ("n", 10**9))


def format_quantity(value: int | Fraction) -> str:
    """A decimal quantity string: whole numbers plain (`72`), fractions in the coarsest exact
    SI suffix (`68500m`), anything finer rounded up to nanos, as Kubernetes rounds."""
    if type(value) is int:
        return str(value)  # the common case, without a Fraction (`bool` is not taken here)
    amount = Fraction(value)
    for suffix, scale in _SCALES:
        scaled = amount * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{math.ceil(amount * 10**9)}n"
