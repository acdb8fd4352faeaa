"""The status decorator: `sync` writes the InstanceType's whole status, `customize` relates what
it reads. See the package docstring for the rules and `views`/`detail` for the numbers.
"""

from __future__ import annotations

from chain.apis import (
    CHAIN_API,
    KUEUE_API,
    RESOURCE_FLAVORS_RESOURCE,
    SETTINGS_NAME,
    SETTINGS_RESOURCE,
    WORKER_API,
)
from chain.devices import DEVICES_RESOURCE
from chain.labels import RESOURCE_TYPE, RESOURCE_TYPE_NODES
from chain.names import local_queue_name
from chain.pools import PoolIdentity, pool_flavor_selector
from chain.queues import STOP_HOLD_AND_DRAIN
from chain.views import pool_devices_selector
from hooks.instancetype.detail import detail
from hooks.instancetype.request import (
    InstanceType,
    QueueState,
    pool_flavors,
    pool_nodes,
    pool_queue,
    read_instance_type,
)
from hooks.instancetype.views import AcceleratorViews, View, accelerator_views, cpu_view
from hooks.shell import CUSTOMIZE_REQUEST_SCHEMA, Obj, parse_shallow, related_settings, validate

CLUSTER_QUEUES_RESOURCE = "clusterqueues"

ACTIVE = "Active"
INACTIVE = "Inactive"
PENDING = "Pending"
TERMINATING = "instance type is terminating"


def selectors(
    identity: PoolIdentity, aware: bool
) -> tuple[dict[str, str] | None, dict[str, str] | None]:
    """(flavor selector, Devices selector) of a pool. A card pool without an accelerator group
    (which validation refuses) selects nothing: its labels alone would match every card flavor
    of the platform."""
    if identity.acceleratable and not identity.accelerator_group:
        return None, None
    labels = identity.schedule_labels(aware)
    return pool_flavor_selector(labels), pool_devices_selector(labels)


def phase(instance_type: InstanceType, queue: QueueState | None) -> tuple[str, str]:
    """(phase, phaseMessage): Kueue's word on the queue, which is what admits or not."""
    if instance_type.deleting:
        return INACTIVE, TERMINATING
    if queue is None:
        return PENDING, f"waiting for the ClusterQueue {instance_type.name} to be created"
    if queue.active is None:
        return PENDING, f"waiting for Kueue to report on the ClusterQueue {instance_type.name}"
    state = ACTIVE if queue.active.get("status") == "True" else INACTIVE
    return state, str(queue.active.get("message") or "")


def sync(body: Obj) -> Obj:
    """`/sync`: the complete status, replacing what is there (never null: a request this hook
    cannot read is a 400, and the status stays as it was)."""
    request = parse_shallow(body)
    instance_type = read_instance_type(request.object, "$.object")
    identity = instance_type.identity
    aware = related_settings(request).instance_type_aware_cpu_manufacturer
    flavor_selector, devices_selector = selectors(identity, aware)
    queue = pool_queue(request, instance_type.name)
    flavors = pool_flavors(request, flavor_selector, identity.acceleratable)
    nodes = pool_nodes(request, devices_selector, identity.accelerator_group)

    # A draining queue admits nothing and evicts what it had: every view reads zero.
    draining = queue is not None and queue.stop_policy == STOP_HOLD_AND_DRAIN
    views = AcceleratorViews() if draining else accelerator_views(nodes)
    cpu = View()
    if queue is not None and not draining:
        cpu = cpu_view(queue.cpu_quota, queue.cpu_reserved, queue.node_cores)
    state, message = phase(instance_type, queue)
    status: Obj = {
        "detail": detail(identity, aware, flavors[0] if flavors else None, nodes),
        "entrance": local_queue_name(instance_type.name),
        "phase": state,
        "phaseMessage": message,
        **views.render(),
        "cpu": cpu.render(),
        "acceleratorSummary": views.summary(),
        "cpuSummary": cpu.summary(),
        "partitionSummary": views.partition_summary(),
    }
    return {"status": status}


def customize(body: Obj) -> Obj:
    """Relate the pool's Devices and flavors, its ClusterQueue and the settings singleton.

    The answer is cached per InstanceType generation, so it depends on the spec alone: the
    selectors are the ones without CPU awareness, which every aware selector narrows; `sync`
    applies the narrower one when the setting is on (as the queue hook does).
    """
    validate(body, CUSTOMIZE_REQUEST_SCHEMA)
    instance_type = read_instance_type(body["parent"], "$.parent")
    flavors, devices = selectors(instance_type.identity, aware=False)
    rules: list[Obj] = []
    if devices is not None:
        rules.append(
            {
                "apiVersion": WORKER_API,
                "resource": DEVICES_RESOURCE,
                "labelSelector": {"matchLabels": devices},
            }
        )
    if flavors is not None:
        rules.append(
            {
                "apiVersion": KUEUE_API,
                "resource": RESOURCE_FLAVORS_RESOURCE,
                "labelSelector": {"matchLabels": {RESOURCE_TYPE: RESOURCE_TYPE_NODES, **flavors}},
            }
        )
    rules += [
        {
            "apiVersion": KUEUE_API,
            "resource": CLUSTER_QUEUES_RESOURCE,
            "names": [instance_type.name],
        },
        {"apiVersion": CHAIN_API, "resource": SETTINGS_RESOURCE, "names": [SETTINGS_NAME]},
    ]
    return {"relatedResources": rules}
