"""The stop rules: the two queue writes no Metacontroller hook can make.

- **A chain ClusterQueue being deleted is drained** (`stopPolicy: HoldAndDrain`): Kueue never
  evicts on delete by itself, so a queue an admin deletes would stay Terminating for as long as
  anything runs in it, and Metacontroller never updates a child pending deletion.
- **An InstanceType whose queue is stopped by hand (Hold or HoldAndDrain) is marked
  `spec.inactive: true`** (upstream's one-way, sticky backfill): the pool stays inactive until
  an admin clears it. The queue hook, which may write no spec, keeps the stop in the meantime
  and records its own decision on the queue so a hand-set stop can be told from its own. The
  hook's own drain of a pool that lost every flavor marks nothing: the pool reopens when its
  flavors return, as after an uninstall and reinstall of the node agents
  (`chain.queues.backfill_inactive`).

The lifecycle keeper (`verdictdriver.lifecycle`) makes these writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from chain.apis import CLUSTER_QUEUE, INSTANCE_TYPE, KUEUE_API, WORKER_API
from chain.queues import STOP_HOLD_AND_DRAIN, backfill_inactive, drain_on_delete
from kubeapi import Obj
from verdictdriver.patch import Patch, version_of


def _owner(queue: Obj) -> str:
    """The InstanceType a queue belongs to: its controller reference, else its own name (the
    queue hook names a queue after its type)."""
    meta = queue.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == INSTANCE_TYPE:
            return str(ref.get("name"))
    return str(meta.get("name"))


def stop_writes(queues: Iterable[Obj], instance_types: Mapping[str, Obj]) -> list[Patch]:
    """What the keeper writes for these queues and types (by name), in queue order."""
    writes: list[Patch] = []
    for queue in queues:
        name = str((queue.get("metadata") or {}).get("name"))
        if drain_on_delete(queue):
            drain: Obj = {
                "metadata": {"resourceVersion": version_of(queue)},
                "spec": {"stopPolicy": STOP_HOLD_AND_DRAIN},
            }
            why = "deleted: drain it so Kueue can let it go"
            writes.append(Patch(KUEUE_API, CLUSTER_QUEUE, name, drain, why))
            continue
        owner = instance_types.get(_owner(queue))
        if owner is not None and backfill_inactive(queue, owner):
            patch: Obj = {
                "metadata": {"resourceVersion": version_of(owner)},
                "spec": {"inactive": True},
            }
            stop = (queue.get("spec") or {}).get("stopPolicy")
            why = f"its queue {name} is stopped ({stop}): inactive until an admin clears it"
            type_name = str(owner["metadata"]["name"])
            writes.append(Patch(WORKER_API, INSTANCE_TYPE, type_name, patch, why))
    return writes
