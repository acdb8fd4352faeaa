"""The fleet hooks: on a fleet's manager cluster, each `FleetPool` (written by the worker
gateway, docs/fleet.md) turned into the objects MultiKueue dispatches through, and the fleet
InstanceType's status.

- `children` (a DecoratorController on `FleetPool`): the pool's ClusterQueue (the summed quota
  over one manager-side flavor, admitting through the pool's MultiKueue check only), that
  AdmissionCheck, the MultiKueueConfig listing the pool's members, and the fleet InstanceType.
- `status` (a DecoratorController on the fleet InstanceTypes, selected by `FLEET_LABEL`): the
  summed views and summaries, the per-member breakdown and the `Members` column's text, and the
  conditions by the rules of a member's InstanceType (`chain.pool_conditions`).

Pure `sync(request) -> response` over `chain.fleet_pools.FleetPoolView`; a `FleetPool` the
reader refuses is a 400 naming the field, never a 200 without children (Metacontroller would
delete them).
"""
