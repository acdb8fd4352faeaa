"""The agent's probes: alive while the loop turns, ready once a report landed."""

from __future__ import annotations

import urllib.error
import urllib.request

from nodeagent.health import Health, serve


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_alive_until_the_loop_stalls_and_ready_only_after_a_report() -> None:
    clock = Clock()
    health = Health(stale_after=60, clock=clock)
    assert health.live() and not health.ready()
    health.mark_reported()
    assert health.ready()
    clock.now += 61
    assert not health.live() and not health.ready()
    health.beat()
    assert health.live() and health.ready()


def _get(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_probes_over_http() -> None:
    clock = Clock()
    health = Health(stale_after=60, clock=clock)
    server = serve(health, 0, "127.0.0.1")
    port = server.server_address[1]
    try:
        assert _get(port, "/healthz") == 200
        assert _get(port, "/readyz") == 503
        health.mark_reported()
        assert _get(port, "/readyz") == 200
        clock.now += 120
        assert _get(port, "/healthz") == 503
        assert _get(port, "/other") == 404
    finally:
        server.shutdown()
        server.server_close()
