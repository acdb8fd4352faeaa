"""One simulated host from a profile of any simulated manufacturer: what the detectors read
(sysfs, and the vendor library they would load) and the device nodes the plugin injects."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from nodeagent.detect.sysfs import Sysfs
from nodeagent.plugin.grants import DeviceNodes, Responder
from nodeagent.plugin.mig import MigNvml
from nodeagent.simulate.nvml import SimulatedNvml
from nodeagent.simulate.profile import parse_profile, profile_manufacturer, read_profile_file
from nodeagent.simulate.recorded import RecordedDcmi
from nodeagent.simulate.recorded_host import RECORDED, recording_of, simulated_recorded_node
from nodeagent.simulate.sysfs import simulated_node
from nodeagent.vendors.amd.simulate import parse_amd_profile, simulated_amd_node
from nodeagent.vendors.ascend.grants import Ascend
from nodeagent.vendors.cambricon.grants import Cambricon
from nodeagent.vendors.cambricon.smlu import SimulatedSmlu
from nodeagent.vendors.hygon.driver import DmiMig
from nodeagent.vendors.hygon.simulate import SimulatedDmi
from nodeagent.vendors.metax.grants import Metax
from nodeagent.vendors.metax.sgpu import SimulatedSgpu
from nodeagent.vendors.thead.simulate import CapabilityNodes, partitioning


@dataclass(frozen=True)
class SimulatedHost:
    sysfs: Sysfs
    nvml: SimulatedNvml | None = None
    injected: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Another manufacturer's simulated library, as its detector's keywords (`DetectorSetup`)."""
    device_nodes: DeviceNodes | None = None
    """The `/dev` nodes Allocate checks and injects; None: the real host's."""
    ascend_share: RecordedDcmi | None = None
    """A simulated Ascend host's DCMI, whose container-share flag the Ascend responder reads
    and turns on (`ContainerShare`); None on every other host."""
    sgpu: SimulatedSgpu | None = None
    """A simulated MetaX host's `sgpu` driver; None on every other host."""
    smlu: SimulatedSmlu | None = None
    """A simulated Cambricon host's sMLU calls; None on every other host."""
    hgml: MigNvml | None = None
    """A simulated T-Head host's HGML partition calls, when a card is in MIG mode."""
    dmi: MigNvml | None = None
    """A simulated Hygon host's DMI partition calls, when its recording has a `dmi:` block."""

    def partition_libraries(self) -> dict[str, MigNvml]:
        """The NVML-shaped libraries this host's partitions are made through (NVIDIA's NVML,
        T-Head's HGML): the simulator keeps its instances in the object the detector reads."""
        found: dict[str, MigNvml] = {}
        if self.nvml is not None:
            found["nvidia"] = cast(MigNvml, self.nvml)
        if self.hgml is not None:
            found["thead"] = self.hgml
        if self.dmi is not None:
            found["hygon"] = self.dmi
        return found

    def responders(self) -> dict[str, Responder]:
        """The responders that act on this host's simulated drivers instead of the real ones."""
        found: dict[str, Responder] = {}
        if self.ascend_share is not None:
            share = self.ascend_share
            found["ascend"] = Ascend(lambda: share)
        if self.sgpu is not None:
            found["metax"] = Metax(self.sgpu)
        if self.smlu is not None:
            smlu = self.smlu
            found["cambricon"] = Cambricon(lambda: smlu)
        return found


def _dmi_mig(dmi: SimulatedDmi | None) -> MigNvml | None:
    return cast(MigNvml, DmiMig(dmi, str(dmi.registry))) if dmi is not None else None


@contextmanager
def simulated_host(name_or_path: str) -> Iterator[SimulatedHost]:
    """The host a shipped profile name or a profile file describes, torn down on exit."""
    path, body = read_profile_file(name_or_path)
    maker = profile_manufacturer(body)
    try:
        if maker == "nvidia":
            nvidia = parse_profile(path.stem, body)
        elif maker == "amd":
            amd = parse_amd_profile(path.stem, body)
        elif maker in RECORDED:
            recording, _ = recording_of(maker, body)
        else:
            simulated = ", ".join(("nvidia", "amd", *RECORDED))
            raise ValueError(f"simulates {maker!r} hardware; simulated here: {simulated}")
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    if maker == "nvidia":
        with simulated_node(nvidia) as (nvml, sysfs):
            yield SimulatedHost(sysfs, nvml=nvml)
    elif maker in RECORDED:
        with simulated_recorded_node(maker, body) as recorded:
            share = recorded.library if isinstance(recorded.library, RecordedDcmi) else None
            hgml = partitioning(recording) if maker == "thead" else None
            nodes = recorded.nodes
            if hgml is not None and nodes is not None:
                nodes = CapabilityNodes(nodes, hgml)
            yield SimulatedHost(
                recorded.sysfs,
                injected={maker: recorded.keywords},
                device_nodes=nodes,
                hgml=cast(MigNvml, hgml) if hgml is not None else None,
                dmi=_dmi_mig(recorded.dmi),
                ascend_share=share,
                sgpu=SimulatedSgpu() if maker == "metax" else None,
                smlu=SimulatedSmlu(recorded.positions) if maker == "cambricon" else None,
            )
    else:
        with simulated_amd_node(amd) as (smi, sysfs):
            injected = {"amd": {"smi": smi}}
            yield SimulatedHost(sysfs, injected=injected, device_nodes=amd.device_nodes())
