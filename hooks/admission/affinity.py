"""Adding node requirements to a Pod spec's required node affinity (the card-count and fit pins).

Rules (docs/design/control-plane.md, "Workload fit pin", also used for the Pod's card-count pin): no
required affinity gets a single term; otherwise the requirements are ANDed into every term that has
expressions or fields. An empty term and a required selector with no terms are left alone (both are
the user's own statement, and widening or narrowing them would change its meaning), and a
requirement already present is not added twice, so pinning is idempotent.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hooks.request import Obj

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def greater_than(key: str, floor: int) -> Obj:
    """`<key> Gt <floor>`: the node label must hold an integer above `floor`."""
    return {"key": key, "operator": "Gt", "values": [str(floor)]}


def _object(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{path}: expected an object")
    return value


def with_requirements(affinity: Any, requirements: Sequence[Obj], path: str) -> Obj | None:
    """The affinity with `requirements` added, or None when nothing changes.

    `path` names the affinity field in ValueErrors about a malformed affinity.
    """
    out = copy.deepcopy(_object(affinity, path))
    node = _object(out.get("nodeAffinity"), f"{path}.nodeAffinity")
    out["nodeAffinity"] = node
    required = node.get(REQUIRED)
    if required is None:
        node[REQUIRED] = {"nodeSelectorTerms": [{"matchExpressions": list(requirements)}]}
        return out
    where = f"{path}.nodeAffinity.{REQUIRED}"
    terms = _object(required, where).get("nodeSelectorTerms") or []
    if not isinstance(terms, list):
        raise ValueError(f"{where}.nodeSelectorTerms: expected a list")
    changed = False
    for number, raw in enumerate(terms):
        term = _object(raw, f"{where}.nodeSelectorTerms[{number}]")
        expressions = term.get("matchExpressions") or []
        if not isinstance(expressions, list):
            raise ValueError(f"{where}.nodeSelectorTerms[{number}].matchExpressions: not a list")
        if not expressions and not term.get("matchFields"):
            continue
        for requirement in requirements:
            if requirement not in expressions:
                expressions.append(dict(requirement))
                changed = True
        term["matchExpressions"] = expressions
    return out if changed else None
