"""What a preflight asks of an AMD host (`nodeagent.preflight`)."""

from __future__ import annotations

import re

from nodeagent.vendors.interface import HostReader


def count_cards(output: str) -> int:
    """`rocm-smi --showuniqueid` prints `GPU[<i>]` on every line about card `<i>`."""
    return len(set(re.findall(r"GPU\[(\d+)\]", output)))


HOST_READER = HostReader(("rocm-smi", "--showuniqueid"), count_cards)
