"""The checked-in Kueue Configuration fragment is exactly what the generator writes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from chain.manufacturers import manufacturers
from hooks.queue.kueue_config import configuration_fragment
from hooks.queue.write_kueue_config import DEFAULT_OUTPUT, main, render


def test_checked_in_file_is_generated() -> None:
    assert DEFAULT_OUTPUT.read_text() == render(manufacturers({})), (
        "run `python -m hooks.queue.write_kueue_config`"
    )


def test_checked_in_file_parses_to_the_fragment() -> None:
    assert yaml.safe_load(DEFAULT_OUTPUT.read_text()) == configuration_fragment(manufacturers({}))


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "configuration.yaml"
    assert main(["--check", "-o", str(target)]) == 1  # missing
    assert main(["-o", str(target)]) == 0
    assert main(["--check", "-o", str(target)]) == 0
    target.write_text(target.read_text() + "# edited\n")
    assert main(["--check", "-o", str(target)]) == 1
    assert "stale" in capsys.readouterr().err


def test_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME", "example.com/amd")
    target = tmp_path / "configuration.yaml"
    assert main(["--from-env", "-o", str(target)]) == 0
    assert "example.com/amd.sliced.units" in target.read_text()
    monkeypatch.setenv("GPUSTACK_AMD_ACCELERATABLE_RESOURCE_NAME", "not a resource")
    assert main(["--from-env", "-o", str(target)]) == 2
