"""The chain's CRDs as `kubectl` users meet them: `kubectl get gpustack` lists every kind, and no
short name is one a user already types for something else (#34)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"
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
    docs = [d for f in sorted(CRD_DIR.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
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
    assert {"Devices", "Instance", "InstanceType", "PoolCards", "Settings"} <= kinds


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
