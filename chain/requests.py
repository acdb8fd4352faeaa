"""Accelerator requests of a Pod (or PodSet template): reading, the request rules, the fold.

The Pod webhook is the first gate: it folds a slice's or partition's memory into units, so the
memory reaches Kueue's credits before Kueue scores the Pod, and refuses shapes the later gates
cannot serve. The Workload webhook and the admission check read the same containers into
demands. Everything here is pure; the pool facts the fold divides by are passed in.

Conventions (docs/design/control-plane.md, "Request conventions"): a key's quantity is read from
`requests` first, then `limits`; the fold writes both equal; a refusal reads like a Kubernetes field
error, `<path>: <Type>: <detail>`, anchored at `resources.limits[<key>]`, using Kubernetes' own type
words (`Required value`, `Invalid value: "2"`, `Forbidden`, `Internal error`).

Judgment calls:
- The rules run before the fold (upstream folds, then validates). A refused shape is refused
  either way; checking first means a malformed request is explained even when the pool's card
  memory is unknown, and the fold only meets shapes it can fold.
- A native sidecar (an init container with `restartPolicy: Always`) is left out of every shape
  rule and only rule 7 (no accelerator at all) applies to it.
- Every accelerator key is an extended resource, so its amount must be a whole number from 0 to
  INT32_MAX (rule `whole-quantity`, judged first and alone): the API server would refuse a
  fractional or negative one only after the webhooks ran, with no word of the chain's rules. The
  readers that judge nothing (the Workload webhook, the verdict) round up instead, which never
  reads a request smaller than asked, and clamp at INT32_MAX.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from chain import fields
from chain.families import (
    CARD_SUFFIXES,
    PARTITIONED,
    PARTITIONED_UNITS,
    SHARED,
    SLICED,
    SLICED_CORES_PERCENTAGE,
    SLICED_MEMORY_MIB,
    SLICED_MEMORY_PERCENTAGE,
    SLICED_UNITS,
    Family,
    classify_resource,
)
from chain.labels import QUEUE_ENTRANCE
from chain.manufacturers import ManufacturerTable
from chain.memory import memory_mib
from chain.quantity import QuantityError, parse_quantity
from chain.units import memory_mib_to_units, memory_percentage_to_units

INT32_MAX = 2**31 - 1
DEFAULT_CORES_PERCENTAGE = 100
_ONE = Fraction(1)


class ContainerKind(enum.StrEnum):
    INIT = "init"
    RUNNING = "running"
    SIDECAR = "sidecar"
    """An init container with `restartPolicy: Always` (a native sidecar)."""


@dataclass(frozen=True)
class Request:
    """One accelerator resource key of a container, with the quantity as written."""

    key: str
    raw: str
    value: Fraction
    family: Family
    manufacturer: str
    base: str
    profile: str = ""
    field: str = ""
    """Where the value was read (`spec.containers[0].resources.requests[<key>]`)."""

    @property
    def suffix(self) -> str:
        return self.key[len(self.base) :]


@dataclass(frozen=True)
class Container:
    list_name: str
    """`containers` or `initContainers`."""
    index: int
    name: str
    kind: ContainerKind
    requests: tuple[Request, ...]
    """Accelerator keys only (visibility and foreign keys are not ours to judge)."""
    path: str
    """`spec.containers[0]`: where refusals point."""

    def limit_path(self, key: str = "") -> str:
        return f"{self.path}.resources.limits" + (f"[{key}]" if key else "")

    def families(self) -> list[Family]:
        return sorted({request.family for request in self.requests})

    def of(self, family: Family) -> list[Request]:
        return [request for request in self.requests if request.family == family]

    def find(self, base: str, suffix: str) -> Request | None:
        return next((r for r in self.requests if r.key == base + suffix), None)


def _quantities(resources: fields.Obj, path: str) -> dict[str, tuple[str, str]]:
    """`requests` over `limits`: the value each key is judged by, with the field it came from
    (`<path>.requests[<key>]`), so a refusal points at what the user wrote."""
    merged: dict[str, tuple[str, str]] = {}
    for section in ("limits", "requests"):
        for key, value in fields.child(resources, section, path).items():
            where = f"{path}.{section}[{key}]"
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(
                    f"{where}: Invalid value: expected a quantity (a string such as "
                    f'"1"), got {fields.describe(value)}'
                )
            merged[key] = (str(value), where)
    return merged


def _container(
    obj: fields.Obj, list_name: str, index: int, path: str, table: ManufacturerTable
) -> Container:
    where = f"{path}.{list_name}[{index}]"
    if list_name == "containers":
        kind = ContainerKind.RUNNING
    elif fields.string(obj, "restartPolicy", where) == "Always":
        kind = ContainerKind.SIDECAR
    else:
        kind = ContainerKind.INIT
    requests = []
    resources_path = f"{where}.resources"
    for key, (raw, field_path) in sorted(
        _quantities(fields.child(obj, "resources", where), resources_path).items()
    ):
        klass = classify_resource(key, table)
        if not klass.family.is_accelerator:
            continue
        try:
            value = parse_quantity(raw)
        except QuantityError as err:
            raise ValueError(f'{field_path}: Invalid value: "{err.text}": {err.reason}') from None
        base = table[klass.manufacturer].resource_name
        requests.append(
            Request(
                key, raw, value, klass.family, klass.manufacturer, base, klass.profile, field_path
            )
        )
    return Container(
        list_name, index, fields.string(obj, "name", where), kind, tuple(requests), where
    )


def read_containers(spec: object, path: str, table: ManufacturerTable) -> list[Container]:
    """Init containers then containers of a Pod spec; ValueError naming a malformed field."""
    body = fields.as_object(spec, path)
    return [
        _container(item, list_name, number, path, table)
        for list_name in ("initContainers", "containers")
        for number, (item, _) in enumerate(fields.items(body, list_name, path))
    ]


class Problem(str):
    """One refusal: its message (what the user reads), tagged with the rule that refused
    (`rule`, a short stable name the webhooks count their denials by)."""

    rule: str

    def __new__(cls, rule: str, message: str) -> Problem:
        made = super().__new__(cls, message)
        made.rule = rule
        return made


def rules_of(problems: Iterable[str]) -> tuple[str, ...]:
    """The distinct rules behind some problems, in order (`other` for an untagged one)."""
    return tuple(dict.fromkeys(getattr(problem, "rule", "other") for problem in problems))


# --- the seven request rules -------------------------------------------------------------------


def _go_list(items: Iterable[str]) -> str:
    return "[" + " ".join(items) + "]"


def _whole_card(request: Request | None) -> bool:
    return request is not None and request.value == _ONE


def _percentage(request: Request, what: str) -> str | None:
    if 0 < request.value <= 100:
        return None
    return (
        f'Invalid value: "{request.raw}": must be greater than 0 and at most 100 '
        f"(percent of one card's {what})"
    )


def _sliced_problems(container: Container, base: str) -> list[Problem]:
    at = container.limit_path
    problems: list[Problem] = []
    card = container.find(base, SLICED)
    if card is None:
        problems.append(
            Problem(
                "slice-card",
                f"{at(base + SLICED)}: Required value: a sliced request must set {base}{SLICED}",
            )
        )
    elif not _whole_card(card):
        problems.append(
            Problem(
                "slice-card",
                f'{at(card.key)}: Invalid value: "{card.raw}": a logical slice request is always a '
                "single card; multi-card logical slicing is not supported yet",
            )
        )
    percent = container.find(base, SLICED_MEMORY_PERCENTAGE)
    mib = container.find(base, SLICED_MEMORY_MIB)
    if percent is None and mib is None:
        problems.append(
            Problem(
                "slice-memory",
                f"{at(base + SLICED_MEMORY_PERCENTAGE)}: Required value: a {base}{SLICED} request "
                f"must set {base}{SLICED_MEMORY_PERCENTAGE} or {base}{SLICED_MEMORY_MIB}",
            )
        )
    elif percent is not None and mib is not None:
        problems.append(
            Problem(
                "slice-memory",
                f"{at(mib.key)}: Forbidden: cannot set both {percent.key} and {mib.key}; "
                "keep one of them",
            )
        )
    for request, what in (
        (percent, "memory"),
        (container.find(base, SLICED_CORES_PERCENTAGE), "compute"),
    ):
        problem = None if request is None else _percentage(request, what)
        if request is not None and problem is not None:
            problems.append(Problem("slice-percentage", f"{at(request.key)}: {problem}"))
    if mib is not None and mib.value <= 0:
        problems.append(
            Problem(
                "slice-mib",
                f'{at(mib.key)}: Invalid value: "{mib.raw}": must be greater than 0 '
                "(MiB of one card's memory)",
            )
        )
    return problems


def _partition_problems(container: Container, base: str, table: ManufacturerTable) -> list[Problem]:
    at = container.limit_path
    problems: list[Problem] = []
    card = container.find(base, PARTITIONED)
    if card is None:
        problems.append(
            Problem(
                "partition-card",
                f"{at(base + PARTITIONED)}: Required value: a partition request must set "
                f"{base}{PARTITIONED}",
            )
        )
    elif not _whole_card(card):
        problems.append(
            Problem(
                "partition-card",
                f'{at(card.key)}: Invalid value: "{card.raw}": a partition request is always a '
                "single card; request one Pod per instance",
            )
        )
    profiles = [r for r in container.of(Family.PARTITIONED) if r.base == base and r.profile]
    if not profiles:
        maker = table.by_resource(base)
        kind = maker.partition_kind if maker else ""
        example = (
            f"e.g. {base}{PARTITIONED}.{kind}-<profile>"
            if kind
            else f"but {base} cards cannot be partitioned; ask for {base} or {base}{SLICED}"
        )
        problems.append(
            Problem(
                "partition-profile",
                f"{at(base + PARTITIONED)}: Required value: a {base}{PARTITIONED} request must "
                f"name a profile, {example}",
            )
        )
    elif len(profiles) > 1:
        problems.append(
            Problem(
                "partition-profile",
                f"{at()}: Forbidden: a container may request only one partition profile, found "
                f"{_go_list(r.profile for r in profiles)}",
            )
        )
    for request in profiles:
        if not _whole_card(request):
            problems.append(
                Problem(
                    "partition-profile",
                    f'{at(request.key)}: Invalid value: "{request.raw}": a partition profile '
                    "request must be exactly 1 instance",
                )
            )
    return problems


def _amount_problem(request: Request) -> Problem | None:
    """Every accelerator key is an extended resource, which Kubernetes counts in whole units
    from 0 up; a value past INT32_MAX is more than any node offers (the demands clamp there)."""
    value, where = request.value, request.field
    if value < 0:
        detail = "must be a whole number of at least 0"
    elif value.denominator != 1:
        detail = (
            f"must be a whole number: Kubernetes counts an extended resource such as "
            f"{request.key} in whole units"
        )
    elif value > INT32_MAX:
        detail = f"asks for more than {INT32_MAX}, the most a Pod can ask of {request.key}"
    else:
        return None
    return Problem("whole-quantity", f'{where}: Invalid value: "{request.raw}": {detail}')


def request_problems(containers: Sequence[Container], table: ManufacturerTable) -> list[Problem]:
    """Why the Pod's accelerator requests cannot be served (empty: they can).

    An amount that is not a whole number in range is refused alone: the shape rules read the
    amounts as counts, and judging `-1` or `0.5` cards by them would only add noise."""
    problems: list[Problem] = [
        problem
        for container in containers
        for request in container.requests
        if (problem := _amount_problem(request)) is not None
    ]
    if problems:
        return problems
    shaped = [c for c in containers if c.kind != ContainerKind.SIDECAR and c.requests]
    families = sorted({family for c in shaped for family in c.families()})
    if len(families) > 1:
        problems.append(
            Problem(
                "one-family",
                "spec: Forbidden: a Pod may request only one accelerator family, found "
                f"{_go_list(families)}",
            )
        )
    if len({c.kind for c in shaped}) > 1:
        problems.append(
            Problem(
                "one-container-group",
                "spec.initContainers: Forbidden: a Pod's accelerator requests must all sit in one "
                "container group; found requests in both initContainers and containers, move them "
                "into one of the two",
            )
        )
    profiles = sorted({r.profile for c in shaped for r in c.of(Family.PARTITIONED) if r.profile})
    if len(profiles) > 1:
        problems.append(
            Problem(
                "one-profile",
                "spec: Forbidden: a Pod may request only one partition profile, found "
                f"{_go_list(profiles)}",
            )
        )
    slicing = [c for c in shaped if {Family.SLICED, Family.PARTITIONED} & set(c.families())]
    if len(slicing) > 1:
        problems.append(
            Problem(
                "one-slicing-container",
                "spec: Forbidden: a Pod may request a logical slice or a partition in at most one "
                f"container, found {len(slicing)}",
            )
        )
    for container in containers:
        if container.kind == ContainerKind.SIDECAR:
            if container.requests:
                problems.append(
                    Problem(
                        "sidecar-requests",
                        f"{container.limit_path()}: Forbidden: a restartable init container (a "
                        "native sidecar) may not request an accelerator; move the request to an "
                        "app container",
                    )
                )
            continue
        for base in sorted({r.base for r in container.of(Family.SLICED)}):
            problems.extend(_sliced_problems(container, base))
        for base in sorted({r.base for r in container.of(Family.PARTITIONED)}):
            problems.extend(_partition_problems(container, base, table))
    return problems


# --- the fold ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolFacts:
    """What the fold needs from the InstanceType that fronts a queue."""

    instance_type: str
    accelerator_group: str = ""
    ready: bool = False
    """`status.detail` is filled (`detail.manufacturer` set, upstream's `AcceleratorReady`)."""
    card_memory_mib: int = 0
    """`status.detail.memory`: VRAM of one card of the pool; 0 when not reported."""
    profiles: Mapping[str, int] = field(default_factory=dict)
    """Offered partition profiles (published names) and the memory of each, in MiB."""

    @classmethod
    def from_instance_type(cls, obj: object) -> PoolFacts:
        """Read an InstanceType; ValueError naming the malformed field."""
        body = fields.as_object(obj, "$")
        name = fields.string(fields.child(body, "metadata", "", True), "name", "metadata", True)
        detail = fields.child(fields.child(body, "status", ""), "detail", "status")
        memory = fields.string(detail, "memory", "status.detail")
        try:
            card = memory_mib(memory) if memory else 0
        except ValueError as err:
            raise ValueError(f"status.detail.memory: {err}") from None
        physical_path = "status.detail.slicedDetail.physical"
        physical = fields.child(
            fields.child(detail, "slicedDetail", "status.detail"), "physical", ""
        )
        profiles = {
            fields.string(item, "name", where, True): fields.integer(item, "memoryMib", where)
            for item, where in fields.items(physical, "profiles", physical_path)
        }
        return cls(
            instance_type=name,
            accelerator_group=fields.string(
                fields.child(body, "spec", ""), "acceleratorGroup", "spec"
            ),
            ready=bool(fields.string(detail, "manufacturer", "status.detail")),
            card_memory_mib=card,
            profiles=profiles,
        )


@dataclass(frozen=True)
class Fold:
    writes: dict[int, dict[str, int]]
    """Per container (its position in the list read) the keys to set in requests and limits."""
    problems: list[Problem]
    retryable: bool = False
    """Every problem goes away by itself (the pool has not reported its card details yet)."""


def _unknown(pool: PoolFacts | None, queue: str, what: str) -> str | None:
    """Why the pool's `what` cannot be read, or None when it can."""
    if pool is None:
        return (
            f'no InstanceType fronts the queue "{queue}" '
            f"(label {QUEUE_ENTRANCE}={queue}) as far as the webhook knows"
        )
    if not pool.ready:
        return f'the InstanceType "{pool.instance_type}" has not reported its {what} yet'
    return None


class _Folder:
    def __init__(self, pool: PoolFacts | None, queue: str) -> None:
        self.pool = pool
        self.queue = queue
        self.problems: list[Problem] = []
        self.retryable = True

    def refuse(self, rule: str, path: str, detail: str, retryable: bool = False) -> None:
        self.problems.append(Problem(rule, f"{path}: {detail}"))
        self.retryable = self.retryable and retryable

    def sliced(self, container: Container, base: str, out: dict[str, int]) -> None:
        if container.find(base, SLICED_CORES_PERCENTAGE) is None:
            out[base + SLICED_CORES_PERCENTAGE] = DEFAULT_CORES_PERCENTAGE
        percent = container.find(base, SLICED_MEMORY_PERCENTAGE)
        mib = container.find(base, SLICED_MEMORY_MIB)
        units = None
        if percent is not None and percent.value > 0:
            if percent.value > 100:
                self.refuse(
                    "slice-percentage",
                    container.limit_path(percent.key),
                    f'Invalid value: "{percent.raw}": must be at most 100 '
                    "(percent of one card's memory)",
                )
                return
            units = memory_percentage_to_units(math.ceil(percent.value))
        elif mib is not None and mib.value > 0:
            units = self._mib_units(container, mib, base)
        if units is None:
            return
        if units <= 0:
            self.refuse(
                "slice-units",
                container.limit_path(base + SLICED_UNITS),
                f"Invalid value: {units}: the memory asked for folds into no units of one card; "
                "ask for more memory",
            )
            return
        out[base + SLICED_UNITS] = units

    def _mib_units(self, container: Container, mib: Request, base: str) -> int | None:
        pool = self.pool
        reason = _unknown(pool, self.queue, "card memory (status.detail.memory)")
        if reason is None and pool is not None and pool.card_memory_mib <= 0:
            reason = f'the InstanceType "{pool.instance_type}" reports no card memory'
        if reason is not None or pool is None:
            self.refuse(
                "pool-unknown",
                container.limit_path(mib.key),
                f"Internal error: cannot fold {mib.key} into {base}{SLICED_UNITS}: {reason}; "
                f"retry shortly, or ask for {base}{SLICED_MEMORY_PERCENTAGE} instead",
                retryable=True,
            )
            return None
        card = pool.card_memory_mib
        if mib.value > card:
            self.refuse(
                "slice-mib",
                container.limit_path(mib.key),
                f'Invalid value: "{mib.raw}": exceeds the {card} MiB of one card in the pool of '
                f'InstanceType "{pool.instance_type}"; ask for at most {card}, or for {base} to '
                "get whole cards",
            )
            return None
        return memory_mib_to_units(math.ceil(mib.value), card)

    def partitioned(self, container: Container, base: str, out: dict[str, int]) -> None:
        profiles = [r for r in container.of(Family.PARTITIONED) if r.base == base and r.profile]
        if len(profiles) != 1:
            return
        request = profiles[0]
        path = container.limit_path(request.key)
        pool = self.pool
        reason = _unknown(pool, self.queue, "partition profiles (status.detail.slicedDetail)")
        if reason is not None or pool is None:
            self.refuse(
                "pool-unknown",
                path,
                f"Internal error: cannot fold {request.key} into {base}{PARTITIONED_UNITS}: "
                f"{reason}; retry shortly",
                retryable=True,
            )
            return
        if request.profile not in pool.profiles:
            offered = ", ".join(sorted(pool.profiles)) or "none"
            self.refuse(
                "partition-profile-offered",
                path,
                f'Forbidden: partition profile "{request.profile}" is not offered by the target '
                f"pool (offered: {offered})",
            )
            return
        profile_mib = pool.profiles[request.profile]
        if profile_mib <= 0 or pool.card_memory_mib <= 0:
            self.refuse(
                "pool-unknown",
                path,
                f'Internal error: the InstanceType "{pool.instance_type}" reports no memory for '
                f'partition profile "{request.profile}" or its cards yet; retry shortly',
                retryable=True,
            )
            return
        out[base + PARTITIONED_UNITS] = memory_mib_to_units(profile_mib, pool.card_memory_mib)


def needs_pool(containers: Sequence[Container]) -> bool:
    """True if folding these containers reads the pool (a MiB slice or a partition profile)."""
    return any(
        (r.suffix == SLICED_MEMORY_MIB and r.value > 0) or r.profile
        for c in containers
        for r in c.requests
    )


def fold(containers: Sequence[Container], pool: PoolFacts | None, queue: str) -> Fold:
    """The defaults and the memory fold for every container.

    `.sliced.cores-percentage` defaults to 100; `.sliced.units` is always recomputed, from
    `.sliced.memory-percentage` (p x 16,000) or else `.sliced.memory-mib` over the pool's card
    memory; `.partitioned.units` from the profile's memory over the card memory. `pool` is None
    when no InstanceType is known for `queue`.
    """
    folder = _Folder(pool, queue)
    writes: dict[int, dict[str, int]] = {}
    for position, container in enumerate(containers):
        out: dict[str, int] = {}
        for base in sorted({r.base for r in container.of(Family.SLICED)}):
            folder.sliced(container, base, out)
        for base in sorted({r.base for r in container.of(Family.PARTITIONED)}):
            folder.partitioned(container, base, out)
        if out:
            writes[position] = out
    return Fold(writes, folder.problems, bool(folder.problems) and folder.retryable)


# --- demands read by the Workload webhook and the admission check -----------------------------


def _count(value: Fraction) -> int:
    return min(math.ceil(value), INT32_MAX)


@dataclass(frozen=True)
class FitDemand:
    """`PodSetFitDemand`: what the fit pin asks a node's fit labels for."""

    sliced_units: int = 0
    """Largest `.sliced.units` of a container asking for a `.sliced` card."""
    shared_cards: int = 0
    """Largest `.shared` count of one container."""


def fit_demand(containers: Sequence[Container]) -> FitDemand:
    units = 0
    shared = 0
    for container in containers:
        for request in container.requests:
            if request.suffix == SHARED:
                shared = max(shared, _count(request.value))
            elif request.suffix == SLICED:
                found = container.find(request.base, SLICED_UNITS)
                units = max(units, _count(found.value) if found else 0)
    return FitDemand(units, shared)


@dataclass(frozen=True)
class PodDemand:
    """What one Pod asks for in one family, summed over its containers."""

    family: Family
    manufacturer: str
    cards: int
    """Cards (partition instances for a partition) of one Pod."""
    units_per_card: int = 0
    profile: str = ""
    holders: tuple[int, ...] = ()
    """`.shared` count of each container asking for shared cards."""


@dataclass
class _Tally:
    manufacturer: str
    cards: int = 0
    units: int = 0
    profiles: list[str] = field(default_factory=list)
    holders: list[int] = field(default_factory=list)


def pod_demands(containers: Sequence[Container]) -> list[PodDemand]:
    """One demand per family over every container, init and sidecar included.

    Card keys add up, `.sliced.units`/`.partitioned.units` take the largest, several profiles
    resolve to the smallest name, and every `.shared` container is a holder of its own.
    """
    tallies: dict[Family, _Tally] = {}
    for container in containers:
        for request in container.requests:
            tally = tallies.setdefault(request.family, _Tally(request.manufacturer))
            amount = _count(request.value)
            if request.suffix == CARD_SUFFIXES[request.family]:
                tally.cards = min(tally.cards + amount, INT32_MAX)
                if request.family == Family.SHARED:
                    tally.holders.append(amount)
            elif request.suffix in (SLICED_UNITS, PARTITIONED_UNITS):
                tally.units = max(tally.units, amount)
            elif request.profile:
                tally.profiles.append(request.profile)
    return [
        PodDemand(
            family,
            tally.manufacturer,
            tally.cards,
            tally.units,
            min(tally.profiles, default=""),
            tuple(tally.holders),
        )
        for family, tally in tallies.items()
    ]
