"""The fleet bed's pure parts (`testbed.fleet`, `testbed.components`): what it runs the gateway
with, and how a Kueue setting the docs tell users to change is set on top of the testbed's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testbed.components import settings_merged
from testbed.fleet import (
    MEMBERS,
    ORPHAN_GRACE,
    WORKER_LOST_TIMEOUT,
    gateway_argv,
    inline_kubeconfig,
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
