"""Which A5 (Ascend 950) product a node is, and the HCCL fabric topology file it names.

HCCL reads a node's fabric topology from the file `HCCL_TOPO_FILE_PATH` names; only the A5
generation carries one, chosen by the product's shape. The shape is read from the driver in the
vendor's own two steps: the device's mainboard id recognizes the two inference cards (0x68 the
one-chip card, 0x6c the four-chip card); anything else is what the super pod reports as its
product type (0 eight-chip server, 1 one-dimension pod, 2 two-dimension pod, 3 sixteen-chip
server, 4 thirty-two-chip server, 5 one-chip card, 6 four-chip card).

Both are node-level facts, so an answer is kept for the life of the agent; a failed read is not
(a driver briefly unready is asked again). A number this table has no word for is an answer too.

The directory holding the files is mounted by Ascend's container runtime, so the grant carries
the variable alone, and the file is never looked for on the host. A grant the product cannot be
told for goes ahead without it, logged: the container's own HCCL init then says what is missing,
where refusing the grant would break workloads that never use the fabric.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

TOPOLOGY_ENV = "HCCL_TOPO_FILE_PATH"
TOPOLOGY_DIR = "/usr/local/Ascend/driver/topo/950"
MAINBOARD_CARD_1P = 0x68
MAINBOARD_CARD_4P = 0x6C
PRODUCT_TYPES = {
    0: "server-8p",
    1: "pod-1d",
    2: "pod-2d",
    3: "server-16p",
    4: "server-32p",
    5: "card-1p",
    6: "card-4p",
}
"""The vendor's product-type numbers, by the shape they name."""
TOPOLOGY_FILES = {
    "server-8p": "atlas_850_1.json",
    "pod-1d": "atlas_950_1.json",
    "pod-2d": "atlas_950_2.json",
    "server-16p": "atlas_850_2.json",
    "server-32p": "atlas_850_3.json",
    "card-1p": "atlas_350_1.json",
    "card-4p": "atlas_350_3.json",
}


@runtime_checkable
class ProductReader(Protocol):
    """The two DCMI reads (`DcmiLibrary` implements them); a failure raises."""

    def mainboard_id(self, card: int, device: int) -> int: ...

    def super_pod_type(self, card: int, device: int) -> int: ...


@dataclass(frozen=True)
class Product:
    code: int
    """The vendor's number, exactly as the driver said it."""

    @property
    def shape(self) -> str:
        """Its word (`pod-2d`); empty for a number this table does not know."""
        return PRODUCT_TYPES.get(self.code, "")

    @property
    def topology_file(self) -> str | None:
        file = TOPOLOGY_FILES.get(self.shape)
        return f"{TOPOLOGY_DIR}/{file}" if file else None


class ProductResolver:
    """The node's product, read once it can be: one resolver serves every Ascend plugin."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._product: Product | None = None

    def resolve(self, reader: ProductReader, card: int, device: int) -> Product:
        """The mainboard first (the inference cards), else the super pod's type."""
        with self._lock:
            if self._product is None:
                self._product = _read(reader, card, device)
            return self._product


def _read(reader: ProductReader, card: int, device: int) -> Product:
    try:
        mainboard = reader.mainboard_id(card, device)
    except Exception as error:
        raise LookupError(f"read mainboard id of card {card} device {device}: {error}") from error
    if mainboard == MAINBOARD_CARD_1P:
        return Product(5)
    if mainboard == MAINBOARD_CARD_4P:
        return Product(6)
    try:
        return Product(reader.super_pod_type(card, device))
    except Exception as error:
        raise LookupError(f"read super pod type of card {card} device {device}: {error}") from error


def topology_env(
    resolver: ProductResolver,
    reader: object,
    card_id: str,
    indexes: tuple[int, ...] | None,
) -> dict[str, str]:
    """`{HCCL_TOPO_FILE_PATH: ...}` for an A5 card addressed by its DCMI `(card, device)`
    (`physicalIndexes[1:3]`), or nothing, logged, when the product cannot be told."""
    if indexes is None or len(indexes) < 3:
        log.info("accelerator %s: no DCMI card/device index, so no HCCL topology file", card_id)
        return {}
    if not isinstance(reader, ProductReader):
        log.info("accelerator %s: no DCMI library to read the product from", card_id)
        return {}
    try:
        product = resolver.resolve(reader, indexes[1], indexes[2])
    except LookupError as error:
        log.error("accelerator %s: skipping the HCCL topology file: %s", card_id, error)
        return {}
    path = product.topology_file
    if path is None:
        log.info("accelerator %s: product type %d has no HCCL topology file", card_id, product.code)
        return {}
    return {TOPOLOGY_ENV: path}
