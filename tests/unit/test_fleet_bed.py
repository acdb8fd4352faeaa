"""The fleet bed's pure parts (`testbed.fleet`, `testbed.components`): what it runs the gateway
with, and how a Kueue setting the docs tell users to change is set on top of the testbed's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testbed.components import KUEUE_NAMESPACE, settings_merged
from testbed.fleet import (
    KUEUE_ACCOUNT,
    MEMBERS,
    ORPHAN_GRACE,
    WORKER_LOST_TIMEOUT,
    gateway_argv,
    inline_kubeconfig,
    kueue_account,
)
from workergateway.cli import build_parser
from workergateway.gateway import WORKER_LOST_TIMEOUT as DEFAULT_GRACE


def test_the_gateway_runs_with_the_shipped_command_line() -> None:
    argv = gateway_argv(Path("/run/kubeconfig"), 20123, ORPHAN_GRACE)
    assert argv[:3] == [sys.executable, "-m", "workergateway"]
    args = build_parser().parse_args(argv[3:])
    assert args.fleet_namespace == "gpustack-fleet"
    assert args.identity == "gateway-0"
    assert args.health_port == 20123
    assert args.kubeconfig == "/run/kubeconfig"
    assert args.orphan_grace == ORPHAN_GRACE


def test_multikueue_account_is_kueues_recipe_and_no_more() -> None:
    """MultiKueue's account on a member creates and deletes Jobs, JobSets and Workloads and
    writes Workload status, as Kueue's setup script grants, and reads no Secret, Pod or node."""
    by_kind = {obj["kind"]: obj for obj in kueue_account()}
    assert set(by_kind) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Secret"}
    granted = {
        (group, resource): sorted(rule["verbs"])
        for rule in by_kind["ClusterRole"]["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    dispatch = sorted(["create", "delete", "get", "list", "watch"])
    assert granted == {
        ("batch", "jobs"): dispatch,
        ("batch", "jobs/status"): ["get"],
        ("jobset.x-k8s.io", "jobsets"): dispatch,
        ("jobset.x-k8s.io", "jobsets/status"): ["get"],
        ("kueue.x-k8s.io", "workloads"): dispatch,
        ("kueue.x-k8s.io", "workloads/status"): ["get", "patch", "update"],
    }
    binding = by_kind["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == by_kind["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": KUEUE_ACCOUNT, "namespace": KUEUE_NAMESPACE}
    ]
    secret = by_kind["Secret"]
    assert secret["type"] == "kubernetes.io/service-account-token"
    annotations = secret["metadata"]["annotations"]
    assert annotations == {"kubernetes.io/service-account.name": KUEUE_ACCOUNT}


def test_the_grace_is_at_least_the_timeout_as_the_docs_ask() -> None:
    assert ORPHAN_GRACE >= WORKER_LOST_TIMEOUT
    assert DEFAULT_GRACE == 15 * 60  # Kueue's default workerLostTimeout


def test_a_setting_merges_into_the_configuration() -> None:
    config = {"multiKueue": {"gcInterval": "1m"}, "namespace": "kueue-system", "gates": {"a": 1}}
    merged = settings_merged(config, {"multiKueue": {"workerLostTimeout": "20s"}, "gates": None})
    assert merged == {
        "multiKueue": {"gcInterval": "1m", "workerLostTimeout": "20s"},
        "namespace": "kueue-system",
        "gates": None,
    }
    assert config["multiKueue"] == {"gcInterval": "1m"}  # not changed in place


def test_a_member_kubeconfig_keeps_nothing_in_files() -> None:
    config = json.loads(inline_kubeconfig("https://127.0.0.1:1", b"CA", {"token": "t"}))
    cluster = config["clusters"][0]["cluster"]
    assert set(cluster) == {"server", "certificate-authority-data"}
    assert config["users"][0]["user"] == {"token": "t"}


def test_the_members_are_the_ones_the_issue_names() -> None:
    shapes = {
        name: sorted((node.model, node.cards) for node in nodes) for name, nodes in MEMBERS.items()
    }
    assert shapes == {"member-a": [("t4", 4), ("t4", 4)], "member-b": [("l4", 2), ("t4", 4)]}
