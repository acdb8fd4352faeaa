"""Properties of the flavor hook over generated clusters."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from builders.cluster import (
    CARD_MODELS,
    CPU_MODELS,
    node_request,
    pools_request,
    served_node,
    settings_object,
)
from chain.pools import FlavorIdentity
from hooks.flavor import node, pools
from hooks.flavor.summary import FlavorEntry, NodeSummary, entry_of, scan
from hooks.request import DecoratorRequest, parse_shallow

GKEYS = ("amd-epyc-7763", "intel-xeon-platinum-8358", "amd-25-1")
AKEYS = ("", "", "nvidia-tesla-t4", "nvidia-a10g")


@st.composite
def summaries(draw: st.DrawFn) -> list[NodeSummary]:
    """Up to 12 nodes drawn from a small universe, so flavors are shared often."""
    found = []
    for index in range(draw(st.integers(0, 12))):
        gkey = draw(st.sampled_from(GKEYS))
        cores = draw(st.sampled_from((8, 16)))
        entries = [FlavorEntry(FlavorIdentity(gkey, "", "linux", "amd64", cores))]
        akey = draw(st.sampled_from(AKEYS))
        if akey:
            cards = draw(st.sampled_from((1, 2)))
            device = {"product": akey.upper()}
            entries.append(FlavorEntry(FlavorIdentity(gkey, akey, "linux", "amd64", cards), device))
        cpu = {"manufacturer": gkey.split("-")[0], "product": gkey}
        found.append(NodeSummary(f"node-{index:02d}", bool(akey), cpu, tuple(entries)))
    return found


def _request(items: list[NodeSummary], spec: dict[str, Any]) -> Any:
    return pools_request(settings_object(spec), [item.to_object() for item in items])


@given(summaries(), st.booleans())
def test_capacity_is_count_times_contributors(items: list[NodeSummary], mixed: bool) -> None:
    answer = pools.sync(parse_shallow(_request(items, {"instance-type-mixed-on-node": mixed})))
    expected: dict[str, int] = {}
    for item in items:
        for entry in item.flavors:
            if mixed or entry.identity.acceleratable or not item.acceleratable:
                expected[entry.identity.name] = (
                    expected.get(entry.identity.name, 0) + entry.identity.count
                )
    flavors = [obj for obj in answer["attachments"] if obj["kind"] == "ResourceFlavor"]
    assert {obj["metadata"]["name"] for obj in flavors} == set(expected)
    for obj in flavors:
        labels = obj["metadata"]["labels"]
        capacity = [int(v) for k, v in labels.items() if k.endswith(".capacity")]
        assert capacity == [expected[obj["metadata"]["name"]]]


@given(summaries(), st.randoms(use_true_random=False), st.booleans())
def test_answer_ignores_order_and_map_keys(items: list[NodeSummary], rng: Any, aware: bool) -> None:
    spec = {"instance-type-aware-cpu-manufacturer": aware}
    request = _request(items, spec)
    shuffled = copy.deepcopy(request)
    group = shuffled["related"]["NodeFlavors.gpustack.ai/v1alpha1"]
    entries = list(group.items())
    rng.shuffle(entries)
    # v2 keys cluster-scoped objects by name as v1 does, but a hook must not care either way.
    shuffled["related"]["NodeFlavors.gpustack.ai/v1alpha1"] = {
        f"k{index}": obj for index, (_, obj) in enumerate(entries)
    }
    first = json.dumps(pools.sync(parse_shallow(request)))
    assert json.dumps(pools.sync(parse_shallow(shuffled))) == first


@given(summaries())
def test_observed_types_are_always_returned_unchanged(items: list[NodeSummary]) -> None:
    observed = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "gpustack--nvidia-tesla-t4-linux-amd64", "labels": {"a": "b"}},
        "spec": {"displayName": "kept as the admin left it"},
    }
    request = pools_request(settings_object(), [item.to_object() for item in items], [observed])
    answer = pools.sync(parse_shallow(request))
    types = [obj for obj in answer["attachments"] if obj["kind"] == "InstanceType"]
    assert observed in types
    assert len({obj["metadata"]["name"] for obj in types}) == len(types)


@settings(max_examples=30)
@given(
    st.sampled_from(CPU_MODELS),
    st.sampled_from((None, *CARD_MODELS)),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
)
def test_node_answer_ignores_heartbeats(cpu: Any, card: Any, beat: int, other: int) -> None:
    """Conditions, allocatable, resourceVersion move on every heartbeat; the answer must not."""
    cards = 2 if card else 0
    first = node.sync(
        DecoratorRequest.parse(node_request(served_node("n", cpu, card, cards, heartbeat=beat)))
    )
    second = node.sync(
        DecoratorRequest.parse(node_request(served_node("n", cpu, card, cards, heartbeat=other)))
    )
    assert first == second


@given(summaries())
def test_summary_round_trip(items: list[NodeSummary]) -> None:
    for item in items:
        node, acceleratable, cpu, entries = scan(item.to_object(), "$")
        rebuilt = NodeSummary(node, acceleratable, cpu, tuple(entry_of(e) for e in entries))
        assert rebuilt == item
