"""Exact parsing of Kubernetes quantities (`15Gi`, `500m`, `1e3`).

Labels, notes and status fields carry sizes and counts as quantity strings; reading them through
floats would turn `0.1` CPU or a large byte count into a rounding error, so every value is exact.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

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


def parse_quantity(text: str) -> Fraction:
    """The exact value of a quantity string; ValueError if it is not one."""
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    value = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"][1:])
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"{text!r}: exponent beyond 10^±{MAX_EXPONENT}")
        return value * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


_SCALES = (("", 1), ("m", 10**3), ("u", 10**6), ("n", 10**9))


def format_quantity(value: int | Fraction) -> str:
    """A decimal quantity string: whole numbers plain (`72`), fractions in the coarsest exact
    SI suffix (`68500m`), anything finer rounded up to nanos, as Kubernetes rounds."""
    amount = Fraction(value)
    for suffix, scale in _SCALES:
        scaled = amount * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{math.ceil(amount * 10**9)}n"
