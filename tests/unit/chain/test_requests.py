"""Reading accelerator requests, the seven request rules and the fold (docs/design/vectors.md, "Pod
webhook fold")."""

from __future__ import annotations

from typing import Any

import pytest

from chain.families import Family
from chain.manufacturers import ManufacturerTable
from chain.requests import (
    Container,
    ContainerKind,
    FitDemand,
    PodDemand,
    PoolFacts,
    fit_demand,
    fold,
    needs_pool,
    pod_demands,
    read_containers,
    request_problems,
)

GPU = "nvidia.com/gpu"
SL = GPU + ".sliced"
UNITS = SL + ".units"
PCT = SL + ".memory-percentage"
MIB = SL + ".memory-mib"
CORES = SL + ".cores-percentage"
PT = GPU + ".partitioned"
PT_UNITS = PT + ".units"
QUEUE = "gpustack-fnv64-6b371caa2da0b799"
CARD = PoolFacts("gpustack--nvidia-a100-linux-amd64", "nvidia-a100", True, 40960)


def box(limits: dict[str, Any], name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits}, **extra}


def spec(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": list(containers)}
    if init:
        out["initContainers"] = list(init)
    return out


def read(table: ManufacturerTable, *containers: dict[str, Any], **kw: Any) -> list[Container]:
    return read_containers(spec(*containers, **kw), "spec", table)


def problems(table: ManufacturerTable, *containers: dict[str, Any], **kw: Any) -> list[str]:
    return request_problems(read(table, *containers, **kw), table)


def folded(
    table: ManufacturerTable, limits: dict[str, Any], pool: PoolFacts | None = CARD
) -> dict[str, int]:
    result = fold(read(table, box(limits)), pool, QUEUE)
    assert result.problems == []
    return result.writes.get(0, {})


def fold_problems(
    table: ManufacturerTable, limits: dict[str, Any], pool: PoolFacts | None = CARD
) -> tuple[list[str], bool]:
    result = fold(read(table, box(limits)), pool, QUEUE)
    return result.problems, result.retryable


# --- reading ------------------------------------------------------------------------------------


def test_requests_win_over_limits_and_foreign_keys_are_ignored(table: ManufacturerTable) -> None:
    container = {
        "name": "main",
        "resources": {
            "requests": {GPU: "2", "cpu": "4"},
            "limits": {GPU: "3", "device.gpustack.ai/nvidia.visibility": "1", "x.com/y": "1"},
        },
    }
    (only,) = read(table, container)
    assert [(r.key, r.raw, r.family) for r in only.requests] == [(GPU, "2", Family.EXCLUSIVE)]
    assert only.kind == ContainerKind.RUNNING and only.path == "spec.containers[0]"


def test_container_kinds_and_paths(table: ManufacturerTable) -> None:
    init = ({"name": "a"}, {"name": "b", "restartPolicy": "Always"})
    found = read(table, {"name": "c"}, init=init)
    assert [(c.name, c.kind, c.path) for c in found] == [
        ("a", ContainerKind.INIT, "spec.initContainers[0]"),
        ("b", ContainerKind.SIDECAR, "spec.initContainers[1]"),
        ("c", ContainerKind.RUNNING, "spec.containers[0]"),
    ]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"containers": "x"}, "spec.containers: expected a list"),
        ({"containers": [{"resources": {"limits": {GPU: "two"}}}]}, "[nvidia.com/gpu]"),
        ({"containers": [{"resources": {"limits": {GPU: True}}}]}, "expected a quantity"),
    ],
)
def test_malformed_specs_name_the_field(
    table: ManufacturerTable, raw: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        read_containers(raw, "spec", table)


def test_an_unreadable_quantity_names_the_section_it_was_read_from(
    table: ManufacturerTable,
) -> None:
    container = {"name": "c", "resources": {"requests": {GPU: "1e308"}, "limits": {GPU: "1"}}}
    with pytest.raises(ValueError) as refused:
        read_containers({"containers": [container]}, "spec", table)
    assert str(refused.value) == (
        'spec.containers[0].resources.requests[nvidia.com/gpu]: Invalid value: "1e308": has an '
        "exponent beyond 10^±30, more than the chain counts"
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("-1", "must be a whole number of at least 0"),
        ("0.5", f"must be a whole number: Kubernetes counts an extended resource such as {GPU}"),
        ("1500m", "must be a whole number"),
        ("2147483648", f"asks for more than 2147483647, the most a Pod can ask of {GPU}"),
        ("9223372036854775808", "asks for more than 2147483647"),
    ],
)
def test_a_card_count_out_of_range_is_refused_alone(
    table: ManufacturerTable, value: str, detail: str
) -> None:
    """Rule "whole-quantity": an extended resource is counted in whole units from 0 (the API
    server refuses anything else after the webhooks ran); the shape rules are not run on it."""
    container = box({GPU: value, GPU + ".shared": "1"})  # two families: a rule it also breaks
    found = request_problems(read(table, container), table)
    assert len(found) == 1, found
    assert found[0].startswith(f'{LIMITS}[{GPU}]: Invalid value: "{value}": {detail}')
    assert [getattr(problem, "rule", "") for problem in found] == ["whole-quantity"]


def test_zero_and_int32_max_are_card_counts(table: ManufacturerTable) -> None:
    assert problems(table, box({GPU: "0"})) == []
    assert problems(table, box({GPU: "2147483647"})) == []


# --- the fold (vectors) -----------------------------------------------------------------------


def test_memory_percentage_folds_and_cores_default(table: ManufacturerTable) -> None:
    assert folded(table, {SL: "1", PCT: "20"}) == {CORES: 100, UNITS: 320000}


def test_memory_mib_folds_over_the_card(table: ManufacturerTable) -> None:
    assert folded(table, {SL: "1", MIB: "4096"}) == {CORES: 100, UNITS: 160000}


def test_explicit_cores_are_kept(table: ManufacturerTable) -> None:
    assert folded(table, {SL: "1", PCT: "20", CORES: "50"}) == {UNITS: 320000}


def test_units_are_always_recomputed(table: ManufacturerTable) -> None:
    assert folded(table, {SL: "1", PCT: "50", UNITS: "1"})[UNITS] == 800000


def test_percentage_needs_no_pool(table: ManufacturerTable) -> None:
    assert folded(table, {SL: "1", PCT: "20"}, pool=None)[UNITS] == 320000
    assert not needs_pool(read(table, box({SL: "1", PCT: "20"})))
    assert needs_pool(read(table, box({SL: "1", MIB: "1"})))


def test_no_memory_key_leaves_units_unset_and_the_pod_is_rejected(
    table: ManufacturerTable,
) -> None:
    assert folded(table, {SL: "1"}) == {CORES: 100}
    assert any("Required value" in p for p in problems(table, box({SL: "1"})))


def test_memory_mib_without_card_memory_is_an_error(table: ManufacturerTable) -> None:
    found, retryable = fold_problems(table, {SL: "1", MIB: "4096"}, pool=None)
    assert retryable
    assert found == [
        f"spec.containers[0].resources.limits[{MIB}]: Internal error: cannot fold {MIB} into "
        f'{UNITS}: no InstanceType fronts the queue "{QUEUE}" (label '
        f"schedule.gpustack.ai/queue-entrance={QUEUE}) as far as the webhook knows; retry "
        f"shortly, or ask for {PCT} instead"
    ]
    not_ready = PoolFacts("it", "nvidia-a100")
    (text,), retryable = fold_problems(table, {SL: "1", MIB: "4096"}, not_ready)
    assert retryable and 'the InstanceType "it" has not reported its card memory' in text


def test_memory_percentage_over_100_is_an_error(table: ManufacturerTable) -> None:
    found, retryable = fold_problems(table, {SL: "1", PCT: "200"})
    assert not retryable
    assert found == [
        f'spec.containers[0].resources.limits[{PCT}]: Invalid value: "200": must be at most 100 '
        "(percent of one card's memory)"
    ]


def test_memory_mib_over_the_card_is_an_error(table: ManufacturerTable) -> None:
    found, retryable = fold_problems(table, {SL: "1", MIB: "81920"})
    assert not retryable
    assert found == [
        f'spec.containers[0].resources.limits[{MIB}]: Invalid value: "81920": exceeds the 40960 '
        f'MiB of one card in the pool of InstanceType "{CARD.instance_type}"; ask for at most '
        f"40960, or for {GPU} to get whole cards"
    ]


def test_partition_profile_folds_over_the_card(table: ManufacturerTable) -> None:
    pool = PoolFacts("it", "nvidia-h20", True, 98304, {"7g.96gb": 98304, "1g.12gb": 12288})
    limits = {PT: "1", PT + ".mig-7g.96gb": "1"}
    assert folded(table, limits, pool) == {PT_UNITS: 1600000}
    assert folded(table, {PT: "1", PT + ".mig-1g.12gb": "1"}, pool) == {PT_UNITS: 200000}


def test_partition_fold_problems(table: ManufacturerTable) -> None:
    limits = {PT: "1", PT + ".mig-2g.20gb": "1"}
    pool = PoolFacts("it", "nvidia-a100", True, 40960, {"1g.10gb": 9856, "3g.40gb": 0})
    (text,), retryable = fold_problems(table, limits, pool)
    assert not retryable
    assert text == (
        f"spec.containers[0].resources.limits[{PT}.mig-2g.20gb]: Forbidden: partition profile "
        '"2g.20gb" is not offered by the target pool (offered: 1g.10gb, 3g.40gb)'
    )
    (text,), retryable = fold_problems(table, {PT: "1", PT + ".mig-3g.40gb": "1"}, pool)
    assert retryable and "reports no memory for partition profile" in text
    (text,), retryable = fold_problems(table, limits, PoolFacts("it", "nvidia-a100"))
    assert retryable and "partition profiles (status.detail.slicedDetail)" in text
    (text,), retryable = fold_problems(table, limits, None)
    assert retryable and "no InstanceType fronts the queue" in text


# --- the seven rules ----------------------------------------------------------------------------

LIMITS = "spec.containers[0].resources.limits"


@pytest.mark.parametrize(
    "limits",
    [
        {GPU: "2"},
        {GPU + ".shared": "3"},
        {SL: "1", PCT: "20"},
        {SL: "1", MIB: "4096", CORES: "100"},
        {PT: "1", PT + ".mig-1g.10gb": "1"},
        {},
    ],
)
def test_accepted_shapes(table: ManufacturerTable, limits: dict[str, Any]) -> None:
    assert problems(table, box(limits)) == []


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        (
            {SL: "1"},
            f"{LIMITS}[{PCT}]: Required value: a {SL} request must set {PCT} or {MIB}",
        ),
        (
            {SL: "1", UNITS: "320000"},
            f"{LIMITS}[{PCT}]: Required value: a {SL} request must set {PCT} or {MIB}",
        ),
        (
            {UNITS: "320000", PCT: "20"},
            f"{LIMITS}[{SL}]: Required value: a sliced request must set {SL}",
        ),
        (
            {SL: "1", PCT: "20", MIB: "4096"},
            f"{LIMITS}[{MIB}]: Forbidden: cannot set both {PCT} and {MIB}; keep one of them",
        ),
        (
            {SL: "1", PCT: "0"},
            f'{LIMITS}[{PCT}]: Invalid value: "0": must be greater than 0 and at most 100 '
            "(percent of one card's memory)",
        ),
        (
            {SL: "1", PCT: "20", CORES: "101"},
            f'{LIMITS}[{CORES}]: Invalid value: "101": must be greater than 0 and at most 100 '
            "(percent of one card's compute)",
        ),
        (
            {SL: "1", MIB: "0"},
            f'{LIMITS}[{MIB}]: Invalid value: "0": must be greater than 0 '
            "(MiB of one card's memory)",
        ),
        (
            {SL: "2", PCT: "20"},
            f'{LIMITS}[{SL}]: Invalid value: "2": a logical slice request is always a single '
            "card; multi-card logical slicing is not supported yet",
        ),
        (
            {SL: "1m", PCT: "20"},
            f'{LIMITS}[{SL}]: Invalid value: "1m": must be a whole number: Kubernetes counts an '
            f"extended resource such as {SL} in whole units",
        ),
        (
            {PT + ".mig-1g.10gb": "1"},
            f"{LIMITS}[{PT}]: Required value: a partition request must set {PT}",
        ),
        (
            {PT: "2", PT + ".mig-1g.10gb": "1"},
            f'{LIMITS}[{PT}]: Invalid value: "2": a partition request is always a single card; '
            "request one Pod per instance",
        ),
        (
            {PT: "1"},
            f"{LIMITS}[{PT}]: Required value: a {PT} request must name a profile, e.g. "
            f"{PT}.mig-<profile>",
        ),
        (
            {PT: "1", PT + ".mig-1g.10gb": "2"},
            f'{LIMITS}[{PT}.mig-1g.10gb]: Invalid value: "2": a partition profile request must '
            "be exactly 1 instance",
        ),
        (
            {"amd.com/gpu.partitioned": "1"},
            "spec.containers[0].resources.limits[amd.com/gpu.partitioned]: Required value: a "
            "amd.com/gpu.partitioned request must name a profile, but amd.com/gpu cards cannot "
            "be partitioned; ask for amd.com/gpu or amd.com/gpu.sliced",
        ),
    ],
)
def test_rejected_shapes(table: ManufacturerTable, limits: dict[str, Any], expected: str) -> None:
    assert problems(table, box(limits)) == [expected]


def test_two_profiles_in_one_container(table: ManufacturerTable) -> None:
    limits = {PT: "1", PT + ".mig-1g.10gb": "1", PT + ".mig-2g.20gb": "1"}
    assert problems(table, box(limits)) == [
        "spec: Forbidden: a Pod may request only one partition profile, found [1g.10gb 2g.20gb]",
        f"{LIMITS}: Forbidden: a container may request only one partition profile, found "
        "[1g.10gb 2g.20gb]",
    ]


def test_two_families_in_one_pod(table: ManufacturerTable) -> None:
    found = problems(table, box({GPU: "1"}), box({SL: "1", PCT: "10"}, "side"))
    assert found == [
        "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive sliced]"
    ]
    assert problems(table, box({GPU: "1", GPU + ".shared": "1"})) == [
        "spec: Forbidden: a Pod may request only one accelerator family, found [exclusive shared]"
    ]


def test_one_container_group(table: ManufacturerTable) -> None:
    found = problems(table, box({GPU: "1"}), init=(box({GPU: "1"}, "setup"),))
    assert found == [
        "spec.initContainers: Forbidden: a Pod's accelerator requests must all sit in one "
        "container group; found requests in both initContainers and containers, move them into "
        "one of the two"
    ]


def test_one_slicing_container(table: ManufacturerTable) -> None:
    a = box({SL: "1", PCT: "10"}, "a")
    b = box({SL: "1", PCT: "10"}, "b")
    assert problems(table, a, b) == [
        "spec: Forbidden: a Pod may request a logical slice or a partition in at most one "
        "container, found 2"
    ]
    pa = box({PT: "1", PT + ".mig-1g.10gb": "1"}, "a")
    pb = box({PT: "1", PT + ".mig-1g.10gb": "1"}, "b")
    assert problems(table, pa, pb)[0].endswith("found 2")


def test_sidecars_may_not_request_accelerators(table: ManufacturerTable) -> None:
    sidecar = box({GPU: "1"}, "proxy", restartPolicy="Always")
    assert problems(table, box({GPU: "1"}), init=(sidecar,)) == [
        "spec.initContainers[0].resources.limits: Forbidden: a restartable init container (a "
        "native sidecar) may not request an accelerator; move the request to an app container"
    ]
    visibility = box({"device.gpustack.ai/nvidia.visibility": "1"}, "sshd", restartPolicy="Always")
    assert problems(table, box({GPU: "1"}), init=(visibility,)) == []


def test_init_containers_alone_are_one_group(table: ManufacturerTable) -> None:
    assert problems(table, {"name": "main"}, init=(box({GPU: "1"}, "warm"),)) == []


# --- demands ------------------------------------------------------------------------------------


def test_fit_demand(table: ManufacturerTable) -> None:
    def demand(*containers: dict[str, Any]) -> FitDemand:
        return fit_demand(read(table, *containers))

    assert demand(box({SL: "1", UNITS: "800000"})) == FitDemand(800000, 0)
    assert demand(box({UNITS: "800000"})) == FitDemand(0, 0)
    assert demand(box({GPU + ".shared": "2"}), box({GPU + ".shared": "3"}, "b")) == FitDemand(0, 3)
    assert demand(box({GPU: "2"})) == FitDemand(0, 0)
    assert demand(box({SL: "1", UNITS: str(2**40)})).sliced_units == 2**31 - 1


def test_pod_demands(table: ManufacturerTable) -> None:
    found = pod_demands(
        read(
            table,
            box({GPU + ".shared": "2"}, "a"),
            box({GPU + ".shared": "1"}, "b"),
            init=(box({GPU + ".shared": "3"}, "c"),),
        )
    )
    assert found == [PodDemand(Family.SHARED, "nvidia", 6, holders=(3, 2, 1))]
    sliced = pod_demands(read(table, box({SL: "1", UNITS: "320000", PCT: "20"})))
    assert sliced == [PodDemand(Family.SLICED, "nvidia", 1, 320000)]
    two = {PT: "1", PT + ".mig-2g.20gb": "1", PT + ".mig-1g.10gb": "1", PT_UNITS: "5"}
    assert pod_demands(read(table, box(two))) == [
        PodDemand(Family.PARTITIONED, "nvidia", 1, 5, "1g.10gb")
    ]


# --- pool facts -------------------------------------------------------------------------------


def instance_type(detail: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": "gpustack--nvidia-a100-linux-amd64"},
        "spec": {"acceleratorGroup": "nvidia-a100", "acceleratable": True},
        "status": {"detail": detail} if detail is not None else {},
    }


def test_pool_facts_from_an_instance_type() -> None:
    detail = {
        "manufacturer": "nvidia",
        "memory": "40Gi",
        "slicedDetail": {
            "physical": {
                "count": 7,
                "profiles": [{"name": "1g.5gb", "count": 7, "memoryMib": 4864}],
            }
        },
    }
    assert PoolFacts.from_instance_type(instance_type(detail)) == PoolFacts(
        "gpustack--nvidia-a100-linux-amd64", "nvidia-a100", True, 40960, {"1g.5gb": 4864}
    )
    assert PoolFacts.from_instance_type(instance_type()) == PoolFacts(
        "gpustack--nvidia-a100-linux-amd64", "nvidia-a100"
    )
    with pytest.raises(ValueError, match=r"status\.detail\.memory"):
        PoolFacts.from_instance_type(instance_type({"memory": "lots"}))
