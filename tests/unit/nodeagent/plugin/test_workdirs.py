"""Per-Pod work-dir GC (docs/design/node-agent.md, "Work-dir GC"): three consecutive misses remove a
directory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from chain.ledger import Mode
from nodeagent.plugin import server
from nodeagent.plugin.workdirs import WorkDirGC
from tests.unit.nodeagent.plugin.fakes import SLICED, rig


def test_three_misses_remove_and_a_sighting_resets(tmp_path: Path) -> None:
    for uid in ("live", "gone", "flaky"):
        (tmp_path / uid).mkdir()
    gc = WorkDirGC(str(tmp_path))
    assert gc.misses == {"live": 0, "gone": 0, "flaky": 0}
    assert gc.tick({"live"}) == []
    assert gc.tick({"live", "flaky"}) == []  # seen again: its count starts over
    assert gc.tick({"live"}) == ["gone"]
    assert not (tmp_path / "gone").exists()
    assert gc.tick({"live"}) == []
    assert gc.tick({"live"}) == ["flaky"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["live"]


def test_failed_removal_is_retried_and_vanished_dirs_forgotten(tmp_path: Path) -> None:
    (tmp_path / "stuck").mkdir()
    (tmp_path / "other").mkdir()
    attempts: list[str] = []

    def refuse(path: str) -> None:
        attempts.append(path)
        raise PermissionError("busy")

    gc = WorkDirGC(str(tmp_path), remove=refuse)
    (tmp_path / "other").rmdir()
    for _ in range(4):
        assert gc.tick(set()) == []
    assert [Path(a).name for a in attempts] == ["stuck", "stuck"]
    assert gc.misses == {"stuck": 4}


def test_missing_root_is_empty(tmp_path: Path) -> None:
    assert WorkDirGC(str(tmp_path / "absent")).tick(set()) == []


def test_sliced_list_and_watch_ticks_collect_gone_pods(tmp_path: Path) -> None:
    (tmp_path / "uid-gone" / "c-main").mkdir(parents=True)
    with rig(modes=(Mode.SLICED,), workdirs=tmp_path) as r:
        r.ready()
        r.cluster.add("here", ("main", {SLICED: "1"}))
        (tmp_path / "uid-here").mkdir()
        endpoint = r.kubelet.wait_endpoint(SLICED)
        for _ in range(50):  # each notifier tick resends the list and runs one GC round
            if not (tmp_path / "uid-gone").exists():
                break
            r.node.notify()
            with endpoint.changed:
                endpoint.changed.wait(0.1)
        gc = r.servers[Mode.SLICED].service.gc
        assert gc is not None and "uid-gone" not in gc.misses
        assert not (tmp_path / "uid-gone").exists()
        assert (tmp_path / "uid-here").exists()


def test_a_quiet_node_still_collects_the_work_dirs_of_pods_gone_before_it_went_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the last Pods end, nothing wakes the streams again (no grant, no Pod change, the
    next report a monitor period away): the GC counts its misses on the streams' idle ticks
    too, or the last Pods' work dirs stay until the node's next change."""
    monkeypatch.setattr(server, "GC_PERIOD_S", 0.05)
    (tmp_path / "uid-gone" / "c-main").mkdir(parents=True)
    with rig(modes=(Mode.SLICED,), workdirs=tmp_path) as r:
        r.ready()  # the first list: one miss, then no wake at all
        deadline = time.monotonic() + 10
        while (tmp_path / "uid-gone").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (tmp_path / "uid-gone").exists()
