"""One measured (or skipped) point, as reported by the ranks, the peers and the baselines."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from benchmarks.bench.layout import COLLECTIVES, busbw_factor
from benchmarks.bench.timing import Timing

OK = "ok"
SKIPPED = "skipped"
ERROR = "error"


@dataclass
class Result:
    """A (backend, collective, world size, size) point; bandwidths in bytes per second."""

    backend: str
    collective: str
    world_size: int
    size: int
    nbytes: int = 0
    status: str = OK
    note: str = ""
    time_s: float = 0.0
    median_s: float = 0.0
    rounds_s: list[float] = field(default_factory=list)
    iters: int = 0
    round_iters: list[int] = field(default_factory=list)
    algbw: float = 0.0
    busbw: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether it holds a measurement."""
        return self.status == OK and self.time_s > 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON and for pickling between processes."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """The inverse of :meth:`to_dict`."""
        return cls(**data)


def measured(
    backend: str, collective: str, world_size: int, size: int, nbytes: int, timing: Timing
) -> Result:
    """A successful point, with algbw and busbw (NCCL-tests convention) filled in.

    For anything that is not a collective (memcpy) busbw equals algbw.
    """
    algbw = nbytes / timing.best_s
    factor = busbw_factor(collective, world_size) if collective in COLLECTIVES else 1.0
    return Result(
        backend=backend,
        collective=collective,
        world_size=world_size,
        size=size,
        nbytes=nbytes,
        time_s=timing.best_s,
        median_s=timing.median_s,
        rounds_s=list(timing.rounds_s),
        iters=timing.iters,
        round_iters=list(timing.round_iters),
        algbw=algbw,
        busbw=algbw * factor,
    )


def not_measured(
    backend: str, collective: str, world_size: int, size: int, status: str, note: str
) -> Result:
    """A skipped or failed point, with the reason."""
    return Result(backend, collective, world_size, size, status=status, note=note)


def best_of_passes(results: list[Result]) -> list[Result]:
    """One result per (backend, collective, world size, size) point from several passes over
    the same plan: the pass with the lowest time, its rounds joined by every measured pass's (so
    the median covers them all). A point measured in no pass keeps its first pass's reason.
    Order: each point where it first appeared."""
    points: dict[tuple[str, str, int, int], list[Result]] = {}
    for result in results:
        key = (result.backend, result.collective, result.world_size, result.size)
        points.setdefault(key, []).append(result)
    merged: list[Result] = []
    for group in points.values():
        measured_ = [r for r in group if r.ok]
        if not measured_:
            merged.append(group[0])
            continue
        best = min(measured_, key=lambda r: r.time_s)
        rounds = [t for r in measured_ for t in r.rounds_s]
        merged.append(
            replace(
                best,
                rounds_s=rounds,
                median_s=statistics.median(rounds) if rounds else best.median_s,
                round_iters=[i for r in measured_ for i in r.round_iters],
            )
        )
    return merged
