"""Fixtures for the chain vocabulary tests: the built-in manufacturer table, no environment."""

from __future__ import annotations

import pytest

from chain.manufacturers import ManufacturerTable, manufacturers


@pytest.fixture(scope="session")
def table() -> ManufacturerTable:
    return manufacturers({})
