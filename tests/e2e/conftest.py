"""The chain installed once per session from the shipped manifests (hook requests recorded)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.harness import Testbed
from testbed.install import Installed, install


@pytest.fixture(scope="session")
def chain(testbed: Testbed) -> Iterator[Installed]:
    yield install(testbed, capture=testbed.root / "captured")
