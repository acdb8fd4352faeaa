"""A small Kubernetes REST client: discovery, server-side apply, merge patch, in-cluster config.

Shared by the components that talk to the API (the node agent, the verdict driver) and by the
testbed. The Metacontroller hooks and the webhooks never use it: they hold no credentials.
`kubeapi.credentials` reads any kubeconfig `kubectl` reads (or the in-cluster service account);
`kubeapi.watch` keeps a list+watch cache of one kind current from a background thread.
"""

from kubeapi.client import (
    Kube,
    KubeError,
    Obj,
    Resource,
    add_kubeconfig_flag,
    kube_parser,
    load_yaml_documents,
    run_connected,
    wait_for,
)

__all__ = [
    "Kube",
    "KubeError",
    "Obj",
    "Resource",
    "add_kubeconfig_flag",
    "kube_parser",
    "load_yaml_documents",
    "run_connected",
    "wait_for",
]
