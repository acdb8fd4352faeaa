"""What a Workload says about itself: where its check stands, whether it holds cards, and each
PodSet's accelerator demand with the flavor and nodes Kueue assigned it (a `Share`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from chain import fields
from chain.families import credits_manufacturer
from chain.manufacturers import ManufacturerTable
from chain.queues import NODE_DEVICES_CHECK
from chain.requests import PodDemand, pod_demands, read_containers
from chain.topology_assignment import hostname_domains


class State(enum.StrEnum):
    """A verdict's state, as the check's entry on the Workload carries it."""

    READY = "Ready"
    RETRY = "Retry"


# --- reading Workloads ------------------------------------------------------------------------


def _condition(workload: fields.Obj, kind: str) -> bool:
    status = fields.child(workload, "status", "")
    return any(
        item.get("type") == kind and item.get("status") == "True"
        for item, _ in fields.items(status, "conditions", "status")
    )


def check_state(workload: fields.Obj, check: str = NODE_DEVICES_CHECK) -> str:
    """The state of the named entry of `status.admissionChecks` ("" when absent)."""
    status = fields.child(workload, "status", "")
    for item, where in fields.items(status, "admissionChecks", "status"):
        if item.get("name") == check:
            return fields.string(item, "state", where)
    return ""


def is_active(workload: fields.Obj) -> bool:
    """Reserved, not evicted, not finished and not deactivated: Kueue still counts it."""
    spec = fields.child(workload, "spec", "")
    return (
        _condition(workload, "QuotaReserved")
        and not _condition(workload, "Evicted")
        and not _condition(workload, "Finished")
        and spec.get("active") is not False
    )


def needs_verdict(workload: fields.Obj) -> bool:
    """The check judges a Workload only while its quota is reserved and it is not admitted yet."""
    return is_active(workload) and not _condition(workload, "Admitted")


def holds_cards(workload: fields.Obj, check: str = NODE_DEVICES_CHECK) -> bool:
    """Its cards are taken: admitted, or this check already said Ready."""
    return is_active(workload) and (
        _condition(workload, "Admitted") or check_state(workload, check) == State.READY
    )


@dataclass(frozen=True)
class Share:
    """One PodSet's Pods on one node (or across the pool when `node` is "")."""

    role: str
    flavor: str
    node: str
    pods: int
    per_pod: tuple[PodDemand, ...]


def _credits_flavor(flavors: fields.Obj, table: ManufacturerTable) -> str:
    found = [str(name) for key, name in flavors.items() if credits_manufacturer(key, table)]
    return found[0] if len(found) == 1 else ""


def workload_shares(workload: fields.Obj, table: ManufacturerTable) -> list[Share]:
    """Each PodSet's accelerator demand with its assigned flavor and nodes."""
    assignments = {
        fields.string(item, "name", where): (item, where)
        for item, where in fields.items(
            fields.child(fields.child(workload, "status", ""), "admission", "status"),
            "podSetAssignments",
            "status.admission",
        )
    }
    shares = []
    for podset, where in fields.items(fields.child(workload, "spec", ""), "podSets", "spec"):
        role = fields.string(podset, "name", where)
        template = fields.child(podset, "template", where)
        containers = read_containers(
            fields.child(template, "spec", ""), f"{where}.template.spec", table
        )
        per_pod = tuple(pod_demands(containers))
        assignment, at = assignments.get(role, ({}, ""))
        pods = fields.integer(assignment, "count", at) or fields.integer(podset, "count", where)
        flavor = _credits_flavor(fields.child(assignment, "flavors", at), table)
        domains = hostname_domains(
            fields.child(assignment, "topologyAssignment", at), f"{at}.topologyAssignment", pods
        )
        if domains is None:
            shares.append(Share(role, flavor, "", pods, per_pod))
        else:
            shares.extend(Share(role, flavor, d.hostname, d.pods, per_pod) for d in domains)
    return shares
