"""What each collective moves: buffer sizes per rank and the NCCL-tests bus-bandwidth factor.

Conventions follow NCCL-tests: a point's ``size`` is the size of the largest buffer of the
collective -- the tensor itself for allreduce/broadcast/reduce/alltoall, the *total* output
of allgather/gather and the *total* input of reduce_scatter/scatter. ``algbw = bytes / time``
and ``busbw = algbw * factor`` with the factors of :func:`busbw_factor`. Buffers hold
float32, so a per-rank share smaller than one float is rounded up to one.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOAT32_BYTES = 4

COLLECTIVES: tuple[str, ...] = (
    "allreduce",
    "allgather",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "alltoall",
    "gather",
    "scatter",
)

# size = the per-rank tensor, identical on every rank.
_WHOLE = frozenset({"allreduce", "broadcast", "reduce"})
# size = ws shares of the per-rank input (allgather, gather) or output (reduce_scatter, scatter).
_SHARED = frozenset({"allgather", "gather", "reduce_scatter", "scatter"})


@dataclass(frozen=True)
class Layout:
    """Element counts of one point: ``in_numel`` / ``out_numel`` per rank, ``nbytes`` moved."""

    in_numel: int
    out_numel: int
    nbytes: int


def check_collectives(names: list[str]) -> None:
    """Raises ValueError for a name that is not in :data:`COLLECTIVES`."""
    unknown = [name for name in names if name not in COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective(s) {unknown}; known: {', '.join(COLLECTIVES)}")


def layout(collective: str, size: int, world_size: int) -> Layout:
    """Buffer sizes for ``collective`` at message ``size`` bytes on ``world_size`` ranks."""
    numel = max(1, size // FLOAT32_BYTES)
    if collective in _WHOLE:
        return Layout(numel, numel, numel * FLOAT32_BYTES)
    share = max(1, numel // world_size)
    total = share * world_size
    if collective in ("allgather", "gather"):
        return Layout(share, total, total * FLOAT32_BYTES)
    if collective in ("reduce_scatter", "scatter"):
        return Layout(total, share, total * FLOAT32_BYTES)
    if collective == "alltoall":
        return Layout(total, total, total * FLOAT32_BYTES)
    raise ValueError(f"unknown collective {collective!r}")


def busbw_factor(collective: str, world_size: int) -> float:
    """NCCL-tests' busbw/algbw ratio: 2(n-1)/n for allreduce, (n-1)/n for the shared ones."""
    n = world_size
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in _SHARED or collective == "alltoall":
        return (n - 1) / n
    if collective in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {collective!r}")
