"""PyTorch's DistributedTest (placeholder)."""

from __future__ import annotations

from typing import Any

from c10d_conformance.suite import Row


def rows(
    backend: str, module: str | None, world_size: int, mode: str, keyword: str | None, log: Any
) -> list[Row]:
    return []
