"""The chain's shared vocabulary: pure functions and frozen values, no I/O.

Hooks and the node agent agree on names, keys, labels and units only by computing them here.

- `units`: `RESOURCE_MAX_UNITS` (M, one whole card) and the unit/credit conversions.
- `manufacturers`: the manufacturer table and its `GPUSTACK_<MFR>_*` overrides.
- `families`: resource families, their keys, classification, credits resources.
- `partitions`: partition profile spelling, per-profile keys, placements on a card.
- `normalize`: `normalize_name`, the id rule behind every key.
- `keys`: the CPU key and accelerator keys of a node.
- `labels`: label/annotation keys, value sanitizing, node label sets.
- `names`: FNV-1a 64 and the names of flavors, pools, LocalQueues, Topologies.
- `pools`: flavor and pool identities, schedule labels, the pool flavor selector.
- `profiles`: which topology profile a node is in, and its domain (docs/topology.md,
  "Topology profiles").
- `memory`, `quantity`: memory spellings and exact quantity parsing.
- `settings`: the online settings object and the startup environment.
- `validation`: Kubernetes' syntax rules for names, keys and values.
- `apis`: API groups, kinds and the settings singleton's name.
- `devices`, `accelerators`, `ledger`: the `Devices` object (groups, cards, the allocation
  ledger) as frozen views with exact parse and render.
- `fields`: reading decoded JSON with errors that name the field.
- `release`: the image, namespaces and version (`version()`, the one place that reads
  pyproject.toml or the installed metadata) this release ships under.
- `cli`: what every entry point's command line shares: exit statuses, `--version`, help with
  defaults, one-line errors.
- `times`: the API's two time formats (`metav1.Time`, `metav1.MicroTime`) from a given clock.
- `conditions`: `status.conditions` for every writer (transition times kept, generation
  recorded); `pool_conditions`: an InstanceType's, which an Instance's conditions quote.

The pools, their queues and their views:
- `queues`: ClusterQueue vocabulary, a flavor's size and quota, a pool's live flavors.
- `catalog`: the pool catalog's wire form (its writer, the instancetype hook; its readers, the
  admission webhooks).
- `views`: the InstanceType views' arithmetic; `pool_nodes`: a pool's card group read off a
  Devices object; `pool_cards`: a pool's nodes tallied into its PoolCards.
- `fit`: per-card room and the node fit labels.
- `requests`: a Pod's accelerator requests, the request rules and the fold.
- `instances`: the Instance API's rules (its Pod, its stop).
- `kvcache`: what the KV cache webhook makes of a Pod that asks for a pool.
- `fleet_pools`: a fleet's `FleetPool` (docs/fleet.md): its reader and the manager-side names,
  shared by the worker gateway that writes it and the fleet hooks that read it.

The per-card verdict and the ledger it reads:
- `allocation`: device-plugin tokens, their costs and who gets a card.
- `ledger_rebuild`: the ledger rebuilt from the Pods' allocation records; `charged_pods`: which
  Pods the ledger already holds.
- `verdicts`: the `gpustack-node-devices` verdict (`judge`, its messages); `charging`: demands
  charged to a pool's cards; `workload_state`: a Workload's check state and shares;
  `topology_assignment`: Kueue's assignment decoded to hostnames; `holdings`: who holds which
  cards (a cache its caller keeps).

A module only one room uses lives in that room (the verdict driver's `ledger_merge`, the
Instance hook's `conditions`, the node agent's `capacity`, `devices_conditions` and
`plugin/partition_grant`, the queue hook's `kueue_config`, the flavor hook's `presets`).
tests/unit/chain/test_index.py keeps this list complete.
"""
