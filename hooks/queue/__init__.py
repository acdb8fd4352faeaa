"""InstanceTypes to ClusterQueues: one isolated Kueue queue per pool, drained before it goes.

Target: every InstanceType (`worker.gpustack.ai/v1alpha1`). Attachment: the ClusterQueue of the
same name (InPlace). Related (customize): the pool's ResourceFlavors (`resource.gpustack.ai/type=
nodes` plus the pool's flavor selector), the `gpustack-node-devices` AdmissionCheck, and the
Settings singleton. The hook never writes the InstanceType's spec or status, only the one
annotation below.

Rules:

- Labels: the pool's schedule labels plus `resource.gpustack.ai/type=instancetypes`. Spec:
  `namespaceSelector: {}`, no cohort, preemption that never reclaims or borrows.
- One resource group over the pool's live flavors (a flavor with a deletionTimestamp counts as
  absent), smallest per-node count first, then by name. Accelerated pools cover only
  `credits.gpustack.ai/<mfr>` with nominal = capacity x 1,600,000; CPU pools only `cpu` with
  nominal = capacity cores.
- `admissionChecksStrategy` names `gpustack-node-devices` on accelerated pools while
  `instance-type-derived-from-node` is on and only once that check is Active (Kueue stops every
  queue naming a check that is not).
- `stopPolicy`: Hold while the type is inactive (`spec.inactive`), None otherwise. A queue with
  no flavors at all (and nothing to drain) is empty and on Hold.
- The pool loses every flavor while the queue has groups: with
  `instance-type-drain-when-no-flavors` (default) the queue goes HoldAndDrain, and once Kueue
  shows the stopped queue empty the groups go and the empty queue is held. The type is not
  marked inactive. With the setting off it gates the drain and nothing else (upstream waits and
  requeues): the queue keeps its groups and its stop policy while workloads hold quota, then its
  groups go and the empty queue is held; nothing is evicted.
- Flavors come back (also midway through a drain): the groups come back and the queue reopens
  (None, or Hold while the type is inactive). A pool's flavors go whenever its nodes lose their
  accelerator labels, which an uninstall of the node agents causes while the cards stay, so a
  drain for lack of flavors lasts only as long as its cause (upstream reactivates what it
  drained).
- A stop someone else set on the queue (an admin's Hold or HoldAndDrain) is never undone: the
  hook writes its own decision beside the stop (`schedule.gpustack.ai/stop-policy` on the
  queue), and a stop policy that differs from it is someone else's, kept as long as it stands.
- More than 64 flavors (Kueue's limit per resource group), or an accelerated type whose
  `acceleratorGroup` names no known manufacturer: the queue keeps its last groups (or, having
  none, stays empty on Hold) and the type carries the reason.
- Finalize (the InstanceType is deleted): the queue goes HoldAndDrain; once Kueue shows it
  drained it is left out of the answer, so Metacontroller deletes it; the InstanceType is
  released (`finalized: true`) only once the queue is no longer observed.

Two writes no hook may make are the lifecycle keeper's (`verdictdriver.lifecycle`, rules in
`verdictdriver.stops`; credentialed, run by the verdict driver): it marks a type
`spec.inactive: true` once its queue is stopped by hand, held or drained (upstream's sticky
backfill: the pool stays inactive until an admin clears it), and it drains a chain queue an
admin deletes
(Kueue never evicts on delete, and Metacontroller never updates a child pending deletion); the
type, still alive, then gets its queue back.

The hook writes one annotation on the InstanceType (decorators may write annotations; a key is
removed only when answered as null, so the hook answers it on every sync):
`schedule.gpustack.ai/queue-problem=<Reason>: <message>`: why the queue does not have the pool's
flavors (`TooManyFlavors`, `UnknownManufacturer`); removed once the reason is gone.

See `docs/queues.md` for the operator's view.
"""
