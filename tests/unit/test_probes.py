"""The shared probe server: each path answers what its probe decides, with the process's own
reason on a 503; `/metrics` only when given; any other path a 404, plain or the library's page."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from probes import PROMETHEUS_TEXT, Heartbeat, Probe, serve


@contextmanager
def _served(
    probes: dict[str, Probe],
    metrics: Callable[[], bytes] | None = None,
    not_found: bytes | None = None,
) -> Iterator[str]:
    server = serve(probes, 0, "127.0.0.1", "test-probes", metrics=metrics, not_found=not_found)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_each_path_answers_its_own_probe() -> None:
    alive, ready = [True], [False]
    probes = {
        "/healthz": Probe(lambda: alive[0], b"stalled\n"),
        "/readyz": Probe(lambda: ready[0], b"nothing reported\n"),
    }
    with _served(probes) as base:
        assert _get(f"{base}/healthz") == (200, "text/plain", b"ok\n")
        assert _get(f"{base}/readyz") == (503, "text/plain", b"nothing reported\n")
        alive[0], ready[0] = False, True
        assert _get(f"{base}/healthz") == (503, "text/plain", b"stalled\n")
        assert _get(f"{base}/readyz") == (200, "text/plain", b"ok\n")


def test_metrics_are_served_in_prometheus_text_only_when_given() -> None:
    probes = {"/healthz": Probe(lambda: True, b"down\n")}
    with _served(probes, metrics=lambda: b"up 1\n") as base:
        assert _get(f"{base}/metrics") == (200, PROMETHEUS_TEXT, b"up 1\n")
    with _served(probes) as base:
        assert _get(f"{base}/metrics")[0] == 404


def test_an_unknown_path_is_a_404_plain_when_a_body_is_given() -> None:
    probes = {"/healthz": Probe(lambda: True, b"down\n")}
    with _served(probes, not_found=b"not found\n") as base:
        assert _get(f"{base}/other") == (404, "text/plain", b"not found\n")
    with _served(probes) as base:
        status, kind, _ = _get(f"{base}/other")
        assert (status, kind) == (404, "text/html;charset=utf-8")


def test_a_heartbeat_is_fresh_up_to_its_limit_and_starting_counts_unless_told_not() -> None:
    now = [100.0]
    started = Heartbeat(30, clock=lambda: now[0])
    waiting = Heartbeat(30, clock=lambda: now[0], started=False)
    assert started.fresh() and not waiting.fresh()
    now[0] = 130.0
    assert started.fresh()  # the limit itself is still fresh
    now[0] = 130.5
    assert not started.fresh()
    waiting.beat()
    started.beat()
    assert waiting.fresh() and started.fresh()
    now[0] = 161.0
    assert not waiting.fresh() and not started.fresh()
