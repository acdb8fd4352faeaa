"""`NormalizeName`: turn a product or CPU name into the id part of a key.

The ids become label-key names and object-name segments, so the result only ever holds `a-z`,
`0-9` and single separators, never starts or ends with a separator, and stays within a length
budget chosen by the caller (the key around it must still fit 63 characters). A label key may
hold `_` but an object name may not: names take an id through `chain.names.name_segment`, and
the ids (published in label keys on every node) keep their `_`.

The manufacturer prefix is dropped by a character-level rule, not by token: the buffer is cleared
whenever it spells the prefix exactly. That is upstream's behaviour and the ids already published
on nodes depend on it (`AMD64 Accelerator` under `amd` gives `64-accelerator`), so we keep it.
"""

from __future__ import annotations

import re

_SEPARATORS = frozenset("-_.")

# CPU model strings carry marketing marks, frequencies and core counts that differ between
# otherwise identical pools; stripping them keeps one CPU key per CPU model.
_AT_FREQUENCY = " @ "
_MARKS = ("(R)", "(r)", "(TM)", "(tm)")
_LEADING_CRUFT = re.compile(r"^(Genuine |[0-9]+(st|nd|rd|th) Gen )+")
_TRAILING_CORES = re.compile(r" [0-9]+-cores?$", re.IGNORECASE)


def strip_cpu_cruft(name: str) -> str:
    """Drop frequency, trademark marks, generation prefixes and core-count suffixes."""
    name = name.split(_AT_FREQUENCY, 1)[0]
    for mark in _MARKS:
        name = name.replace(mark, "")
    name = _LEADING_CRUFT.sub("", name)
    name = name.strip()
    name = name.removesuffix(" CPU")
    name = name.removesuffix(" Processor")
    return _TRAILING_CORES.sub("", name)


def normalize_name(name: str, prefix: str, max_length: int, strip_cruft: bool = False) -> str:
    """Lowercase `a-z0-9` id of `name`, manufacturer `prefix` dropped, at most `max_length` long.

    `max_length <= 0` means no budget beyond the name itself.
    """
    if strip_cruft:
        name = strip_cpu_cruft(name)
    if max_length <= 0:
        max_length = len(name)
    folded_prefix = prefix.lower()

    kept: list[str] = []
    for char in name:
        if "A" <= char <= "Z":
            char = char.lower()
        elif char == " ":
            char = "-"
        if char in _SEPARATORS:
            if not kept or kept[-1] in _SEPARATORS:
                continue
        elif not ("a" <= char <= "z" or "0" <= char <= "9"):
            continue
        kept.append(char)
        if len(kept) == len(folded_prefix) and "".join(kept) == folded_prefix:
            kept.clear()
        if len(kept) >= max_length:
            break

    if kept and kept[-1] in _SEPARATORS:
        kept.pop()
    return "".join(kept)
