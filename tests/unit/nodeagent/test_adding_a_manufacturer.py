"""docs/adding-a-manufacturer.md, followed for a made-up tenth manufacturer, `acme`.

Its package is written as the guide's step 2 lists it (a binding's Protocol, `detect.py`,
`grants.py`, `simulate.py`, `vendor.py`) into a temporary folder on `sys.path`, registered as
step 3 says (one more entry in `VENDORS`), with step 1's table entry built beside the table.
Then the engine, untouched, must serve it: `simulated_host` opens its profile, the detector
registry's detection finds the simulated cards, and an Allocate through `Allocator` is answered by
its responder and recorded on the Pod. If the guide needs a step this test cannot follow, the
guide is wrong.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from chain.devices import DevicesSpec
from chain.ledger import Mode
from chain.ledger_rebuild import parse_allocated
from chain.manufacturers import Manufacturer, ManufacturerTable, manufacturers
from chain.settings import StartupEnv
from nodeagent.detect.registry import DetectorSetup, detections
from nodeagent.plugin.allocator import Allocator, Attempt
from nodeagent.plugin.grants import SimulatedNodes
from nodeagent.plugin.node import NodeState
from nodeagent.plugin.responders import responder_for
from nodeagent.simulate.host import simulated_host
from nodeagent.vendors import registry
from tests.unit.nodeagent.plugin.fakes import FakeCluster

PACKAGE = "acme_vendor"
"""The temporary package standing where `nodeagent/vendors/acme/` would."""

ACME = Manufacturer("acme", "1f0a", "acme.example/xpu", "", "")
"""Step 1: the table entry (`chain/manufacturers.py`, `_BUILTIN`)."""

MODULES = {
    "__init__.py": '''
        """Acme's XPUs: cards read through the made-up `acme-smi` library."""
        ''',
    "smi.py": '''
        """The calls the detector makes on acme-smi; only the simulator answers them here."""

        from __future__ import annotations

        from typing import Protocol


        class Smi(Protocol):
            def cards(self) -> list[dict[str, object]]: ...

            def driver_version(self) -> str: ...


        def open_smi() -> Smi | None:
            return None  # no acme-smi library exists on any host
        ''',
    "detect.py": """
        from __future__ import annotations

        from collections.abc import Callable

        from chain.manufacturers import Manufacturer
        from nodeagent.detect.sysfs import Sysfs
        from nodeagent.detect.vendor import CardReading, GroupFacts, VendorDetector
        from nodeagent.detect.vendor import logically_sliced
        from acme_vendor.smi import Smi, open_smi

        ACME = "acme"


        class AcmeDetector(VendorDetector[Smi]):
            manufacturer = ACME

            def __init__(
                self,
                smi: Smi | None = None,
                sysfs: Sysfs | None = None,
                maker: Manufacturer | None = None,
                group_id_with_memory: bool = False,
                opener: Callable[[], Smi | None] = open_smi,
            ) -> None:
                super().__init__(smi, opener, sysfs, maker, group_id_with_memory)

            def read_cards(self, interface: Smi) -> list[CardReading]:
                return [
                    CardReading(
                        id=str(card["uuid"]),
                        name=str(card["name"]),
                        memory_mib=int(str(card["memoryMib"])),
                        bus_id=str(card["bus"]),
                        physical_indexes=(position,),
                        status=logically_sliced(4, False),
                    )
                    for position, card in enumerate(interface.cards())
                ]

            def group_facts(self, interface: Smi, card: CardReading) -> GroupFacts:
                return GroupFacts(driver_version=interface.driver_version())
        """,
    "grants.py": """
        from nodeagent.plugin.grants import VisibleById


        class Acme(VisibleById):
            manufacturer = "acme"
            variable = "ACME_VISIBLE_DEVICES"
        """,
    "simulate.py": """
        from __future__ import annotations

        import tempfile
        from collections.abc import Iterator
        from contextlib import contextmanager
        from pathlib import Path

        from chain import fields
        from nodeagent.simulate.base import SimulatedHost, Simulator
        from nodeagent.simulate.sysfs import write_pci_sysfs
        from acme_vendor.detect import ACME


        class SimulatedSmi:
            def __init__(self, cards: list[dict[str, object]], driver: str) -> None:
                self._cards = cards
                self._driver = driver

            def cards(self) -> list[dict[str, object]]:
                return self._cards

            def driver_version(self) -> str:
                return self._driver


        def parse(name: str, body: fields.Obj) -> SimulatedSmi:
            cards = [card for card, _ in fields.items(body, "cards", "$", required=True)]
            return SimulatedSmi(cards, fields.string(body, "driverVersion", "$", required=True))


        @contextmanager
        def host(smi: SimulatedSmi) -> Iterator[SimulatedHost]:
            with tempfile.TemporaryDirectory(prefix="gpustack-sim-acme-") as folder:
                on_bus = [(str(card["bus"]), 0) for card in smi.cards()]
                sysfs = write_pci_sysfs(Path(folder), "0x1f0a", "0x120000", on_bus, None)
                yield SimulatedHost(sysfs, injected={ACME: {"smi": smi}})


        SIMULATOR = Simulator(parse, host)
        """,
    "vendor.py": """
        from nodeagent.detect.base import library_detector
        from nodeagent.vendors.interface import Vendor
        from acme_vendor.detect import ACME, AcmeDetector
        from acme_vendor.grants import Acme
        from acme_vendor.simulate import SIMULATOR

        VENDOR = Vendor(
            name=ACME,
            detector=library_detector(ACME, AcmeDetector),
            responder=Acme(),
            simulator=SIMULATOR,
        )
        """,
}

PROFILE = {
    "manufacturer": "acme",
    "description": "2 x Acme X1",
    "driverVersion": "1.2.3",
    "cards": [
        {"uuid": "XPU-0", "name": "Acme X1", "memoryMib": 32768, "bus": "0000:3b:00.0"},
        {"uuid": "XPU-1", "name": "Acme X1", "memoryMib": 32768, "bus": "0000:3c:00.0"},
    ],
}


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """Steps 2 and 3: the package, and its line in the registry."""
    package = tmp_path / "path" / PACKAGE
    package.mkdir(parents=True)
    for name, text in MODULES.items():
        (package / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "path"))
    vendor = importlib.import_module(f"{PACKAGE}.vendor")
    monkeypatch.setattr(registry, "VENDORS", (*registry.VENDORS, vendor.VENDOR))
    yield vendor
    for name in [module for module in sys.modules if module.split(".")[0] == PACKAGE]:
        del sys.modules[name]


def test_a_tenth_manufacturer_is_simulated_detected_and_granted(
    acme: ModuleType, tmp_path: Path
) -> None:
    table = ManufacturerTable((*manufacturers({}).entries, ACME))
    profile = tmp_path / "acme-x2.yaml"
    profile.write_text(yaml.safe_dump(PROFILE), encoding="utf-8")
    with simulated_host(str(profile)) as host:
        setup = DetectorSetup(table, StartupEnv(), host.sysfs, host.nvml, host.injected)
        (detection,) = detections(("acme",), setup)
        found = detection.detect()
    assert found.measured and found.manufacturer == "acme"
    (group,) = found.groups
    assert (group.name, group.memory, group.driver_version) == ("Acme X1", 32768, "1.2.3")
    assert [card.id for card in group.accelerators] == ["XPU-0", "XPU-1"]
    assert [card.topology.pci_bus_id for card in group.accelerators] == [
        "0000:3b:00.0",
        "0000:3c:00.0",
    ]

    assert responder_for("acme") is acme.VENDOR.responder
    cluster = FakeCluster()
    cluster.add("train", ("main", {"acme.example/xpu": "1"}))
    state = NodeState(lambda: DevicesSpec((group,)), cluster, cluster)
    allocator = Allocator(state, table["acme"], Mode.EXCLUSIVE, nodes=SimulatedNodes({}))
    response = allocator.allocate([f"{group.id}:XPU-1:0000"], Attempt(5.0))
    assert response.envs == {"ACME_VISIBLE_DEVICES": "XPU-1"}
    record = parse_allocated(cluster.annotation("train"))["main"]
    assert [claim.row.id for claim in record.claims()] == ["XPU-1"]


def test_a_profile_of_an_unregistered_manufacturer_names_the_simulated_ones(
    tmp_path: Path,
) -> None:
    profile = tmp_path / "acme-x2.yaml"
    profile.write_text(yaml.safe_dump(PROFILE), encoding="utf-8")
    unregistered = "simulates 'acme' hardware; simulated here: nvidia, amd"
    with pytest.raises(ValueError, match=unregistered), simulated_host(str(profile)):
        pass
