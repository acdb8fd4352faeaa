"""The kubelet device plugin of the node agent.

- `protos`: the kubelet gRPC APIs (device plugin v1beta1, pod-resources v1), generated on demand.
- `nvidia`: what an NVIDIA container is given for a grant (env, mounts, CDI annotation).
- `injection`: how cards reach a container (visibility env or CDI annotation, `auto`).
- `response`: a container's response before it becomes a `ContainerAllocateResponse`.

The allocation rules themselves are pure and live in `chain.allocation` (tokens, costs, the
cross-mode check, the sliced gate, the packing hint) and `chain.ledger_rebuild` (the ledger).
"""
