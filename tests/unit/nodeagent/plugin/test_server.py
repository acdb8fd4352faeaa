"""The device-plugin servers over real gRPC on unix sockets, driven by the kubelet emulator."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any

import pytest

from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from chain.units import RESOURCE_MAX_UNITS
from kubeapi import wait_for
from nodeagent.plugin import protos
from nodeagent.plugin.server import PluginServer
from testbed.kubelet import AdmissionError
from tests.unit.nodeagent.plugin.fakes import GPU, SHARED, SLICED, Rig, rig, t4_spec

grpc = protos.grpc_runtime()
CARDS = [card.id for _, card in t4_spec().cards()]


def healthy(devices: dict[str, str]) -> set[str]:
    return {d for d, h in devices.items() if h == protos.HEALTHY}


def card_of(token: str) -> str:
    return token.split(":")[1]


def allocate(r: Rig, mode: Mode, ids: list[str]) -> Any:
    api = protos.deviceplugin()
    resource = {Mode.EXCLUSIVE: GPU, Mode.SHARED: SHARED, Mode.SLICED: SLICED}[mode]
    return r.kubelet.wait_endpoint(resource).stub.Allocate(
        api.AllocateRequest(container_requests=[api.ContainerAllocateRequest(devices_ids=ids)]),
        timeout=10,
    )


def test_each_mode_registers_and_lists_its_tokens() -> None:
    with rig() as r:
        exclusive = r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        shared = r.kubelet.wait_devices(SHARED, lambda d: len(d) == 40)
        sliced = r.kubelet.wait_devices(SLICED, lambda d: len(d) == 4 * 128)
        assert {resource for resource, _ in r.kubelet.registrations} == {GPU, SHARED, SLICED}
        assert ("nvidia.com/gpu.sliced", "nvidia.sliced.sock") in r.kubelet.registrations
        assert {card_of(t) for t in exclusive} == set(CARDS)
        assert healthy(exclusive) == set(exclusive)
        assert f"tesla-t4:{CARDS[0]}:20160000" in shared
        assert f"tesla-t4:{CARDS[3]}:30000127" in sliced
        # One ID, one resource: the kubelet routes health by ID alone.
        assert not set(exclusive) & set(shared) | set(exclusive) & set(sliced)
        assert not set(shared) & set(sliced)
        options = r.kubelet.wait_endpoint(GPU).options
        assert options.get_preferred_allocation_available
        assert not options.pre_start_required


def test_reregisters_when_kubelet_restarts() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        assert r.kubelet.registrations == [(GPU, "nvidia.exclusive.sock")]
        checkpoint = r.kubelet.plugin_dir / "kubelet_internal_checkpoint"
        checkpoint.write_text("{}")
        r.kubelet.restart()  # deletes every socket, ours included, as the kubelet does
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        assert r.kubelet.registrations == [(GPU, "nvidia.exclusive.sock")] * 2
        # The plugin counts a registration once its Register call has returned, which can be
        # after the kubelet has recorded it and listed the devices (a loaded machine shows it).
        wait_for(lambda: r.servers[Mode.EXCLUSIVE].registrations == 2, 30, "the second count")
        assert r.servers[Mode.EXCLUSIVE].registrations == 2
        assert checkpoint.read_text() == "{}", "the kubelet keeps its checkpoint"


def test_registration_retries_until_kubelet_listens() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.kubelet.wait_endpoint(GPU)
        r.kubelet._registration.stop(grace=None)
        r.kubelet.kubelet_socket.unlink(missing_ok=True)
        r.kubelet.endpoints.clear()
        dead = socket.socket(socket.AF_UNIX)  # a socket file nobody accepts on: Register fails
        dead.bind(str(r.kubelet.kubelet_socket))
        time.sleep(0.5)
        assert len(r.kubelet.registrations) == 1
        dead.close()
        r.kubelet.kubelet_socket.unlink()
        r.kubelet.start_registration()
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        assert len(r.kubelet.registrations) == 2


def test_exclusive_grant_marks_the_card_unhealthy_in_other_modes() -> None:
    with rig() as r:
        r.ready()
        pod = r.cluster.add("train", ("main", {GPU: "1"}))
        r.kubelet.admit(pod)
        container, resource, response = r.kubelet.responses[-1]
        assert (container, resource) == ("main", GPU)
        card = response.envs["NVIDIA_VISIBLE_DEVICES"]
        assert card in CARDS
        record = parse_allocated(r.cluster.annotation("train"))["main"]
        rows = [claim.row for claim in record.claims()]
        assert [(row.id, row.mode, row.allocated) for row in rows] == [
            (card, Mode.EXCLUSIVE, RESOURCE_MAX_UNITS)
        ]
        shared = r.kubelet.wait_devices(SHARED, lambda d: len(healthy(d)) == 30)
        assert {card_of(t) for t in set(shared) - healthy(shared)} == {card}
        assert len(shared) == 40  # tokens are never removed for holds
        exclusive = r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        assert healthy(exclusive) == set(exclusive)


def test_shared_grants_pack_onto_one_card() -> None:
    with rig(modes=(Mode.SHARED,)) as r:
        r.kubelet.wait_devices(SHARED, lambda d: len(d) == 40)
        for name in ("a", "b"):
            r.kubelet.admit(r.cluster.add(name, ("main", {SHARED: "1"})))
        seen = [response.envs["NVIDIA_VISIBLE_DEVICES"] for _, _, response in r.kubelet.responses]
        assert seen == [CARDS[0], CARDS[0]]
        ledger = r.node.ledger()
        assert (
            ledger.rows().__next__()[1].remaining
            == RESOURCE_MAX_UNITS - 2 * RESOURCE_MAX_UNITS // 10
        )


def test_two_shares_of_one_card_in_one_request_are_refused() -> None:
    with rig(modes=(Mode.SHARED,)) as r:
        r.kubelet.wait_devices(SHARED, lambda d: len(d) == 40)
        r.cluster.add("greedy", ("main", {SHARED: "2"}))
        ids = [f"tesla-t4:{CARDS[0]}:0000", f"tesla-t4:{CARDS[0]}:160000"]
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.SHARED, ids)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert r.cluster.writes == []


def test_sliced_grant_answers_hami_core_environment() -> None:
    with rig(modes=(Mode.SLICED,)) as r:
        r.kubelet.wait_devices(SLICED, lambda d: len(d) == 512)
        limits = {SLICED: "1", SLICED + ".units": "400000", SLICED + ".memory-percentage": "25"}
        pod = r.cluster.add("infer", ("main", limits))
        r.kubelet.admit(pod)
        _, _, response = r.kubelet.responses[-1]
        assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert response.envs["CUDA_DEVICE_SM_LIMIT"] == "100"
        assert {m.container_path for m in response.mounts} >= {"/tmp/vgpulock", "/tmp/vgpu"}
        assert any(path.endswith("/uid-infer/c-main") for path in r.made)
        record = parse_allocated(r.cluster.annotation("infer"))["main"]
        assert [(c.row.mode, c.row.allocated) for c in record.claims()] == [(Mode.SLICED, 400000)]


def test_sliced_gate_refuses_a_slice_that_does_not_fit() -> None:
    with rig(modes=(Mode.SLICED,)) as r:
        r.kubelet.wait_devices(SLICED, lambda d: len(d) == 512)
        big = {
            SLICED: "1",
            SLICED + ".units": str(RESOURCE_MAX_UNITS),
            SLICED + ".memory-mib": "1024",
        }
        r.cluster.add("big", ("main", big))
        allocate(r, Mode.SLICED, [f"tesla-t4:{CARDS[0]}:0000"])
        r.cluster.add("more", ("main", {**big, SLICED + ".units": "1"}))
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.SLICED, [f"tesla-t4:{CARDS[0]}:0001"])
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "has 0 of 1600000 units free and the slice needs 1" in caught.value.details()


def test_cross_mode_request_is_refused_with_the_vector_message() -> None:
    with rig() as r:
        r.ready()
        r.cluster.add("whole", ("main", {GPU: "1"}))
        allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[0]}:0000"])
        r.cluster.add("share", ("main", {SHARED: "1"}))
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.SHARED, [f"tesla-t4:{CARDS[0]}:0000"])
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert caught.value.details() == (
            f"card {CARDS[0]} is held in Exclusive mode, cannot allocate it in Shared mode"
        )
        assert r.cluster.annotation("share") == ""


def test_kubelet_admission_never_crosses_modes() -> None:
    with rig() as r:
        r.ready()
        for n in range(4):
            r.kubelet.admit(r.cluster.add(f"w{n}", ("main", {GPU: "1"})))
        pod = r.cluster.add("late", ("main", {SHARED: "1"}))
        r.kubelet.wait_devices(SHARED, lambda d: not healthy(d))
        with pytest.raises(AdmissionError) as caught:
            r.kubelet.admit(pod)
        assert caught.value.code == "Insufficient"


def test_concurrent_exclusive_pods_get_distinct_cards() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        for n in range(4):
            r.cluster.add(f"p{n}", ("main", {GPU: "1"}))
        errors: list[BaseException] = []

        def call(card: str) -> None:
            try:
                allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{card}:0000"])
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=call, args=(card,)) for card in CARDS]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        held = [
            next(parse_allocated(r.cluster.annotation(f"p{n}"))["main"].claims()).row.id
            for n in range(4)
        ]
        assert sorted(held) == sorted(CARDS)


def test_slow_writer_gets_deadline_exceeded_and_rolls_back() -> None:
    with rig(modes=(Mode.EXCLUSIVE,), deadline_s=0.3) as r:
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        r.cluster.add("slow", ("main", {GPU: "1"}))
        r.cluster.delay = 0.6
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[1]}:0000"])
        assert time.monotonic() - started < 0.55
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (r.node.reserved() or len(r.cluster.writes) < 2):
            time.sleep(0.05)
        assert r.node.reserved() == {}
        assert r.cluster.annotation("slow") == ""  # the late write was undone


def test_failed_write_releases_the_reservation() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        r.cluster.add("broken", ("main", {GPU: "1"}))
        r.cluster.fail = RuntimeError("apiserver said no")
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[0]}:0000"])
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert "apiserver said no" in caught.value.details()
        assert r.node.reserved() == {}


def test_no_pending_pod_is_an_error_not_a_grant() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.kubelet.wait_devices(GPU, lambda d: len(d) == 4)
        with pytest.raises(grpc.RpcError) as caught:
            allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[0]}:0000"])
        assert caught.value.code() == grpc.StatusCode.INTERNAL
        assert json.dumps(r.node.reserved()) == "{}"


def test_pod_resources_names_the_pod_kubelet_is_admitting() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.ready()
        r.cluster.add("older", ("main", {GPU: "1"}))  # pending, but kubelet is not on it
        newer = r.cluster.add("newer", ("main", {GPU: "1"}))
        r.kubelet.admit(newer)
        assert r.cluster.annotation("older") == ""
        assert "main" in parse_allocated(r.cluster.annotation("newer"))


def test_oldest_pending_pod_wins_without_kubelet_naming_it() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.ready()
        r.cluster.add("older", ("main", {GPU: "1"}))
        r.cluster.add("newer", ("main", {GPU: "1"}))
        allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[2]}:0000"])  # kubelet lists no Pod
        assert "main" in parse_allocated(r.cluster.annotation("older"))
        allocate(r, Mode.EXCLUSIVE, [f"tesla-t4:{CARDS[3]}:0000"])  # older is served: skip it
        assert "main" in parse_allocated(r.cluster.annotation("newer"))


def test_sliced_hint_packs_onto_the_fullest_card_that_fits() -> None:
    with rig(modes=(Mode.SLICED,)) as r:
        r.ready()
        limits = {SLICED: "1", SLICED + ".units": "600000", SLICED + ".memory-mib": "1024"}
        for name in ("a", "b", "c"):
            r.kubelet.admit(r.cluster.add(name, ("main", limits)))
        cards = [card_of(hint[0]) for _, hint in r.kubelet.hints]
        assert cards == [CARDS[0], CARDS[0], CARDS[1]]  # a third 600000 no longer fits card 0


def test_health_returns_when_the_holding_pod_is_gone() -> None:
    with rig(modes=(Mode.EXCLUSIVE, Mode.SHARED)) as r:
        r.ready()
        pod = r.cluster.add("brief", ("main", {GPU: "1"}))
        r.kubelet.admit(pod)
        r.kubelet.wait_devices(SHARED, lambda d: len(healthy(d)) == 30)
        r.cluster.remove("brief")
        r.kubelet.forget(pod)
        r.node.notify()  # the Pod watch's tick
        r.kubelet.wait_devices(SHARED, lambda d: len(healthy(d)) == 40)
        assert r.node.reserved() == {}


def test_malformed_device_ids_are_invalid_arguments() -> None:
    with rig(modes=(Mode.EXCLUSIVE,)) as r:
        r.ready()
        r.cluster.add("odd", ("main", {GPU: "1"}))
        for ids in (["not-a-token"], []):
            with pytest.raises(grpc.RpcError) as caught:
                allocate(r, Mode.EXCLUSIVE, ids)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert r.cluster.writes == []


def test_an_old_agent_stopping_leaves_the_socket_of_the_new_one() -> None:
    """Two agents of one manufacturer overlap on a node (a DaemonSet in another namespace
    starting while the old one's Pod terminates): the new one takes the endpoint the old one
    still serves, and the old one's shutdown must leave the new one's socket (gRPC removes the
    path it bound when it stops), which the kubelet keeps dialing (#35)."""
    with rig(modes=(Mode.SLICED,)) as r:
        old = r.servers[Mode.SLICED]
        r.kubelet.wait_devices(SLICED, lambda d: len(d) > 0)
        # The new agent's server; it looks at its socket only once the test is done.
        new = PluginServer(old.allocator, str(r.kubelet.plugin_dir), poll_s=3600)
        new.start()
        try:
            deadline = time.monotonic() + 30
            while len(r.kubelet.registrations) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert r.kubelet.registrations == [(SLICED, "nvidia.sliced.sock")] * 2
            served = os.stat(new.socket_path).st_ino
            old.stop()  # SIGTERM to the old agent
            assert os.path.exists(new.socket_path), "the old agent removed the new one's socket"
            assert os.stat(new.socket_path).st_ino == served
            with grpc.insecure_channel(f"unix://{new.socket_path}") as channel:
                stub = protos.deviceplugin_grpc().DevicePluginStub(channel)
                stub.GetDevicePluginOptions(protos.deviceplugin().Empty(), timeout=10)
        finally:
            new.stop()
        assert not os.path.exists(new.socket_path)  # its own socket goes with it
        assert not [p for p in r.kubelet.plugin_dir.iterdir() if p.name.startswith(".")]
