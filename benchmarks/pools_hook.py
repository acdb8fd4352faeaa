"""How the pools hook's cost compares with just decoding its request, at 1,000 and 5,000 nodes.

    python -m benchmarks.pools_hook [--sizes 1000 5000] [--repeats 30] [--levels 3]

For each size: generate a cluster (8 CPU models, 6 card models), run the Node decorator on every
node to get its labels and its NodeFlavors summary (as the API server would then serve them), and
build the pools request Metacontroller sends in steady state (every summary related, last answer's
objects attached). Then, interleaved in one run, time `json.loads` of the body alone and
`json.loads` + the route (its shallow parse, then `pools.sync`) + `json.dumps(answer)`, and print
p50/p95 of both and their ratio (goal: at most 3 at 5,000 nodes). Also print how large the body
would be if the hook related the full Node objects instead of the summaries.

`--levels 3`: the settings name a block/rack/hostname profile (docs/topology.md, "Topology
profiles") and every node but each tenth carries block and rack labels (16 nodes a rack, 4 racks
a block), so summaries name their levels and the pools split over two profiles.
"""

from __future__ import annotations

import argparse
import json
import statistics

from benchmarks.timing import measure, percentile
from builders.cluster import (
    Obj,
    node_request,
    pools_request,
    random_cluster,
    served,
    settings_object,
)
from chain.labels import HOSTNAME
from hooks.flavor import node, pools
from hooks.request import DecoratorRequest, parse_shallow
from hooks.transport import shallow_route


def _labelled(obj: Obj, labels: dict[str, str | None]) -> Obj:
    """The Node after Metacontroller applied the decorator's labels."""
    current = dict(obj["metadata"]["labels"])
    for key, value in labels.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return {**obj, "metadata": {**obj["metadata"], "labels": current}}


BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
LEVELS = {1: [HOSTNAME], 3: [BLOCK, RACK, HOSTNAME]}


def _racked(obj: Obj, index: int) -> Obj:
    """Every node but each tenth gets block and rack labels; the tenth stays hostname-only."""
    if index % 10 == 9:
        return obj
    place = {BLOCK: f"block-{index // 64}", RACK: f"rack-{index // 16}"}
    labels = {**obj["metadata"]["labels"], **place}
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}


def build(size: int, levels: int = 1) -> tuple[bytes, bytes, int, int]:
    """(body with summaries, body with full Nodes, #summaries, #attachments)."""
    settings = settings_object({"topology-levels": LEVELS[levels]} if levels > 1 else None)
    summaries: list[Obj] = []
    nodes: list[Obj] = []
    for index, served_obj in enumerate(random_cluster(size)):
        obj = _racked(served_obj, index) if levels > 1 else served_obj
        answer = node.sync(DecoratorRequest.parse(node_request(obj, settings)))
        labelled = _labelled(obj, answer["labels"])
        nodes.append(labelled)
        summaries.extend(served(summary, labelled) for summary in answer["attachments"])
    # Steady state: the last answer's objects come back as observed attachments.
    attached = pools.sync(parse_shallow(pools_request(settings, summaries)))["attachments"]
    body = pools_request(settings, summaries, attached)
    with_nodes = {**body, "related": {"Node.v1": {n["metadata"]["name"]: n for n in nodes}}}
    return (
        json.dumps(body).encode(),
        json.dumps(with_nodes).encode(),
        len(summaries),
        len(attached),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--levels", type=int, choices=sorted(LEVELS), default=1)
    args = parser.parse_args()

    print(
        f"{'nodes':>6} {'summaries':>9} {'attached':>8} {'body':>9} {'with Nodes':>11}"
        f" {'loads p50':>9} {'p95':>7} {'sync p50':>9} {'p95':>7} {'ratio p50':>9} {'p95':>5}"
    )
    for size in args.sizes:
        raw, with_nodes, count, attached = build(size, args.levels)
        decoded, synced = measure(raw, shallow_route(pools.sync), args.repeats)
        d50, d95 = statistics.median(decoded), percentile(decoded, 0.95)
        s50, s95 = statistics.median(synced), percentile(synced, 0.95)
        print(
            f"{size:>6} {count:>9} {attached:>8} {len(raw) / 2**20:>7.2f}Mi"
            f" {len(with_nodes) / 2**20:>9.2f}Mi {d50 * 1e3:>7.1f}ms {d95 * 1e3:>5.1f}ms"
            f" {s50 * 1e3:>7.1f}ms {s95 * 1e3:>5.1f}ms {s50 / d50:>9.2f} {s95 / d95:>5.2f}"
        )


if __name__ == "__main__":
    main()
