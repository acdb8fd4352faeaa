"""The testbed uses the shipped REST client (kubeapi); kept as a name tests import from."""

from kubeapi import Kube, KubeError, Obj, Resource, load_yaml_documents, wait_for

__all__ = ["Kube", "KubeError", "Obj", "Resource", "load_yaml_documents", "wait_for"]
