"""Which Pods the ledger already holds: a Pod whose allocation record names every container
asking for a card is charged in the ledger, so a verdict no longer counts it as promised."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from chain import fields
from chain.labels import (
    KUEUE_PODSET,
    KUEUE_WORKLOAD,
)
from chain.ledger_rebuild import ALLOCATED_ANNOTATION, parse_allocated
from chain.manufacturers import ManufacturerTable
from chain.requests import read_containers

# --- which Pods the ledger already holds -------------------------------------------------------


def charged_pods(
    pods: Iterable[fields.Obj], hostnames: Mapping[str, str], table: ManufacturerTable
) -> Counter[tuple[str, str, str, str]]:
    """Pods whose allocation record names every container asking for a card, counted by
    (namespace, Workload, PodSet, hostname). An unreadable record holds nothing: the Pod then
    still counts as promised, which overstates what is taken rather than double-booking."""
    counted: Counter[tuple[str, str, str, str]] = Counter()
    for pod in pods:
        meta = fields.child(pod, "metadata", "")
        annotations = fields.child(meta, "annotations", "metadata")
        labels = fields.child(meta, "labels", "metadata")
        node = fields.string(fields.child(pod, "spec", ""), "nodeName", "spec")
        hostname = hostnames.get(node, "")
        workload = annotations.get(KUEUE_WORKLOAD)
        podset = labels.get(KUEUE_PODSET)
        if not hostname or not isinstance(workload, str) or not isinstance(podset, str):
            continue
        containers = read_containers(fields.child(pod, "spec", ""), "spec", table)
        asking = {c.name for c in containers if c.requests}
        if asking and asking <= _recorded(annotations.get(ALLOCATED_ANNOTATION)):
            namespace = fields.string(meta, "namespace", "metadata")
            counted[(namespace, workload, podset, hostname)] += 1
    return counted


def _recorded(raw: object) -> set[str]:
    """The containers a record names, read by the ledger's own parser: a record the ledger
    cannot count (`{"c": 5}`) names nobody here either, so its Pod stays promised rather than
    being counted by neither."""
    if not isinstance(raw, str):
        return set()
    try:
        return set(parse_allocated(raw))
    except ValueError:
        return set()
