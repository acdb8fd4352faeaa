"""pytest wiring for the testbed: a session fixture, liveness checks and logs on failure.

Every test under tests/e2e is marked `e2e`. While a testbed is up, a test that fails gets the tail
of each component's log attached to its report, and a component that has died fails the test
that was running with that component's log, instead of every later test timing out.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from testbed.cluster import REAL_NODES, install_chain, start_nodes
from testbed.harness import COMPONENT_ORDER, ComponentDied, Testbed

_LOGS = pytest.StashKey[list[tuple[str, str]]]()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    root = Path(tempfile.mkdtemp(prefix="gpustack-testbed-"))
    bed = Testbed(root)
    try:
        bed.up()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield bed
    finally:
        bed.down()


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[Testbed]:
    """A control plane of its own (etcd, the API server, the scheduler and every default
    controller; Kueue, Metacontroller and NFD come as Pods with `real_chain`) with real nodes
    (kubelet, containerd, runc, kube-proxy), CoreDNS, and the project's image on every node.
    Separate from `testbed`, whose tests register fake Nodes and must not see these."""
    root = Path(tempfile.mkdtemp(prefix="gpustack-cluster-"))
    bed = Testbed(root, real_nodes=True)
    try:
        bed.up(components=COMPONENT_ORDER[:3])
        start_nodes(bed, REAL_NODES)
    except BaseException:
        bed.down()
        raise
    try:
        yield bed
    finally:
        bed.down()


@pytest.fixture(scope="session")
def real_chain(real_cluster: Testbed) -> Testbed:
    """`real_cluster` with the whole install on it, as a user installs: NFD, Kueue and
    Metacontroller from their own manifests, then the shipped manifests in one pass
    (`testbed.cluster.install_chain`); every chain component runs as a Pod from the image."""
    install_chain(real_cluster, REAL_NODES)
    return real_cluster


@pytest.fixture(autouse=True)
def _components_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the running test, with the dead component's log, if a component exits."""
    beds = [
        request.getfixturevalue(name)
        for name in ("testbed", "real_cluster")
        if name in request.fixturenames
    ]
    for bed in beds:
        _check(bed, request.node)
    yield
    for bed in beds:
        _check(bed, request.node)


def _check(bed: Testbed, item: pytest.Item) -> None:
    try:
        bed.check_alive()
    except ComponentDied:
        # Keep the logs now: when the last test fails at teardown, the session fixture has
        # already removed the run folder by the time its report is made.
        item.stash[_LOGS] = _log_sections(bed)
        raise


def _log_sections(bed: Testbed) -> list[tuple[str, str]]:
    return [(f"testbed log: {name}", bed.log_tail(name)) for name in bed.state.processes]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    sections = item.stash.get(_LOGS, None)
    if sections is None:
        sections = []
        for name in ("testbed", "real_cluster"):
            bed = getattr(item, "funcargs", {}).get(name)
            if isinstance(bed, Testbed):
                sections += _log_sections(bed)
    report.sections.extend(sections or [])


__all__ = ["REAL_NODES", "ComponentDied", "real_chain", "real_cluster", "testbed"]
