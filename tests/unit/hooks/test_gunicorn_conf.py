"""The hooks' gunicorn settings, run for real: every line carries time, level and component, and
the kubelet's probes leave no access line."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from tests.unit.hooks.gunicorn_run import gunicorn


def test_probes_leave_no_access_line_and_every_line_has_time_level_and_component() -> None:
    flags = ("--access-logfile=-", "--config=python:hooks.gunicorn_conf")
    with gunicorn("hooks.entrance.app:app", *flags, capture=True) as (server, url):
        for _ in range(3):
            requests.get(f"{url}/healthz", timeout=5)
        assert requests.post(f"{url}/sync", json={"not": "a request"}, timeout=5).status_code == 400
    assert server.stdout is not None
    output = server.stdout.read()
    lines = [line for line in output.splitlines() if line.strip()]
    access = [line for line in lines if " gunicorn.access " in line]
    assert len(access) == 1 and '"POST /sync' in access[0], output
    assert not any("/healthz" in line for line in lines), output
    for line in lines:
        day, clock, level, component, _ = line.split(" ", 4)
        assert len(day) == 10 and ":" in clock, line  # 2026-12-02 01:26:47,123
        assert level in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}, line
        assert component.startswith(("gunicorn.", "hooks")), line


def test_metrics_add_up_every_workers_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under gunicorn with two workers each scrape reaches one of them, yet every request is
    counted: the workers share `PROMETHEUS_MULTIPROC_DIR` (started empty) and `/metrics` adds
    them up. The probes and scrapes themselves are not counted."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "stale_from_a_previous_run.db").write_text("")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    flags = ("--workers=2", "--config=python:hooks.gunicorn_conf")
    with gunicorn("hooks.entrance.app:app", *flags) as (_, url):
        assert not (folder / "stale_from_a_previous_run.db").exists()
        for _ in range(6):
            requests.post(f"{url}/sync", json={"not": "a request"}, timeout=5)
        requests.get(f"{url}/healthz", timeout=5)
        for _ in range(4):  # whichever worker answers, the sum is the same
            text = requests.get(f"{url}/metrics", timeout=5).text
            counted = [
                line
                for line in text.splitlines()
                if line.startswith("gpustack_hook_requests_total{")
            ]
            assert len(counted) == 1, text
            assert 'route="/sync"' in counted[0] and 'code="400"' in counted[0]
            assert counted[0].endswith(" 6.0"), counted
