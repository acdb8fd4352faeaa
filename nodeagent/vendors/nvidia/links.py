"""NVIDIA's card-to-card fabric: which card pairs reach each other over NVLink (directly or
through NVSwitch), as NVML's peer-to-peer status says (docs/topology.md, "Network cards").

`nvmlDeviceGetP2PStatus` with the NVLink capability answers per pair whatever the wiring: an
NVSwitch board (every card on one fabric), a bridge between two PCIe cards, or none. Reading
each link's remote PCI address (`nvmlDeviceGetNvLinkRemotePciInfo_v2`) would name the NVSwitch
rather than the peer card on such a board, so the pairwise status is the one answer that fits all.
"""

from __future__ import annotations

from nodeagent.detect.base import DetectorSetup
from nodeagent.detect.sysfs import pci_address
from nodeagent.vendors.common.nvml import Nvml, load_nvml
from nodeagent.vendors.common.nvml_mig import text


def nvlink_pairs(nvml: Nvml) -> list[tuple[str, str]]:
    """The card pairs (PCI addresses, each pair in order) NVML says are joined by NVLink.

    No driver, or a driver that cannot answer for a pair, gives no pair: the PCIe tree then
    decides how those cards reach each other, which is never better than the truth."""
    try:
        nvml.nvmlInit()  # reference counted in NVML: the detector holds its own
        handles = [nvml.nvmlDeviceGetHandleByIndex(n) for n in range(nvml.nvmlDeviceGetCount())]
        cards = [(pci_address(text(nvml.nvmlDeviceGetPciInfo(h).busId)), h) for h in handles]
    except nvml.NVMLError:
        return []
    pairs = []
    for number, (first, one) in enumerate(cards):
        for second, other in cards[number + 1 :]:
            try:
                status = nvml.nvmlDeviceGetP2PStatus(one, other, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
            except nvml.NVMLError:
                continue
            if status == nvml.NVML_P2P_STATUS_OK:
                pairs.append((first, second) if first < second else (second, first))
    return sorted(pairs)


def direct_links(setup: DetectorSetup) -> list[tuple[str, str]]:
    """`Vendor.direct_links`: over the simulated NVML the setup carries, or the host's."""
    nvml = setup.nvml if setup.nvml is not None else load_nvml()
    return [] if nvml is None else nvlink_pairs(nvml)
