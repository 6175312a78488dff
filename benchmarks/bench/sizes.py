"""Message sizes: parsing ``4,4K,1M,16MiB`` lists and printing them back in binary units."""

from __future__ import annotations

import re

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

MIN_SIZE = 4
MAX_SIZE = 256 * MIB
DEFAULT_MAX_SIZE = 64 * MIB

_UNITS: dict[str, int] = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(?:I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"4"`` -> 4, ``"4K"``/``"4KiB"``/``"4KB"`` -> 4096, ``"1M"`` -> 1048576 (binary units)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 4, 4K, 1M, 16MiB)")
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes, sorted, without duplicates, each checked."""
    sizes = sorted({parse_size(part) for part in text.split(",") if part.strip()})
    if not sizes:
        raise ValueError("no sizes given")
    for size in sizes:
        check_size(size)
    return sizes


def check_size(size: int) -> None:
    """Raises ValueError unless ``MIN_SIZE <= size <= MAX_SIZE`` and a whole number of floats."""
    if not MIN_SIZE <= size <= MAX_SIZE:
        raise ValueError(
            f"size {format_size(size)} out of range "
            f"[{format_size(MIN_SIZE)}, {format_size(MAX_SIZE)}]"
        )
    if size % 4:
        raise ValueError(f"size {size} B is not a multiple of 4 B (one float32)")


def ladder(max_size: int, min_size: int = MIN_SIZE) -> list[int]:
    """Powers of 4 from ``min_size`` up to ``max_size`` (4 B, 16 B, ..., 16 MiB, 64 MiB)."""
    check_size(max_size)
    sizes = []
    size = min_size
    while size <= max_size:
        sizes.append(size)
        size *= 4
    return sizes


def format_size(size: int) -> str:
    """4 -> ``4B``, 4096 -> ``4KiB``, 1572864 -> ``1.5MiB``."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{size}B"


def parse_int_list(text: str) -> list[int]:
    """``"2,4"`` -> ``[2, 4]`` (kept in the order given, without duplicates)."""
    values: list[int] = []
    for part in text.split(","):
        if part.strip():
            value = int(part)
            if value not in values:
                values.append(value)
    if not values:
        raise ValueError("empty list")
    return values
