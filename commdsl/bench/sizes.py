"""Message sizes as nccl-tests spells them: `1K`, `16M`, `1G` (powers of 1024), and `MIN:MAX[:FACTOR]` sweeps."""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


class SizeError(ValueError):
    """A size or sweep the user wrote that does not parse (a usage error)."""


def parse_size(text: str) -> int:
    """Bytes in `text`: `4096`, `4K`, `4KiB`, `16M`, `1G` (K = 1024, as nccl-tests counts)."""
    m = _SIZE.match(text)
    if not m:
        raise SizeError(f"{text!r} is not a size (write bytes, or a number with K, M or G: 1K, 16M)")
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 1:
        raise SizeError(f"sizes must be at least 1 byte, got {text!r}")
    return value


def parse_sweep(text: str) -> list[int]:
    """`MIN:MAX[:FACTOR]` → MIN, MIN·F, MIN·F², … up to MAX (F = 2 by default); one size alone is a sweep of one."""
    parts = text.split(":")
    if len(parts) > 3:
        raise SizeError(f"--sizes expects MIN:MAX[:FACTOR], got {text!r}")
    lo = parse_size(parts[0])
    hi = parse_size(parts[1]) if len(parts) > 1 else lo
    if hi < lo:
        raise SizeError(f"--sizes {text}: MAX is below MIN")
    factor = 2
    if len(parts) == 3:
        if not parts[2].strip().isdigit() or int(parts[2]) < 2:
            raise SizeError(f"--sizes {text}: FACTOR must be an integer of at least 2")
        factor = int(parts[2])
    out, size = [], lo
    while size <= hi:
        out.append(size)
        size *= factor
    return out


def format_size(size: int) -> str:
    """`1 KiB`, `16 MiB`, `1000 B`: the largest binary unit that divides the size exactly."""
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"
