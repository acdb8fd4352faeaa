"""The verdict driver: the one credentialed controller of the chain (`python -m verdictdriver`).

It answers the `gpustack-node-devices` AdmissionCheck on Workloads (`driver`: the loop; `workloads`:
which Workloads wait and what they ask; `entries`: the check entries and apply bodies it writes;
`promises`: the Readys it wrote, until its cache shows them), from watch-fed caches (`caches`),
writing through a few threads (`writes`), one replica at a time (`lease`), with `/healthz` and
`/metrics` (`health`, `metrics`). Beside the verdicts every replica keeps the webhooks'
certificate (`webhookcerts`), seeds the Settings singleton (`seed`) and runs the lifecycle keeper
(`lifecycle`, its rules in `stops` and `ownership`); the leader keeps the pool cards
(`pool_cards`). The hooks and webhooks hold no credentials; everything here does.
"""
