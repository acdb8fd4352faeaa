"""While an Allocate answer is on its way, ListAndWatch is not woken: the change waits until the
answer has left (the server says so from gRPC's termination callback), so the streams' rebuild
does not share the interpreter with the answer."""

from __future__ import annotations

from nodeagent.plugin.node import NodeState
from tests.unit.nodeagent.plugin.fakes import FakeCluster, t4_spec


def _node() -> NodeState:
    spec = t4_spec()
    cluster = FakeCluster()
    return NodeState(lambda: spec, cluster, cluster)


def test_a_change_with_no_answer_on_its_way_wakes_the_streams_at_once() -> None:
    node = _node()
    seen = node.version
    node.notify()
    assert node.wait_change(seen, 0.0) == seen + 1


def test_changes_during_an_answer_wake_the_streams_once_it_has_left() -> None:
    node = _node()
    seen = node.version
    answered = node.answering()
    node.notify()
    node.notify()
    assert node.wait_change(seen, 0.05) == seen  # held while the answer is on its way
    answered()
    assert node.wait_change(seen, 0.0) == seen + 1  # the held changes, as one wake
    answered()  # said twice: nothing more is released, and nothing stays held
    assert node.version == seen + 1
    node.notify()
    assert node.version == seen + 2


def test_overlapping_answers_hold_the_change_until_the_last_has_left() -> None:
    node = _node()
    seen = node.version
    first, second = node.answering(), node.answering()
    node.notify()
    first()
    assert node.version == seen
    second()
    assert node.version == seen + 1


def test_an_answer_with_no_change_wakes_nothing() -> None:
    node = _node()
    seen = node.version
    node.answering()()
    assert node.version == seen
