"""Fixtures for the node agent tests (helpers live in `helpers.py`)."""

from __future__ import annotations

import pytest

from chain.manufacturers import ManufacturerTable, manufacturers


@pytest.fixture(scope="session")
def table() -> ManufacturerTable:
    return manufacturers({})
