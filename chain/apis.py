"""API groups, kinds and well-known object names the chain reads and writes.

Hooks find objects in Metacontroller's maps by `<Kind>.<apiVersion>` and author objects by
apiVersion and kind, so a version bump (Kueue v1beta1 -> v1beta2) is one edit here, not a hunt.
"""

from __future__ import annotations

CORE_V1 = "v1"
NODE = "Node"

CHAIN_API = "gpustack.ai/v1alpha1"
"""Our own CRDs: the settings singleton and the per-node flavor summaries."""
SETTINGS = "Settings"
SETTINGS_RESOURCE = "settings"
SETTINGS_NAME = "default"
"""The settings object is a singleton; only this name carries the chain's settings."""
POOLS_CONTROLLER = "gpustack-flavor-pools"
"""The DecoratorController on the settings singleton that authors flavors, the Topology and
derived InstanceTypes."""
CATALOG_CONTROLLER = "gpustack-admission-catalog"
"""The DecoratorController on the settings singleton that writes the webhooks' catalog."""
DECORATOR_ANNOTATION = "metacontroller.k8s.io/decorator-controller"
"""Metacontroller's mark on a decorator's attachment: with a controller reference to the parent,
it is what makes an object that decorator's child."""
NODE_FLAVORS = "NodeFlavors"
NODE_FLAVORS_RESOURCE = "nodeflavors"

KUEUE_API = "kueue.x-k8s.io/v1beta2"
RESOURCE_FLAVOR = "ResourceFlavor"
RESOURCE_FLAVORS_RESOURCE = "resourceflavors"
TOPOLOGY = "Topology"
TOPOLOGIES_RESOURCE = "topologies"
CLUSTER_QUEUE = "ClusterQueue"
CLUSTER_QUEUES_RESOURCE = "clusterqueues"
LOCAL_QUEUE = "LocalQueue"
ADMISSION_CHECK = "AdmissionCheck"
WORKLOAD = "Workload"
KUEUE_ACTIVE = "Active"
"""The condition Kueue sets on a ClusterQueue and an AdmissionCheck that can admit."""

WORKER_API = "worker.gpustack.ai/v1alpha1"
INSTANCE_TYPE = "InstanceType"
INSTANCE_TYPE_RESOURCE = "instancetypes"
