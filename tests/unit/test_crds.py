"""The chain's CRDs as `kubectl` users meet them: `kubectl get gpustack` lists every kind, and no
short name is one a user already types for something else (#34)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
# The default install's CRDs and the fleet manager's (manifests/fleet, docs/fleet.md): a user of
# either meets them through `kubectl`.
CRD_DIRS = (MANIFESTS / "crds", MANIFESTS / "fleet" / "crds")
# libyaml's loader where the build has it: the walks below read every CRD many times.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
CATEGORY = "gpustack"

# Every short name of the built-in kinds, as `kubectl api-resources` of Kubernetes v1.36 lists
# them: every `ShortNames()` under pkg/registry of k8s.io/kubernetes v1.36.3, and
# apiextensions-apiserver's CRDs (`crd`, `crds`). The other built-in kinds (bindings, secrets,
# jobs, roles, leases, endpointslices, resourceclaims, csidrivers, ...) have none. `psp`
# (PodSecurityPolicy) was removed in v1.25 and stays here: users still type it.
BUILTIN_SHORT_NAMES = frozenset(
    {
        "cm",  # configmaps
        "cs",  # componentstatuses
        "ep",  # endpoints
        "ev",  # events (core and events.k8s.io)
        "limits",  # limitranges
        "no",  # nodes
        "ns",  # namespaces
        "po",  # pods
        "pv",  # persistentvolumes
        "pvc",  # persistentvolumeclaims
        "quota",  # resourcequotas
        "rc",  # replicationcontrollers
        "sa",  # serviceaccounts
        "svc",  # services
        "ds",  # daemonsets
        "deploy",  # deployments
        "rs",  # replicasets
        "sts",  # statefulsets
        "hpa",  # horizontalpodautoscalers
        "cj",  # cronjobs
        "csr",  # certificatesigningrequests
        "ing",  # ingresses
        "netpol",  # networkpolicies
        "ip",  # ipaddresses
        "pdb",  # poddisruptionbudgets
        "pc",  # priorityclasses
        "sc",  # storageclasses
        "vac",  # volumeattributesclasses
        "crd",  # customresourcedefinitions
        "crds",
        "psp",  # podsecuritypolicies (before v1.25)
    }
)

# Kueue v0.19.2 (sigs.k8s.io/kueue config/components/crd/bases, the testbed's pin).
KUEUE_SHORT_NAMES = frozenset(
    {
        "ac",  # admissionchecks
        "co",  # cohorts
        "cq",  # clusterqueues
        "queue",  # localqueues
        "queues",
        "lq",
        "mkc",  # multikueueclusters
        "mkconf",  # multikueueconfigs
        "prc",  # provisioningrequestconfigs
        "flavor",  # resourceflavors
        "flavors",
        "rf",
        "topo",  # topologies
        "kwl",  # workloads
        "kueueworkload",
        "kueueworkloads",
        "wpc",  # workloadpriorityclasses
    }
)

# Node Feature Discovery v0.19.0 (deployment/base/nfd-crds): NodeFeature has none.
NFD_SHORT_NAMES = frozenset({"nfg", "nfr"})  # nodefeaturegroups, nodefeaturerules

# Metacontroller v1.5.20 (manifests/production/metacontroller-crds-v1.yaml): its
# ControllerRevision has none.
METACONTROLLER_SHORT_NAMES = frozenset(
    {
        "cc",  # compositecontrollers
        "cctl",
        "dec",  # decoratorcontrollers
        "decorators",
    }
)

TAKEN = BUILTIN_SHORT_NAMES | KUEUE_SHORT_NAMES | NFD_SHORT_NAMES | METACONTROLLER_SHORT_NAMES


def _crds() -> list[dict[str, Any]]:
    docs = [
        d
        for directory in CRD_DIRS
        for f in sorted(directory.glob("*.yaml"))
        for d in yaml.load_all(f.read_text(), Loader=_LOADER)
    ]
    return [d for d in docs if d and d["kind"] == "CustomResourceDefinition"]


def name_problems(crds: list[dict[str, Any]]) -> list[str]:
    """What a `kubectl` user would trip over in these CRDs' names, one line each."""
    problems = []
    counts = Counter(s for c in crds for s in c["spec"]["names"].get("shortNames", ()))
    own_names = {
        n for c in crds for n in (c["spec"]["names"]["plural"], c["spec"]["names"]["singular"])
    }
    for crd in crds:
        names = crd["spec"]["names"]
        kind = names["kind"]
        if CATEGORY not in names.get("categories", ()):
            problems.append(f"{kind}: not in category {CATEGORY}")
        for short in names.get("shortNames", ()):
            if short in TAKEN:
                problems.append(f"{kind}: short name {short} is taken by another kind")
            if counts[short] > 1:
                problems.append(f"{kind}: short name {short} is used by another chain CRD")
            if short in own_names:
                problems.append(f"{kind}: short name {short} is a chain CRD's plural or singular")
    return problems


def test_crds_are_found() -> None:
    kinds = {c["spec"]["names"]["kind"] for c in _crds()}
    assert {"Devices", "FleetPool", "Instance", "InstanceType", "PoolCards", "Settings"} <= kinds


def test_every_crd_is_in_the_category_and_no_short_name_collides() -> None:
    assert name_problems(_crds()) == []


def test_only_the_namespaced_workload_is_in_all() -> None:
    in_all = {
        c["spec"]["names"]["kind"] for c in _crds() if "all" in c["spec"]["names"]["categories"]
    }
    assert in_all == {"Instance"}
    assert all(
        c["spec"]["scope"] == "Namespaced"
        for c in _crds()
        if "all" in c["spec"]["names"]["categories"]
    )


def _poolcards(**names: Any) -> dict[str, Any]:
    (crd,) = [c for c in _crds() if c["spec"]["names"]["kind"] == "PoolCards"]
    crd["spec"]["names"].update(names)
    return crd


@pytest.mark.parametrize(
    ("names", "problem"),
    [
        ({"shortNames": ["pc"]}, "PoolCards: short name pc is taken by another kind"),
        ({"shortNames": ["cq"]}, "PoolCards: short name cq is taken by another kind"),
        ({"shortNames": ["nfr"]}, "PoolCards: short name nfr is taken by another kind"),
        ({"shortNames": ["cc"]}, "PoolCards: short name cc is taken by another kind"),
        ({"shortNames": ["inst"]}, "PoolCards: short name inst is used by another chain CRD"),
        ({"shortNames": ["devices"]}, "PoolCards: short name devices is a chain CRD's plural"),
        ({"categories": ["all"]}, "PoolCards: not in category gpustack"),
    ],
)
def test_the_check_catches(names: dict[str, Any], problem: str) -> None:
    crds = [c for c in _crds() if c["spec"]["names"]["kind"] != "PoolCards"] + [_poolcards(**names)]
    assert any(p.startswith(problem) for p in name_problems(crds)), name_problems(crds)


# --- `kubectl explain` teaches the API (#34) -----------------------------------------------------

# The one property that carries no description: the API server refuses a root `metadata` schema
# that says anything but its type (apiextensions-apiserver's validateStructuralMetadataInvariants:
# "must not specify anything other than name and generateName"), and publishes ObjectMeta's own
# description in its place.
UNDESCRIBABLE = frozenset({"metadata"})


def _schemas(crds: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{c['spec']['names']['kind']} {v['name']}", v["schema"]["openAPIV3Schema"])
        for c in crds
        for v in c["spec"]["versions"]
    ]


def undescribed(schema: dict[str, Any], path: str = "") -> list[str]:
    """The path of every property under `schema` without a non-empty description: through
    objects' properties, arrays' `items` (`[]`) and maps' `additionalProperties` (`{}`)."""
    found = []
    for name, prop in (schema.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        if not str(prop.get("description", "")).strip() and where not in UNDESCRIBABLE:
            found.append(where)
        found += undescribed(prop, where)
    items = schema.get("items")
    if isinstance(items, dict):
        found += undescribed(items, f"{path}[]")
    values = schema.get("additionalProperties")
    if isinstance(values, dict):
        found += undescribed(values, f"{path}{{}}")
    return found


def description_problems(crds: list[dict[str, Any]]) -> list[str]:
    problems = []
    for name, schema in _schemas(crds):
        if not str(schema.get("description", "")).strip():
            problems.append(f"{name}: the schema itself has no description")
        problems += [f"{name}: {path} has no description" for path in undescribed(schema)]
    return problems


def test_every_property_of_every_crd_is_described() -> None:
    assert description_problems(_crds()) == []


def _instances_schema() -> dict[str, Any]:
    (crd,) = [c for c in _crds() if c["spec"]["names"]["kind"] == "Instance"]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_the_walk_names_a_property_of_an_array_item() -> None:
    schema = _instances_schema()
    del schema["properties"]["spec"]["properties"]["env"]["items"]["properties"]["name"][
        "description"
    ]
    assert undescribed(schema) == ["spec.env[].name"]


def test_the_walk_names_a_property_of_a_map_value() -> None:
    schema = _instances_schema()
    schema["properties"]["spec"]["properties"]["labels"] = {
        "type": "object",
        "description": "a map",
        "additionalProperties": {
            "type": "object",
            "properties": {"owner": {"type": "string", "description": " "}},
        },
    }
    assert undescribed(schema) == ["spec.labels{}.owner"]


def test_the_walk_names_an_undescribed_spec_and_schema() -> None:
    crd = _poolcards()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["description"], schema["properties"]["spec"]["description"]
    assert description_problems([crd]) == [
        "PoolCards v1alpha1: the schema itself has no description",
        "PoolCards v1alpha1: spec has no description",
    ]


# Field names a description may mention that no chain CRD declares, each someone else's.
FOREIGN_FIELDS = frozenset(
    {
        "cpuDetail",  # the flavors' `note.gpustack.ai/cpuDetail` note, inlined into InstanceTypes
        "hostPath",  # a Pod's volume source, in the upstream setting's description
    }
)
_CAMEL_CASE = re.compile(r"\b[a-z][a-z0-9]*(?:[A-Z][a-z0-9]*)+\b")
_FIELD_PATH = re.compile(r"\b(?:spec|status)(?:\.[A-Za-z][A-Za-z0-9-]*)+")


def _children(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """The schemas nested in `schema`: its properties', its items' and its map values'."""
    nested = list((schema.get("properties") or {}).values())
    return nested + [
        schema[key]
        for key in ("items", "additionalProperties")
        if isinstance(schema.get(key), dict)
    ]


def _descriptions(schema: dict[str, Any]) -> list[str]:
    found = [schema["description"]] if isinstance(schema.get("description"), str) else []
    return found + [text for child in _children(schema) for text in _descriptions(child)]


def _field_names(schema: dict[str, Any]) -> set[str]:
    return set(schema.get("properties") or {}).union(*map(_field_names, _children(schema)))


def _resolves(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in path.split("."):
        while "properties" not in node and isinstance(node.get("items"), dict):
            node = node["items"]
        if part not in (node.get("properties") or {}):
            return False
        node = node["properties"][part]
    return True


def reference_problems(crds: list[dict[str, Any]]) -> list[str]:
    """Field names the descriptions mention that do not exist: a camelCase word no chain CRD
    declares, or a `spec.`/`status.` path that is neither the CRD's own nor that of a kind the
    same description names (`the InstanceType's status.cpu.capacity`)."""
    # By kind: each chain CRD serves one version.
    schemas = {
        c["spec"]["names"]["kind"]: v["schema"]["openAPIV3Schema"]
        for c in crds
        for v in c["spec"]["versions"]
    }
    known = FOREIGN_FIELDS.union(*map(_field_names, schemas.values()))
    problems = []
    for kind, schema in schemas.items():
        for text in _descriptions(schema):
            problems += [
                f"{kind}: {w} is no field" for w in _CAMEL_CASE.findall(text) if w not in known
            ]
            named = [s for k, s in schemas.items() if k != kind and re.search(rf"\b{k}\b", text)]
            owners = [schema, *named]
            problems += [
                f"{kind}: {path} is no field"
                for path in _FIELD_PATH.findall(text)
                if not any(_resolves(owner, path) for owner in owners)
            ]
    return problems


def test_descriptions_mention_only_fields_that_exist() -> None:
    assert reference_problems(_crds()) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "with acceleratorSlicedMemoryPercent",
            "Instance: acceleratorSlicedMemoryPercent is no field",
        ),
        ("see status.accelerator.capacity", "Instance: status.accelerator.capacity is no field"),
        ("see spec.resources.gpu", "Instance: spec.resources.gpu is no field"),
    ],
)
def test_the_reference_check_catches(text: str, problem: str) -> None:
    crds = [c for c in _crds() if c["spec"]["names"]["kind"] in ("Instance", "InstanceType")]
    (instance,) = [c for c in crds if c["spec"]["names"]["kind"] == "Instance"]
    instance["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = text
    assert reference_problems(crds) == [problem]
