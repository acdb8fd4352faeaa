"""A small Kubernetes REST client: discovery, server-side apply, merge patch, in-cluster config.

Shared by the components that talk to the API (the node agent, the admission driver) and by the
testbed. The hooks never use it: they hold no credentials. `kubeapi.watch` keeps a list+watch cache
of one kind current from a background thread.
"""

from kubeapi.client import Kube, KubeError, Obj, Resource, load_yaml_documents, wait_for

__all__ = ["Kube", "KubeError", "Obj", "Resource", "load_yaml_documents", "wait_for"]
