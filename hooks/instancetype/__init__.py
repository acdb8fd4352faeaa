"""InstanceType status (the four views) and InstanceType admission (defaulting, validation).

Status: DecoratorController `gpustack-instancetype-status` on every InstanceType (hooks `/sync`
and `/customize`, Service `gpustack-hook-instancetype`). No attachments: the answer is only
`status`, always complete (Metacontroller replaces the whole status with it) and never null; a
request the hook cannot read gets a 400 naming the field, so the last good status stays.

Related (customize, cached per generation, so from the spec alone, without CPU awareness; sync
narrows with the `instance-type-aware-cpu-manufacturer` setting, as the queue hook does):

- the pool's `PoolCards`, by the type's name: the pool's nodes tallied by the pool-cards keeper
  (`chain.pool_cards`) from the `Devices` that carry the pool's labels (`poolDevicesSelector`:
  its feature keys, os/arch and `gpustack.ai/managed=true`, narrowed by CPU awareness); a CPU
  pool relates none;
- the pool's ResourceFlavors (`resource.gpustack.ai/type=nodes` + the pool's flavor selector);
- the ClusterQueue of the same name, and the Settings singleton.

Status fields:

- `detail`: descriptors of the pool (see `detail`).
- `entrance`: the pool's LocalQueue name in every namespace (`gpustack-fnv64-<fnv64a(name)>`).
- `phase`/`phaseMessage`: the queue's `Active` condition (`Active`/`Inactive` and its message);
  `Pending` while the queue does not exist or Kueue has not reported on it; `Inactive`,
  "instance type is terminating" while the InstanceType is being deleted.
- `accelerator` (EX), `acceleratorShared` (SH), `acceleratorSliced` (SL),
  `acceleratorPartitioned` (PT, with `allocatedProfiles`/`remainingProfiles`), `cpu`: each
  `{onceMaxRequest, remaining, capacity}` as quantity strings (see `chain.views`). While the
  queue is `HoldAndDrain` every view reads zero.
- `acceleratorSummary` (`Accelerator(EX/SH/SL/PT)` column: four `onceMaxRequest/remaining`),
  `cpuSummary` (`CPU` column), `partitionSummary` (`-o wide` `Partitions` column:
  `<profile>=<remaining>,...`; a printer column shows only a jsonPath's first match, so the
  profile list is written out as one string).
- `conditions`: `Active`, `Available` and `Ready` (`chain.pool_conditions`; docs/queues.md,
  "Conditions of the InstanceType"), each keeping the `lastTransitionTime` the request's
  InstanceType holds while its status stays; the app passes the clock for one that flips.

Admission: `/mutate` and `/validate` (see `webhook`), served over TLS by their own Deployment.

Catalog: DecoratorController `gpustack-admission-catalog` on the Settings singleton (hooks
`/catalog/sync` and `/catalog/customize`) writes the ConfigMap the admission webhooks read each
pool's card memory from (see `catalog`).
"""
