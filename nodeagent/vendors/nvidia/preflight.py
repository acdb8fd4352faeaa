"""What a preflight asks of an NVIDIA host (`nodeagent.preflight`)."""

from __future__ import annotations

import re

from nodeagent.vendors.interface import HostReader


def count_cards(output: str) -> int:
    """`nvidia-smi -L` lists one `GPU <i>: <name> (UUID: ...)` line per card."""
    return sum(1 for line in output.splitlines() if re.match(r"GPU \d+:", line.strip()))


HOST_READER = HostReader(("nvidia-smi", "-L"), count_cards)
