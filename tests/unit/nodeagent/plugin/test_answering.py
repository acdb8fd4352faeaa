"""While an Allocate answer is on its way, ListAndWatch is not woken: the change waits until the
answer has left (the server says so from gRPC's termination callback), so the streams' rebuild
does not share the interpreter with the answer. Except a grant that takes a card (`announce`):
every stream is woken at once and the answer waits until each has given its kubelet the list."""

from __future__ import annotations

import threading
import time

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


# -- announce: a grant that takes a card is told to every stream before its answer ------------


def test_an_announce_waits_for_every_open_stream_to_give_its_kubelet_the_change() -> None:
    node = _node()
    shared, whole = node.stream_opened(), node.stream_opened()
    node.stream_sent(shared, node.version)
    node.stream_sent(whole, node.version)
    target = node.version + 1
    told = threading.Timer(0.05, lambda: [node.stream_sent(k, target) for k in (shared, whole)])
    told.start()
    started = time.monotonic()
    assert node.announce(5.0)  # returns once both have sent, not at the timeout
    assert time.monotonic() - started < 4.0
    told.join()


def test_an_announce_wakes_the_streams_even_while_an_answer_is_on_its_way() -> None:
    node = _node()
    seen = node.version
    node.answering()  # this very Allocate's answer, not left yet
    assert node.announce(0.0)  # no stream open: nothing to wait for, and yet not held
    assert node.wait_change(seen, 0.0) == seen + 1


def test_an_announce_gives_up_on_a_stream_that_stays_behind() -> None:
    node = _node()
    behind, current = node.stream_opened(), node.stream_opened()
    told = threading.Timer(0.02, lambda: node.stream_sent(current, node.version))
    told.start()
    assert not node.announce(0.2)
    told.join()
    node.stream_sent(behind, node.version - 1)  # a list built before the change is not enough
    assert not node.announce(0.0)


def test_a_closed_stream_holds_no_announce() -> None:
    node = _node()
    assert node.announce(0.0)  # no stream: nothing to wait for
    gone = node.stream_opened()
    node.stream_closed(gone)
    assert node.announce(0.0)
