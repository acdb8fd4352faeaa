"""The hook tests post fixtures through the Flask apps and compare whole answers: the shell's
clock is stopped at `clock.NOW` for them."""

from __future__ import annotations

import pytest

from hooks import transport
from tests.unit.hooks.clock import NOW


@pytest.fixture(autouse=True)
def stopped_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "now", lambda: NOW)
