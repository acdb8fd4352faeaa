"""The worker gateway: a fleet of clusters on Kueue's MultiKueue, and its summed views
(docs/fleet.md).

The pure core (no I/O): `members` reads what the gateway reads of each member (the manager's
`MultiKueueCluster` and its `Active` condition, the member's InstanceTypes and the ClusterQueues
of the same names) into small typed views, naming the member and the field of anything it
cannot read; `sums` turns the Active members' pools into one fleet view per pool name.

The credentialed process around it, `python -m workergateway`: `cli` (the composition root),
`gateway` (one pass: read, sum, write the manager's `FleetPool`s), `clients` and `kubeconfig`
(each member's client from its Secret, read strictly), `watches` (what wakes a pass: the
`MultiKueueCluster`s and each Active member's InstanceTypes and pool queues), `health`
(`/healthz`, `/metrics`); deployed on a fleet's manager by `manifests/fleet`. Offline,
`python -m workergateway.plan` (`plan`) runs the pure core over files, one per member
(docs/fleet.md, "Planning a fleet offline").
"""
