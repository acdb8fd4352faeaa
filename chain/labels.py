"""Label and annotation keys of the chain, label-value sanitizing, and the node label sets.

Labels are the join between stages: NFD and the node agent write them on nodes, flavors copy them
into `nodeLabels`, queues select flavors by them. A key spelled two ways would silently split a
pool, so every key is built here and nowhere else.

Judgment calls:
- `sanitize_label_value` turns every character a label value cannot hold into `-` (the spec only
  names space -> `-`), then trims to 63 characters with alphanumeric ends. Turning rather than
  dropping keeps word boundaries readable (`Max(TM)` -> `Max-TM`).
- A device group whose keys would be invalid (empty group id, over-long aKey) gets no labels:
  publishing half a group would give the node a pool it cannot be scheduled into.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from chain.memory import format_memory_label
from chain.validation import LABEL_VALUE_MAX, is_qualified_name

# Node identity and management.
MANAGED = "gpustack.ai/managed"
OS = "kubernetes.io/os"
ARCH = "kubernetes.io/arch"
HOSTNAME = "kubernetes.io/hostname"

# Feature labels published for nodes (NFD NodeFeatures) and copied onto flavors.
FEATURE_PREFIX = "feature.gpustack.ai/"
ACCELERATABLE = FEATURE_PREFIX + "acceleratable"
CPU_ONLY = FEATURE_PREFIX + "cpu-only"
RDMA_CAPABLE = FEATURE_PREFIX + "rdma.capable"
ACCELERATABLE_PREFIX = "acceleratable.feature.gpustack.ai/"
GENERAL_PREFIX = "general.feature.gpustack.ai/"
TOPOLOGY_PROFILE = "topology.gpustack.ai/profile"

# Fit labels: the node's free room, so the Workload webhook can pin to nodes that fit.
SLICED_FIT_PREFIX = "sliced-max-free-units.fit.gpustack.ai/"
SHARED_FIT_PREFIX = "shared-free-cards.fit.gpustack.ai/"

# Sibling suffixes of a feature key.
COUNT_SUFFIX = ".count"
CAPACITY_SUFFIX = ".capacity"

# Objects the chain authors and how it recognises them.
RESOURCE_TYPE = "resource.gpustack.ai/type"
RESOURCE_TYPE_NODES = "nodes"
RESOURCE_TYPE_INSTANCE_TYPES = "instancetypes"
RESOURCE_TYPE_TOPOLOGY = "topology"
DERIVED_FROM_NODE = "schedule.gpustack.ai/derived-from-node"
QUEUE_ENTRANCE = "schedule.gpustack.ai/queue-entrance"
QUEUE_ANNOTATION = "schedule.gpustack.ai/queue"
QUEUE_STOP_POLICY = "schedule.gpustack.ai/stop-policy"
"""On a chain ClusterQueue: the stop policy the queue hook decided, written with it. A
`spec.stopPolicy` that differs from it was set by someone else (an admin), and is kept."""
QUEUE_PROBLEM = "schedule.gpustack.ai/queue-problem"
"""On an InstanceType: why the queue hook refuses to give its ClusterQueue the pool's flavors."""
NOTE_PREFIX = "note.gpustack.ai/"
PART_OF = "app.kubernetes.io/part-of"

# Kueue's keys the chain reads or writes.
KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
KUEUE_WORKLOAD = "kueue.x-k8s.io/workload"
KUEUE_PODSET = "kueue.x-k8s.io/podset"

# ClusterQueue annotations of the topology-aware drain/migration.
TAS_QUEUE = "topology.gpustack.ai/tas-queue"
MIGRATION_PHASE = "topology.gpustack.ai/migration-phase"
MIGRATION_STOP_POLICY = "topology.gpustack.ai/migration-stop-policy"
EMPTY_PLAN_HOLD = "topology.gpustack.ai/empty-plan-hold"

# CPU identity: NFD's cpu-model labels and the `gpustack-cpu-info` rule's annotations.
NFD_CPU_VENDOR = "feature.node.kubernetes.io/cpu-model.vendor_id"
NFD_CPU_FAMILY = "feature.node.kubernetes.io/cpu-model.family"
NFD_CPU_MODEL_ID = "feature.node.kubernetes.io/cpu-model.id"
CPU_ATTRIBUTES = (
    "name",
    "family",
    "physical-cores",
    "threads-per-core",
    "logical-cores",
    "stepping",
    "hz",
    "boost-freq",
    "cache-line",
    "cache-l1i",
    "cache-l1d",
    "cache-l2",
    "cache-l3",
)
CPU_NAME = FEATURE_PREFIX + "cpu-name"
UNRESOLVED_MARK = "@"
"""An NFD rule that cannot resolve a template leaves the template (`@cpu.model.name`) behind."""

TRUE = "true"
FALSE = "false"


def cpu_annotation(attribute: str) -> str:
    """`feature.gpustack.ai/cpu-<attribute>`."""
    return f"{FEATURE_PREFIX}cpu-{attribute}"


def resolved(value: str | None) -> str:
    """`value`, or "" when it is missing or an unresolved `@...` template."""
    if value is None or value.startswith(UNRESOLVED_MARK):
        return ""
    return value


def bool_value(flag: bool) -> str:
    return TRUE if flag else FALSE


def accelerator_feature_key(accelerator_key: str) -> str:
    """`acceleratable.feature.gpustack.ai/<aKey>`."""
    return ACCELERATABLE_PREFIX + accelerator_key


def manufacturer_feature_key(manufacturer: str) -> str:
    """`acceleratable.feature.gpustack.ai/<mfr>` (the node has some card of that maker)."""
    return ACCELERATABLE_PREFIX + manufacturer


def general_feature_key(general_key: str) -> str:
    """`general.feature.gpustack.ai/<gKey or gMfr>`."""
    return GENERAL_PREFIX + general_key


def count_key(feature_key: str) -> str:
    """`<feature key>.count`: per-node count (cards or whole CPUs)."""
    return feature_key + COUNT_SUFFIX


def capacity_key(feature_key: str) -> str:
    """`<feature key>.capacity`: pool-wide count on a flavor (nodes x per-node count)."""
    return feature_key + CAPACITY_SUFFIX


def note_key(name: str) -> str:
    """`note.gpustack.ai/<name>` (flavor descriptors)."""
    return NOTE_PREFIX + name


def sliced_fit_key(accelerator_key: str) -> str:
    return SLICED_FIT_PREFIX + accelerator_key


def shared_fit_key(accelerator_key: str) -> str:
    return SHARED_FIT_PREFIX + accelerator_key


def is_fit_label_key(key: str) -> bool:
    """True for a fit label key of a non-empty aKey that Kubernetes accepts."""
    for prefix in (SLICED_FIT_PREFIX, SHARED_FIT_PREFIX):
        if key.startswith(prefix):
            return key != prefix and is_qualified_name(key)
    return False


def is_managed(labels: Mapping[str, str]) -> bool:
    """A node (or Devices object) takes part in the chain only when marked `true`."""
    return labels.get(MANAGED) == TRUE


def _label_char(char: str) -> str:
    if char.isascii() and (char.isalnum() or char in "-_."):
        return char
    return "-"


def sanitize_label_value(value: str) -> str:
    """The closest valid label value: invalid characters become `-`, at most 63 characters,
    alphanumeric at both ends (possibly empty)."""
    text = "".join(_label_char(char) for char in value)
    text = text.lstrip("-_.")[:LABEL_VALUE_MAX]
    return text.rstrip("-_.")


def accelerator_keys_of(labels: Mapping[str, str], manufacturers: Iterable[str]) -> list[str]:
    """aKeys a node advertises (`ExtractAcceleratableNodeKeys`), sorted.

    Only `<known mfr>-<id>=true` counts: a bare manufacturer key and siblings such as `.count`
    (whose value is never `true`) are not accelerator models.
    """
    known = set(manufacturers)
    found = []
    for key, value in labels.items():
        if value != TRUE or not key.startswith(ACCELERATABLE_PREFIX):
            continue
        name = key[len(ACCELERATABLE_PREFIX) :]
        maker, dash, rest = name.partition("-")
        if dash and rest and maker in known:
            found.append(name)
    return sorted(found)


def managed_label_value(existing: str | None, manual: bool) -> str | None:
    """Value of `gpustack.ai/managed` the node should carry, or None for no label.

    An admin's label always wins (`false` opts a node out); otherwise nodes are enrolled unless
    `node-management-manual` leaves enrolment to the admin.
    """
    if existing is not None:
        return existing
    return None if manual else TRUE


def cpu_capacity_labels(
    general_manufacturer: str,
    general_key: str,
    cpu_capacity: int | Fraction,
    existing_managed: str | None,
    manual: bool,
) -> dict[str, str]:
    """The worker NodeFeature's labels: managed mark, CPU maker and key presence, CPU count.

    The count is the ceiling of the node's CPU capacity, so a node with `15500m` still forms a
    16-core flavor; a node reporting no CPU gets no count and therefore no CPU flavor.
    """
    labels: dict[str, str] = {}
    managed = managed_label_value(existing_managed, manual)
    if managed is not None:
        labels[MANAGED] = managed
    labels[general_feature_key(general_manufacturer)] = TRUE
    labels[general_feature_key(general_key)] = TRUE
    cores = math.ceil(cpu_capacity)
    if cores > 0:
        labels[count_key(general_feature_key(general_key))] = str(cores)
    return labels


@dataclass(frozen=True)
class AcceleratorGroupFacts:
    """What the node labels say about one model of card on a node (one Devices spec group)."""

    manufacturer: str
    group_id: str
    name: str
    memory_mib: int
    cards: int
    cores: int = 0
    driver_version: str = ""
    runtime_version: str = ""
    family: str = ""
    compute_capability: str = ""

    @property
    def accelerator_key(self) -> str:
        return f"{self.manufacturer}-{self.group_id}"


def accelerator_labels(groups: Iterable[AcceleratorGroupFacts]) -> dict[str, str]:
    """The device-manager NodeFeature's labels for the node's card groups.

    Groups without cards publish nothing, so a pulled card takes its pool presence with it.
    """
    labels: dict[str, str] = {}
    for group in groups:
        if group.cards <= 0 or not group.group_id:
            continue
        model = accelerator_feature_key(group.accelerator_key)
        maker = manufacturer_feature_key(group.manufacturer)
        if not is_qualified_name(capacity_key(model)):
            continue
        entries = {
            ACCELERATABLE: TRUE,
            maker: TRUE,
            maker + ".driver-version": group.driver_version,
            maker + ".runtime-version": group.runtime_version,
            model: TRUE,
            model + ".product": group.name,
            model + ".memory": format_memory_label(group.memory_mib),
            model + ".cores": str(group.cores),
            count_key(model): str(group.cards),
            model + ".family": group.family,
            model + ".comcap": group.compute_capability,
        }
        for key, value in entries.items():
            clean = sanitize_label_value(value)
            if clean:
                labels[key] = clean
    return labels
