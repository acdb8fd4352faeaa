"""A Devices object's conditions (docs/nodeagent.md, "Conditions of the Devices"), from what the
node agents know.

A node runs one agent per manufacturer of its cards, and each writes the Devices status beside
the others (server-side apply, a field manager of its own). So a condition that one agent alone
knows is its own type, and the node's are computed by each agent the same way from what every
agent has written:

- `<manufacturer>.gpustack.ai/Detected`, one per manufacturer an agent serves: its last detection
  pass measured the cards (`Measured`), or failed and the cards found before are kept
  (`DetectionFailed`, with the detector's error);
- `SlicingAvailable`: no group of the Devices spec withholds its logical slices (a group that
  does names its problem in `slicingUnavailable`: `SlicingUnavailable`);
- `Ready`: every agent's Detected condition holds (`DetectionFailed`, naming the manufacturers,
  otherwise). A node whose slices are withheld is still Ready: its whole cards serve.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chain.conditions import FALSE, Condition
from chain.devices import DevicesGroup

READY = "Ready"
SLICING_AVAILABLE = "SlicingAvailable"
DETECTED = "Detected"
DETECTED_SUFFIX = f".gpustack.ai/{DETECTED}"

MEASURED = "Measured"
DETECTION_FAILED = "DetectionFailed"
SLICING_UNAVAILABLE = "SlicingUnavailable"


def detected_type(manufacturer: str) -> str:
    """The Detected condition of one manufacturer's agent (`nvidia.gpustack.ai/Detected`)."""
    return f"{manufacturer}{DETECTED_SUFFIX}"


def detected(manufacturer: str, cards: int, error: str | None) -> Condition:
    """One manufacturer's last pass: `error` None when it measured (`cards` found), else why
    it failed ("" when the detector gave no reason)."""
    type_ = detected_type(manufacturer)
    if error is None:
        found = f"{cards} card{'s' if cards != 1 else ''}" if cards else "no card"
        return Condition.of(type_, True, MEASURED, f"the last detection measured {found}")
    why = f": {error}" if error else ""
    message = f"the last detection failed{why}; the cards detected before are kept"
    return Condition.of(type_, False, DETECTION_FAILED, message)


def slicing(groups: Iterable[DevicesGroup]) -> Condition:
    withheld = [
        f"{group.accelerator_key}: {group.slicing_unavailable}"
        for group in groups
        if group.slicing_unavailable
    ]
    if withheld:
        message = "logical slices withheld: " + "; ".join(withheld)
        return Condition.of(SLICING_AVAILABLE, False, SLICING_UNAVAILABLE, message)
    message = "no group withholds its logical slices"
    return Condition.of(SLICING_AVAILABLE, True, SLICING_AVAILABLE, message)


def ready(own: Sequence[Condition], held: Any) -> Condition:
    """The node's Ready from this agent's Detected conditions (`own`) and the other agents'
    among the `held` status.conditions."""
    mine = {condition.type for condition in own}
    failed = [c.type.removesuffix(DETECTED_SUFFIX) for c in own if not c.holds]
    for entry in held if isinstance(held, list) else ():
        if not isinstance(entry, Mapping):
            continue
        type_ = str(entry.get("type") or "")
        if type_.endswith(DETECTED_SUFFIX) and type_ not in mine and entry.get("status") == FALSE:
            failed.append(type_.removesuffix(DETECTED_SUFFIX))
    if failed:
        message = f"the detection of {', '.join(sorted(failed))} failed (see their Detected)"
        return Condition.of(READY, False, DETECTION_FAILED, message)
    return Condition.of(READY, True, READY, "every manufacturer's detection measured its cards")


def devices_conditions(
    measured: Mapping[str, tuple[int, str | None]],
    groups: Iterable[DevicesGroup],
    held: Any,
) -> tuple[Condition, ...]:
    """What one agent writes: its manufacturers' Detected (`measured`: manufacturer -> (cards,
    error or None)), then SlicingAvailable from every group of the spec, then Ready."""
    own = tuple(detected(maker, *measured[maker]) for maker in sorted(measured))
    return (*own, slicing(groups), ready(own, held))
