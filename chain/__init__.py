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
- `memory`, `quantity`: memory spellings and exact quantity parsing.
- `presets`: unit resources of derived InstanceTypes.
- `settings`: the online settings object and the startup environment.
- `validation`: Kubernetes' syntax rules for names, keys and values.
- `apis`: API groups, kinds and the settings singleton's name.
- `devices`, `accelerators`, `ledger`: the `Devices` object (groups, cards, the allocation
  ledger) as frozen views with exact parse and render.
- `capacity`: the Node `status.capacity` counting keys.
- `fields`: reading decoded JSON with errors that name the field.
- `release`: the image, namespaces and version (`version()`, the one place that reads
  pyproject.toml or the installed metadata) this release ships under.
- `cli`: what every entry point's command line shares: exit statuses, `--version`, help with
  defaults, one-line errors.
"""
