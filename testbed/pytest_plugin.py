"""pytest wiring for the testbed: a session fixture, liveness checks and logs on failure.

Every test under tests/e2e is marked `e2e`. While a testbed is up, a test that fails gets the tail
of each component's log attached to its report, and a component that has died fails the test
that was running with that component's log, instead of every later test timing out.

The two clusters are session fixtures, but neither lives for the whole session: the tests run
grouped by the cluster they use (none, the emulated `testbed`, the `real_cluster`, and last the
modules that take the real install apart), and each cluster goes down as soon as its last test
has finished. On a 2-core machine an idle cluster (its kubelets, controllers and Pods) slows
whatever runs beside it, so one process never runs two at once. `make test` runs the session as
two such processes side by side (`testbed.suite`, each selecting its groups with
`--cluster-groups`): groups 0 and 1 in one, the real nodes' 2 and 3 in the other, since the
tests mostly wait and a single process left the machine half idle.
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
_UPGRADE_DESELECTED = pytest.StashKey[int]()
CLUSTERS = ("testbed", "real_cluster")
_open: dict[str, Testbed] = {}
"""The clusters up now, by fixture name: the fixture opens one, its last test closes it."""
_last_user: dict[str, str] = {}
"""The node id of the last test that uses each cluster, in the order the session runs them."""


UPGRADE_OPTION = "--upgrade-real-nodes"
"""Runs the tests marked `upgrade` (`make upgrade-real-nodes`); without it they are deselected."""
GROUPS_OPTION = "--cluster-groups"
"""Runs only the tests of the cluster groups named (`cluster_group`): `testbed.suite` runs groups
0 and 1 in one process and the real nodes' 2 and 3 in another, side by side."""
GROUPS = (0, 1, 2, 3)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        UPGRADE_OPTION,
        action="store_true",
        default=False,
        help="also run the tests marked `upgrade` (the previous release upgraded on the real "
        "nodes, about 15 min; `make upgrade-real-nodes`); they are deselected otherwise",
    )
    parser.addoption(
        GROUPS_OPTION,
        default=None,
        metavar="G[,G...]",
        help="run only the tests of these cluster groups (0 no shared cluster, 1 the emulated "
        "testbed, 2 the real nodes, 3 the real nodes' modules that reshape the install); "
        "the others are deselected. Default: every group",
    )


def parse_groups(value: str) -> frozenset[int]:
    """`--cluster-groups`' value: a comma-separated list of group numbers, none unknown."""
    groups: set[int] = set()
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) not in GROUPS:
            raise pytest.UsageError(
                f"{GROUPS_OPTION}: {part!r} is not a cluster group; name some of "
                + ", ".join(map(str, GROUPS))
                + ", separated by commas"
            )
        groups.add(int(part))
    return frozenset(groups)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.e2e)
    # The lane's groups first: a lane that never runs the `upgrade` tests says nothing of them.
    option = config.getoption(GROUPS_OPTION)
    if option is not None:
        groups = parse_groups(option)
        others = [item for item in items if cluster_group(item) not in groups]
        if others:
            config.hook.pytest_deselected(items=others)
            items[:] = [item for item in items if cluster_group(item) in groups]
    if not config.getoption(UPGRADE_OPTION):
        # Deselected, not skipped: `make test` does not run them at all (they are long), and
        # the summary counts them as deselected, never as skipped or passed.
        upgrade = [item for item in items if item.get_closest_marker("upgrade")]
        if upgrade:
            config.stash[_UPGRADE_DESELECTED] = len(upgrade)
            config.hook.pytest_deselected(items=upgrade)
            items[:] = [item for item in items if not item.get_closest_marker("upgrade")]
    items.sort(key=cluster_group)


def pytest_report_collectionfinish(config: pytest.Config) -> str:
    count = config.stash.get(_UPGRADE_DESELECTED, 0)
    return f"{count} tests marked `upgrade` deselected; {UPGRADE_OPTION} runs them" if count else ""


def cluster_group(item: pytest.Item) -> int:
    """Where a test runs in the session: 0 without a cluster, 1 on the emulated testbed, 2 on
    the real nodes, 3 on the real nodes after the others (a module that takes the install apart,
    `RESHAPES_THE_INSTALL = True`, so no other test depends on how well it is put back). The
    sort is stable, so the collection order holds within a group."""
    names = getattr(item, "fixturenames", ())
    if "real_cluster" in names:
        return 3 if getattr(getattr(item, "module", None), "RESHAPES_THE_INSTALL", False) else 2
    return 1 if "testbed" in names else 0


def pytest_collection_finish(session: pytest.Session) -> None:
    """Note each cluster's last test among those that will run (after `-m`/`-k` deselection)."""
    _last_user.clear()
    for item in session.items:
        for name in CLUSTERS:
            if name in getattr(item, "fixturenames", ()):
                _last_user[name] = item.nodeid


def pytest_runtest_logfinish(nodeid: str) -> None:
    """Take a cluster down once its last test is reported (its failure logs are read by then)."""
    for name, last in _last_user.items():
        if last == nodeid:
            close(name)


def close(name: str) -> None:
    bed = _open.pop(name, None)
    if bed is not None:
        bed.down()


@pytest.fixture(scope="session")
def testbed() -> Iterator[Testbed]:
    root = Path(tempfile.mkdtemp(prefix="gpustack-testbed-"))
    bed = Testbed(root)
    try:
        bed.up()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    _open["testbed"] = bed
    try:
        yield bed
    finally:
        close("testbed")


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
    _open["real_cluster"] = bed
    try:
        yield bed
    finally:
        close("real_cluster")


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
    beds = [request.getfixturevalue(name) for name in CLUSTERS if name in request.fixturenames]
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
        for name in CLUSTERS:
            bed = getattr(item, "funcargs", {}).get(name)
            if isinstance(bed, Testbed):
                sections += _log_sections(bed)
    report.sections.extend(sections or [])


__all__ = ["REAL_NODES", "ComponentDied", "real_chain", "real_cluster", "testbed"]
