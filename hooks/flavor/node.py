"""The Node decorator: a node's chain labels and its NodeFlavors summary.

Target: every Node. Related: the Settings singleton (absent = defaults). Answer:

- `labels`: `gpustack.ai/managed=true` (unless `node-management-manual`; a value already on the node
  is echoed, never replaced), the CPU maker and CPU key presence labels, `<gKey>.count`,
  `topology.gpustack.ai/profile` (the `topology-levels` profile when the node carries a label for
  every level, else the hostname-only one: docs/topology.md, "Topology profiles"), and
  `feature.gpustack.ai/acceleratable=false` on a node that does not say `true`, so CPU flavors
  that pin `false` match it.
- `attachments`: one NodeFlavors summary when the node is managed and feeds some flavor.

Metacontroller only sets the label keys an answer lists and deletes those listed as null; it never
removes a key the answer stops listing. So a CPU key label this hook wrote earlier (the node's CPU
identity resolved later, or its CPU count vanished) is returned as null once it no longer applies.
`feature.gpustack.ai/acceleratable=true` is the device manager's (via NFD): it is never listed.

The first sync sees a Node without any of these labels, so the summary is computed from the node's
labels with this answer's labels applied. Nothing read here moves on a heartbeat (conditions,
allocatable, resourceVersion), so heartbeats re-send an identical summary and Metacontroller
writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from chain.apis import CHAIN_API, CORE_V1, NODE, SETTINGS_NAME, SETTINGS_RESOURCE
from chain.keys import CpuKey, node_cpu_key
from chain.labels import (
    ACCELERATABLE,
    ARCH,
    FALSE,
    GENERAL_PREFIX,
    MANAGED,
    OS,
    TOPOLOGY_PROFILE,
    TRUE,
    accelerator_feature_key,
    cpu_capacity_labels,
    is_managed,
)
from chain.manufacturers import default_manufacturers
from chain.pools import node_flavors
from chain.profiles import node_levels, node_profile
from chain.quantity import parse_quantity
from chain.settings import Settings
from hooks.flavor.summary import DEVICE_FIELDS, FlavorEntry, NodeSummary, cpu_facts
from hooks.readers import related_settings
from hooks.request import BadRequest, DecoratorRequest, Obj

Labels = dict[str, str | None]


def customize(parent: Obj) -> Obj:
    """Relate the Settings singleton; the answer depends on nothing in the Node (it is cached)."""
    rule = {"apiVersion": CHAIN_API, "resource": SETTINGS_RESOURCE, "names": [SETTINGS_NAME]}
    return {"relatedResources": [rule]}


def sync(request: DecoratorRequest) -> Obj:
    node = request.object
    if node["kind"] != NODE or node["apiVersion"] != CORE_V1:
        raise BadRequest("$.object.kind", f"expected a v1 Node, got {node['kind']}")
    settings = related_settings(request)
    if request.finalizing:
        # The node is going away or leaving the decorator's selector: drop its summary so its
        # capacity leaves the pools, and leave its labels to whoever comes next.
        return {"labels": {}, "attachments": [], "finalized": True}

    meta = node["metadata"]
    labels: Mapping[str, str] = meta.get("labels") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    cpu = node_cpu_key(labels, annotations)
    answer = node_labels(labels, cpu, _cpu_capacity(node), settings)
    effective = {**labels, **{k: v for k, v in answer.items() if v is not None}}
    for key in (k for k, v in answer.items() if v is None):
        effective.pop(key, None)

    summary = summarize(meta["name"], effective, annotations, cpu, settings)
    return {"labels": answer, "attachments": [summary.to_object()] if summary else []}


def node_labels(
    labels: Mapping[str, str], cpu: CpuKey, cores: Fraction, settings: Settings
) -> Labels:
    """The labels this hook owns on a node; null for CPU key labels that no longer apply."""
    # An empty value counts as absent, as upstream reads it: only a real value is the admin's.
    existing_managed = labels.get(MANAGED) or None
    answer: Labels = dict(
        cpu_capacity_labels(
            cpu.manufacturer, cpu.key, cores, existing_managed, settings.node_management_manual
        )
    )
    answer[TOPOLOGY_PROFILE] = node_profile(settings.topology_levels, labels)
    if labels.get(ACCELERATABLE) != TRUE:
        answer[ACCELERATABLE] = FALSE
    for key in labels:
        if key.startswith(GENERAL_PREFIX) and key not in answer:
            answer[key] = None
    return answer


def summarize(
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    cpu: CpuKey,
    settings: Settings,
) -> NodeSummary | None:
    """The node's summary, or None when it feeds no flavor (unmanaged, or nothing counted).

    A node without os/arch labels feeds nothing: its flavor could not pin it.
    """
    if not is_managed(labels) or not labels.get(OS) or not labels.get(ARCH):
        return None
    accelerated = labels.get(ACCELERATABLE) == TRUE
    entries = []
    for identity in node_flavors(labels, cpu, default_manufacturers()):
        if not identity.acceleratable:
            # instance-type-mixed-on-node=false: an accelerated node's CPUs serve no CPU pool.
            if accelerated and not settings.instance_type_mixed_on_node:
                continue
            entries.append(FlavorEntry(identity))
            continue
        key = accelerator_feature_key(identity.accelerator_key)
        device = {f: v for f in DEVICE_FIELDS if (v := labels.get(f"{key}.{f}", ""))}
        entries.append(FlavorEntry(identity, device))
    if not entries:
        return None
    facts = cpu_facts(cpu.manufacturer, annotations)
    levels = node_levels(settings.topology_levels, labels)
    return NodeSummary(name, accelerated, facts, tuple(entries), levels)


def _cpu_capacity(node: Obj) -> Fraction:
    """`status.capacity.cpu` (0 while not reported); a malformed one is a bad request, since
    reading it as 0 would strip the node's CPU count label."""
    path, value = "$.object", node
    for step in ("status", "capacity"):
        path, found = f"{path}.{step}", value.get(step)
        if found is None:
            return Fraction(0)
        if not isinstance(found, dict):
            raise BadRequest(path, "expected an object")
        value = found
    raw = value.get("cpu")
    if raw is None:
        return Fraction(0)
    try:
        return parse_quantity(str(raw))
    except ValueError as err:
        raise BadRequest(f"{path}.cpu", str(err)) from err
