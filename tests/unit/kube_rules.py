"""Kubernetes' naming rules as test oracles: what the chain generates (names, label values)
must pass them. The chain itself never needs to ask, so they live here, not in `chain/`."""

from __future__ import annotations

import re

from chain.validation import LABEL_VALUE_MAX, NAME_MAX

_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_label_value(value: str) -> bool:
    """True if `value` may be a label value (empty is allowed)."""
    return value == "" or (len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE.fullmatch(value)))


def is_dns_label(value: str) -> bool:
    """True for an RFC 1123 label (namespace, LocalQueue-style names)."""
    return len(value) <= NAME_MAX and bool(_DNS_LABEL.fullmatch(value))
