"""The allocation journal: a grant is durable before Allocate answers and its annotation lands
right after; an agent killed between the answer and the annotation loses nothing and charges
nothing twice."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

from chain.allocation import GrantRequest, decide_grant
from chain.ledger import DevicesStatus, Mode
from chain.ledger_rebuild import Holder, parse_allocated, render_allocated
from nodeagent.plugin import protos
from nodeagent.plugin.journal import Journal, JournaledWriter, recover
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.server import plugin_servers
from testbed.kubelet import KubeletEmulator
from tests.unit.nodeagent.plugin.fakes import GPU, NVIDIA, SHARED, FakeCluster, t4_spec

grpc = protos.grpc_runtime()


def _uid(cluster: FakeCluster) -> Any:
    def uid(namespace: str, name: str) -> str | None:
        pod = next(
            (p for p in cluster.pods() if p["metadata"]["name"] == name),
            None,
        )
        return None if pod is None else str(pod["metadata"]["uid"])

    return uid


def test_entries_land_in_order_and_the_file_empties_when_none_is_left(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    a = journal.append("ns", "a", "uid-a", "one")
    b = journal.append("ns", "b", "uid-b", "two")
    assert [e.name for e in journal.pending()] == ["a", "b"]
    journal.landed(a)
    assert [e.name for e in Journal(tmp_path / "j").pending()] == ["b"]  # what a restart reads
    journal.landed(b)
    assert (tmp_path / "j").read_text() == ""


def test_a_restart_reads_a_pods_latest_entry_and_skips_a_torn_line(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j")
    journal.append("ns", "a", "uid-a", "first")
    journal.append("ns", "a", "uid-a", "second")
    with (tmp_path / "j").open("a") as f:
        f.write('{"seq": 3, "namespace": "ns", "na')  # the agent died mid-write
    [entry] = Journal(tmp_path / "j").pending()
    assert (entry.name, entry.value) == ("a", "second")


def test_write_returns_at_once_and_the_annotation_follows_with_retries(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.add("p", ("main", {GPU: "1"}))
    release = threading.Event()
    failures = [RuntimeError("the API server is away")]

    class Slow:
        def write(self, namespace: str, name: str, value: str) -> None:
            release.wait()
            if failures:
                raise failures.pop()
            cluster.write(namespace, name, value)

    journal = Journal(tmp_path / "j")
    writer = JournaledWriter(journal, Slow(), _uid(cluster), _uid(cluster), backoff=(0.01, 0.02))
    started = time.monotonic()
    writer.write("default", "p", "the-record")
    assert time.monotonic() - started < 0.1
    assert [e.value for e in journal.pending()] == ["the-record"]
    release.set()
    assert writer.drain(5.0)
    assert cluster.annotation("p") == "the-record"
    assert journal.pending() == []


def test_a_record_for_a_pod_that_is_gone_or_replaced_is_dropped(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.add("p", ("main", {GPU: "1"}))

    class Failing:
        def write(self, namespace: str, name: str, value: str) -> None:
            raise RuntimeError("404")

    journal = Journal(tmp_path / "j")
    writer = JournaledWriter(journal, Failing(), _uid(cluster), _uid(cluster), backoff=(0.01, 0.02))
    writer.write("default", "p", "the-record")
    cluster.remove("p")
    assert writer.drain(5.0)
    assert journal.pending() == []


def test_a_write_waits_while_an_answer_is_on_its_way_and_lands_once_it_has_left(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    cluster.add("p", ("main", {GPU: "1"}))
    cluster.add("q", ("main", {GPU: "1"}))
    writer = JournaledWriter(
        Journal(tmp_path / "j"), cluster, _uid(cluster), _uid(cluster), answer_hold=30.0
    )
    answered = writer.answering()
    writer.write("default", "p", "the-record")
    assert not writer.drain(0.2)  # durable in the journal, its write held for the answer
    assert cluster.annotation("p") == ""
    answered()
    assert writer.drain(5.0)
    assert cluster.annotation("p") == "the-record"
    answered()  # said twice: the second changes nothing, so the next write is not held
    writer.write("default", "q", "another")
    assert writer.drain(5.0)
    assert cluster.annotation("q") == "another"


def test_an_answer_that_never_says_it_left_holds_a_write_no_longer_than_the_hold(
    tmp_path: Path,
) -> None:
    cluster = FakeCluster()
    cluster.add("p", ("main", {GPU: "1"}))
    writer = JournaledWriter(
        Journal(tmp_path / "j"), cluster, _uid(cluster), _uid(cluster), answer_hold=0.1
    )
    writer.answering()  # never said to have left
    started = time.monotonic()
    writer.write("default", "p", "the-record")
    assert writer.drain(5.0)
    assert time.monotonic() - started >= 0.1
    assert cluster.annotation("p") == "the-record"


def test_the_plugin_server_holds_a_grants_write_until_its_rpc_has_ended() -> None:
    """The annotation follows the answer: the server says when its Allocate RPC ended (gRPC's
    termination callback), so the write does not wait out the hold."""
    root = Path(tempfile.mkdtemp(prefix="kdh", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    servers: list[Any] = []
    try:
        cluster = FakeCluster()
        pod = cluster.add("p", ("main", {GPU: "1"}))
        writer = JournaledWriter(
            Journal(root / "journal"), cluster, _uid(cluster), _uid(cluster), answer_hold=30.0
        )
        said: list[str] = []
        hold = writer.answering

        def answering() -> Any:
            answered = hold()
            said.append("answering")

            def left() -> None:
                said.append("left")
                answered()

            return left

        writer.answering = answering  # type: ignore[method-assign]
        spec = t4_spec()
        node = NodeState(lambda: spec, cluster, writer)
        servers = plugin_servers(
            node, NVIDIA, str(kubelet.plugin_dir), None, pods_dir=str(root / "pods")
        )
        for server in servers:
            server.start()
        kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=30)
        kubelet.admit(pod)
        assert writer.drain(10.0)  # well inside the 30 s hold: the RPC's end released it
        assert said == ["answering", "left"]
        granted = kubelet.known[("default", "p")]["main"][GPU]
        assert sorted(parse_allocated(cluster.annotation("p"))["main"].device_ids) == sorted(
            granted
        )
    finally:
        for server in servers:
            server.stop()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- the agent killed between answer and annotation -------------------------------------------


def _agent_whose_api_never_answers(root: str, pods: list[Any], ready: Connection) -> None:
    """A node agent's plugin servers whose annotation writes never return (the API server is
    slow): every grant is answered from the journal alone. Runs until killed."""
    by_name = {p["metadata"]["name"]: p for p in pods}

    class Pods:
        def pods(self) -> list[Any]:
            return list(by_name.values())

    class Stuck:
        def write(self, namespace: str, name: str, value: str) -> None:
            threading.Event().wait()

    def uid(namespace: str, name: str) -> str | None:
        return str(by_name[name]["metadata"]["uid"]) if name in by_name else None

    spec = t4_spec()
    writer = JournaledWriter(Journal(Path(root) / "journal"), Stuck(), uid, uid)  # type: ignore[arg-type]
    node = NodeState(lambda: spec, Pods(), writer)
    plugin_dir = str(Path(root) / "device-plugins")
    for server in plugin_servers(node, NVIDIA, plugin_dir, None, pods_dir=str(Path(root) / "pods")):
        server.start()
    ready.send(True)
    threading.Event().wait()


def test_an_agent_killed_between_answer_and_annotation_loses_and_double_charges_nothing() -> None:
    root = Path(tempfile.mkdtemp(prefix="kdj", dir="/tmp"))
    kubelet = KubeletEmulator(root)
    child = None
    try:
        cluster = FakeCluster()
        first = cluster.add("first", ("main", {GPU: "1"}))
        context = multiprocessing.get_context("spawn")
        mine, theirs = context.Pipe()
        child = context.Process(
            target=_agent_whose_api_never_answers,
            args=(str(root), cluster.pods(), theirs),
            daemon=True,
        )
        child.start()
        assert mine.poll(60) and mine.recv()
        kubelet.wait_devices(GPU, lambda d: len(d) == 4, timeout=30)
        kubelet.admit(first)  # answered: kubelet would start the container on the card now
        granted = kubelet.known[("default", "first")]["main"][GPU]
        assert cluster.annotation("first") == ""  # the annotation never landed
        os.kill(child.pid, signal.SIGKILL)  # type: ignore[arg-type]
        child.join(10)

        # A new agent over the same journal, whose API writes wait until told to go on.
        go = threading.Event()

        class Gated:
            def write(self, namespace: str, name: str, value: str) -> None:
                go.wait()
                cluster.write(namespace, name, value)

        spec = t4_spec()
        journal = Journal(root / "journal")
        writer = JournaledWriter(journal, Gated(), _uid(cluster), _uid(cluster))
        node = NodeState(lambda: spec, cluster, writer)
        assert recover(journal, node, cluster.pods()) == 1
        writer.replay()
        [(holder, record)] = node.reserved().items()
        assert holder == Holder("uid-first", "main")
        assert sorted(record.device_ids) == sorted(granted)

        # While the replayed annotation is still on its way, the card is not free: a second
        # Pod asking a share of the very same card is refused (kubelet itself never hands an
        # exclusive ID out twice; what a lost record would let through is another mode).
        servers = plugin_servers(
            node, NVIDIA, str(kubelet.plugin_dir), None, pods_dir=str(root / "pods")
        )
        try:
            for server in servers:
                server.start()
            cluster.add("second", ("main", {SHARED: "1"}))
            api = protos.deviceplugin()
            stub = kubelet.wait_endpoint(SHARED).stub
            card = granted[0].split(":")[1]
            share = [f"tesla-t4:{card}:20160000"]
            with pytest.raises(grpc.RpcError) as refused:
                stub.Allocate(
                    api.AllocateRequest(
                        container_requests=[api.ContainerAllocateRequest(devices_ids=share)]
                    ),
                    timeout=10,
                )
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "is held in Exclusive mode" in (refused.value.details() or "")
            go.set()
            assert writer.drain(10)
            assert (
                parse_allocated(cluster.annotation("first"))["main"].device_ids == record.device_ids
            )
            assert json.dumps(cluster.annotation("second")) == '""'
            assert journal.pending() == []
        finally:
            for server in servers:
                server.stop()
    finally:
        if child is not None and child.is_alive():
            child.kill()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_agent_recovers_the_journal_before_its_servers_start(tmp_path: Path) -> None:
    """`nodeagent serve`'s wiring: an entry a previous agent left unwritten is held again and
    written when the plugins are first published; one for a Pod that is gone is dropped."""
    from nodeagent.plugin.running import DevicePlugins, NodeRecords
    from tests.unit.nodeagent.plugin.fakes import FakeKube

    cluster = FakeCluster()
    cluster.add("kept", ("main", {GPU: "1"}))
    spec = t4_spec()
    group, first = next(iter(spec.cards()))
    token = f"{group.id}:{first.id}:0000"
    granted = GrantRequest(NVIDIA.name, Mode.EXCLUSIVE, (token,), Holder("uid-kept", "main"))
    record = render_allocated({"main": decide_grant(spec, DevicesStatus(), {}, granted, None)})
    left = Journal(tmp_path / "journal")
    left.append("default", "kept", "uid-kept", record)
    left.append("default", "gone", "uid-gone", record)
    left.close()

    records = NodeRecords.connect(
        FakeKube(cluster, spec),  # type: ignore[arg-type]
        "node-a",
        journal=tmp_path / "journal",
    )
    plugins = DevicePlugins(records, {}, plugin_dir=str(tmp_path / "plugins"))
    try:
        plugins.publish(frozenset())
        assert set(plugins.node.reserved()) == {Holder("uid-kept", "main")}
        assert records.writer is not None and records.writer.drain(5.0)
        assert parse_allocated(cluster.annotation("kept"))["main"].device_ids == (token,)
        assert (tmp_path / "journal").read_text() == ""
    finally:
        plugins.stop()
