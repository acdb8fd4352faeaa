"""Kubernetes' syntax rules for the strings we put into object metadata and resource lists.

Every key and name this package builds ends up in a label, a label value, a resource name or an
object name; an invalid one makes the API server reject the whole object, so builders check here
instead of finding out from a failed write.
"""

from __future__ import annotations

import re

LABEL_VALUE_MAX = 63
NAME_MAX = 63
"""Limit of the name part of a qualified name (label keys, extended resources)."""
SUBDOMAIN_MAX = 253

_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_subdomain(value: str) -> bool:
    """True for an RFC 1123 subdomain (most object names, key prefixes)."""
    return len(value) <= SUBDOMAIN_MAX and bool(_DNS_SUBDOMAIN.fullmatch(value))


def is_qualified_name(key: str) -> bool:
    """True for `[prefix/]name`: a valid label key or extended resource name."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_dns_subdomain(prefix):
        return False
    return len(name) <= NAME_MAX and bool(_NAME_PART.fullmatch(name))
