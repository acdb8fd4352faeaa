"""What this release of the chain ships under: the one image every component runs (the hooks,
the webhooks, the verdict driver, the node agent, and SSH-enabled Instances' `sshd` sidecar).
The manifests name it (`python -m nodeagent.manifests` writes it into the DaemonSets; Helm's
`image` value replaces it everywhere)."""

from __future__ import annotations

CHAIN_IMAGE = "ghcr.io/gpustack-chain/gpustack-chain:0.1.0"
SYSTEM_NAMESPACE = "gpustack-system"
"""Where every component but the node agents runs, under the `restricted` Pod Security level."""
AGENT_NAMESPACE = "gpustack-agents"
"""The node agents' own namespace: their DaemonSets need host paths and device access, so it is
the one namespace of the chain labelled for `privileged` Pods."""
