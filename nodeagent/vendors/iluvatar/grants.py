"""Iluvatar container responses.

- Exclusive, shared and visibility grants: `IX_VISIBLE_DEVICES` names the cards' UUIDs, which
  `ix-container-runtime` turns into device nodes and the corex libraries.
- Sliced grants: the same variable plus HAMi-core (`hami_core.py`): corex exposes a
  CUDA-compatible `libcuda.so.1`, so NVIDIA's CUDA 12 build serves, staged in one flat directory
  (no runtime-version subdirectory).

HAMi-core on corex is verified upstream at symbol level against a real corex driver, not on
Iluvatar hardware: the pairing is advertised and injected, and unvalidated on cards.

Judgment call: a sliced Pod without `runtimeClassName: iluvatar` (the manufacturer's runtime
name) is refused at Allocate. Without that runtime nothing injects corex, the preloaded
`libvgpu.so` finds no `libcuda.so.1` to hook, and the container would run with neither the card
nor its limits; the seed says such a Pod must carry it, and upstream names no other place that
enforces it.
"""

from __future__ import annotations

from chain.allocation import Code, Refusal
from chain.devices import DevicesGroup
from nodeagent.plugin.grants import (
    Cards,
    DeviceNodes,
    IsolationFile,
    SliceRequest,
    VisibleById,
    staged_dir,
)
from nodeagent.plugin.response import ContainerResponse
from nodeagent.vendors.common.hami_core import hami_core_kit, hami_core_response

MANUFACTURER = "iluvatar"
VISIBLE_DEVICES_ENV = "IX_VISIBLE_DEVICES"
BUILD = "libvgpu.so"
"""NVIDIA's CUDA 12 build, staged flat in the manufacturer's directory."""


class Iluvatar(VisibleById):
    manufacturer = MANUFACTURER
    variable = VISIBLE_DEVICES_ENV
    slices = True

    def sliced(self, cards: Cards, request: SliceRequest, nodes: DeviceNodes) -> ContainerResponse:
        runtime = request.channel.runtime_name
        if runtime and request.channel.pod_runtime_class != runtime:
            raise Refusal(
                Code.FAILED_PRECONDITION,
                f"a sliced Iluvatar container needs its Pod to set runtimeClassName: {runtime} "
                "(ix-container-runtime injects corex; without it HAMi-core finds no "
                "libcuda.so.1 to limit)",
            )
        shown = self.show(cards, nodes)
        staged = staged_dir(request.lib_dir, MANUFACTURER)
        return hami_core_response(shown, cards, request, staged, BUILD)

    def isolation_libraries(self, group: DevicesGroup, lib_dir: str) -> tuple[IsolationFile, ...]:
        return hami_core_kit(staged_dir(lib_dir, MANUFACTURER), BUILD)
