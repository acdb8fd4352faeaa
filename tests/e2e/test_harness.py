"""The harness itself: a dead component is reported with its log, and `down` leaves nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from testbed.harness import ComponentDied, Testbed, pid_alive


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_killed_component_is_reported_and_down_cleans_up() -> None:
    root = Path(tempfile.mkdtemp(prefix="gpustack-testbed-kill-"))
    bed = Testbed(root)
    bed.up(components=("etcd", "kube-apiserver"))
    pids = [p.pid for p in bed.state.processes.values()]
    ports = [bed.state.ports["etcd"], bed.state.ports["apiserver"]]
    try:
        bed.check_alive()
        os.kill(bed.state.processes["kube-apiserver"].pid, signal.SIGKILL)
        with pytest.raises(ComponentDied) as died:
            for _ in range(50):
                bed.check_alive()
                time.sleep(0.1)
        assert died.value.name == "kube-apiserver"
        # The message carries the component's own log.
        assert "kube-apiserver.log" in str(died.value)
        assert "Serving securely" in str(died.value) or "secure" in str(died.value).lower()
    finally:
        bed.down()
    assert not any(pid_alive(pid) for pid in pids)
    assert all(_port_free(p) for p in ports)
    assert not root.exists()


def test_failing_run_shows_the_dead_components_log(tmp_path: Path) -> None:
    """Run pytest on a tiny suite whose component dies: the run fails and shows the log."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        import tempfile
        from pathlib import Path
        import pytest
        from testbed.harness import Testbed

        pytest_plugins = ["testbed.pytest_plugin"]

        @pytest.fixture(scope="session")
        def testbed():
            bed = Testbed(Path(tempfile.mkdtemp(prefix="gpustack-testbed-inner-")))
            bed.up(components=("etcd",))
            yield bed
            bed.down()
    """)
    )
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent("""
        import os, signal, time

        def test_kills_etcd(testbed):
            os.kill(testbed.state.processes["etcd"].pid, signal.SIGKILL)
            time.sleep(1)
    """)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "testbed component etcd is not running" in out, out
    assert "testbed log: etcd" in out, out


def test_kueue_runs_with_the_tuning_of_its_release(testbed: Testbed) -> None:
    """Kueue's release Configuration reconciles 10 Workloads at once at 300 requests/s (burst
    500); the testbed's Kueue must not be slower than any installed one."""
    config = yaml.safe_load((testbed.root / "kueue-config.yaml").read_text())
    assert config["controller"]["groupKindConcurrency"]["Workload.kueue.x-k8s.io"] == 10
    assert config["clientConnection"] == {"qps": 300, "burst": 500}


def test_restart_keeps_flags_and_data() -> None:
    """`Testbed.restart` starts a component again with the same command line and data dir: an
    object written before an API server and etcd restart is read back after it."""
    root = Path(tempfile.mkdtemp(prefix="gpustack-testbed-restart-"))
    bed = Testbed(root)
    bed.up(components=("etcd", "kube-apiserver"))
    try:
        before = {name: (p.pid, p.argv) for name, p in bed.state.processes.items()}
        bed.kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kept"}})
        bed.restart(("etcd", "kube-apiserver"), down_s=0.5)
        bed.check_alive()
        after = {name: (p.pid, p.argv) for name, p in bed.state.processes.items()}
        assert set(after) == set(before)
        for name, (pid, argv) in after.items():
            assert pid != before[name][0] and argv == before[name][1], name
        assert bed.kube.get("v1", "Namespace", "kept") is not None
    finally:
        bed.down()
