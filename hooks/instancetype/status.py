"""The status decorator: `sync` writes the InstanceType's whole status, `customize` relates what
it reads. See the package docstring for the rules and `views`/`detail` for the numbers.
"""

from __future__ import annotations

from chain.apis import (
    CHAIN_API,
    CLUSTER_QUEUES_RESOURCE,
    KUEUE_API,
    RESOURCE_FLAVORS_RESOURCE,
    SETTINGS_NAME,
    SETTINGS_RESOURCE,
)
from chain.conditions import generation_of, merge
from chain.labels import RESOURCE_TYPE, RESOURCE_TYPE_NODES
from chain.names import local_queue_name
from chain.pool_cards import POOL_CARDS_API, POOL_CARDS_RESOURCE
from chain.pool_conditions import PoolState, pool_conditions
from chain.pools import PoolIdentity, pool_flavor_selector
from chain.queues import STOP_HOLD_AND_DRAIN
from chain.views import AcceleratorViews, View, cpu_view, shown_views
from hooks.instancetype.detail import detail
from hooks.instancetype.request import (
    InstanceType,
    QueueState,
    pool_cards,
    pool_flavors,
    pool_queue,
    read_instance_type,
)
from hooks.readers import related_settings
from hooks.request import DecoratorRequest, Obj

ACTIVE = "Active"
INACTIVE = "Inactive"
PENDING = "Pending"
TERMINATING = "instance type is terminating"


def flavor_selector(identity: PoolIdentity, aware: bool) -> dict[str, str] | None:
    """The labels of a pool's flavors. A card pool without an accelerator group (which
    validation refuses) selects nothing: its labels alone would match every card flavor of the
    platform."""
    if identity.acceleratable and not identity.accelerator_group:
        return None
    return pool_flavor_selector(identity.schedule_labels(aware))


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


def sync(request: DecoratorRequest, now: str) -> Obj:
    """`/sync`: the complete status, replacing what is there (never null: a request this hook
    cannot read is a 400, and the status stays as it was). `now` (the shell's clock) is the
    transition time of a condition that changes in this answer."""
    instance_type = read_instance_type(request.object, "$.object")
    identity = instance_type.identity
    aware = related_settings(request).instance_type_aware_cpu_manufacturer
    queue = pool_queue(request, instance_type.name)
    flavors = pool_flavors(request, flavor_selector(identity, aware), identity.acceleratable)
    cards = pool_cards(request, instance_type.name)

    # A draining queue admits nothing and evicts what it had: every view reads zero.
    draining = queue is not None and queue.stop_policy == STOP_HOLD_AND_DRAIN
    views = AcceleratorViews() if draining else cards.views
    cpu = View()
    if queue is not None and not draining:
        cpu = cpu_view(queue.cpu_quota, queue.cpu_reserved, queue.node_cores)
    state, message = phase(instance_type, queue)
    pool = PoolState(
        phase=state,
        message=message,
        acceleratable=identity.acceleratable,
        views=views,
        cpu=cpu,
        terminating=instance_type.deleting,
        draining=draining,
        queue_reason=str(((queue.active or {}) if queue else {}).get("reason") or ""),
    )
    held = (request.object.get("status") or {}).get("conditions")
    generation = generation_of(request.object)
    status: Obj = {
        "detail": detail(identity, aware, flavors[0] if flavors else None, cards),
        "entrance": local_queue_name(instance_type.name),
        "phase": state,
        "phaseMessage": message,
        **shown_views(views, cpu),
        "conditions": merge(held, pool_conditions(pool), generation, now),
    }
    # Per topology domain (docs/topology.md, "Views"); a draining queue admits nothing.
    if cards.domains and not draining:
        status["topologyDomains"] = [domain.render() for domain in cards.domains]
        status["gangSummary"] = ",".join(domain.summary() for domain in cards.domains)
    return {"status": status}


def customize(parent: Obj) -> Obj:
    """Relate the pool's PoolCards and flavors, its ClusterQueue and the settings singleton.

    The answer is cached per InstanceType generation, so it depends on the spec alone: the
    flavor selector is the one without CPU awareness, which every aware selector narrows; `sync`
    applies the narrower one when the setting is on (as the queue hook does). The pool's nodes
    reach the hook only through its PoolCards (`chain.pool_cards`), named after the type.
    """
    instance_type = read_instance_type(parent, "$.parent")
    identity = instance_type.identity
    flavors = flavor_selector(identity, aware=False)
    rules: list[Obj] = []
    if identity.acceleratable and identity.accelerator_group:
        rules.append(
            {
                "apiVersion": POOL_CARDS_API,
                "resource": POOL_CARDS_RESOURCE,
                "names": [instance_type.name],
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
