"""The verdict driver under churn (issue #35, item 3): a long stream of Workloads judged, made
to wait, admitted and finished leaves nothing of them in the driver's own state. The memory
figure is the benchmark's (`benchmarks/driver_churn.py`); this guards what it cannot see on a
run whose verdicts are all Ready: a Retry's Workload, judged again and again, must be forgotten
too once it is gone."""

from __future__ import annotations

from kubeapi.watch import Event
from tests.unit.hooks.admission.test_judge import workload
from tests.unit.verdictdriver.test_driver import FakeKube, _driver, _state, _world, pending
from verdictdriver.driver import Driver

ROUNDS = 100


def _finish(kube: FakeKube, name: str) -> None:
    """The owner's job is done: the Workload is deleted, and the watch says so."""
    gone = kube.objects.pop(("Workload", "team-a", name))
    kube.cache.apply(Event("DELETED", gone))


def _kept(driver: Driver) -> dict[str, int]:
    """How many Workloads each of the driver's per-Workload maps still names."""
    holdings = driver.holdings
    return {
        "judged": len(driver.judged),
        "indexed": len(driver.indexed),
        "waiting": len(driver.waiting),
        "malformed": len(driver.malformed),
        "inflight": len(driver.inflight),
        "rejudge": len(driver.rejudge),
        "promises": len(driver.promises.written),
        "holdings by host": len(holdings.by_host),
        "holdings hosts": len(holdings.hosts_of),
        "holdings read": len(holdings.read),
    }


def test_workloads_judged_retried_and_finished_leave_nothing_in_the_driver() -> None:
    # One node of two free cards: each round, a Workload of both cards is made Ready and the
    # one card Workload behind it is told to Retry (the cards are promised); once the first is
    # finished, a tick makes the second Ready, and it is finished too.
    kube = _world()
    driver = _driver(kube)
    driver.step()
    for turn in range(ROUNDS):
        # Judged in the order Kueue reserved them, then by name: the whole-card one first.
        whole, behind = f"w{turn:04d}-a-whole", f"w{turn:04d}-b-behind"
        kube.put(pending(workload(2, "n1", name=whole)))
        kube.put(pending(workload(1, "n1", name=behind)))
        driver.step(tick=False)
        assert [_state(kube, n)["state"] for n in (whole, behind)] == ["Ready", "Retry"], turn
        _finish(kube, whole)
        driver.step(tick=False)
        driver.step(tick=True)
        assert _state(kube, behind)["state"] == "Ready", turn
        _finish(kube, behind)
        driver.step(tick=False)
        if turn in (0, ROUNDS // 2):
            assert _kept(driver) == dict.fromkeys(_kept(driver), 0), turn
    driver.step(tick=True)
    assert _kept(driver) == dict.fromkeys(_kept(driver), 0)
