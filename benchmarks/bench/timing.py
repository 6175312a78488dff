"""The timing protocol shared by the torch ranks, the Open MPI peer and the local baselines.

Per point: a few warm-up iterations, a calibration that picks the iterations per round so
that a round lasts about ``round_time`` seconds (at least 1, at most ``max_iters``), then
``rounds`` rounds, each started by a barrier; a round's time is the maximum over the ranks
and the result is the best (smallest) round, as time per operation. Every decision is taken
on values reduced over all ranks, so all ranks run the same number of operations.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

CALIBRATION_FRACTION = 0.125  # a calibration batch stops growing at this part of a round
MAX_GROWTH = 64  # how much one calibration step may multiply the batch by


class Sync(Protocol):
    """What the protocol needs from the ranks that run it together."""

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        ...

    def max(self, value: float) -> float:
        """The maximum of ``value`` over all ranks (returned on every rank)."""
        ...


class LocalSync:
    """:class:`Sync` for a single process."""

    def barrier(self) -> None:
        """Nothing to wait for."""

    def max(self, value: float) -> float:
        """The value itself."""
        return value


@dataclass(frozen=True)
class TimingConfig:
    """How long and how often to measure one point."""

    rounds: int = 5
    round_time: float = 0.2
    warmup: int = 5
    max_iters: int = 100_000


@dataclass(frozen=True)
class Timing:
    """Seconds per operation: the best round, the median round, every round (and its size)."""

    best_s: float
    median_s: float
    rounds_s: tuple[float, ...]
    iters: int  # operations in the best round
    round_iters: tuple[int, ...] = ()


def _noop() -> None:
    return None


def timed_batch(
    op: Callable[[], object], count: int, sync: Sync, finish: Callable[[], None]
) -> float:
    """Barrier, then ``count`` operations; the slowest rank's elapsed seconds."""
    sync.barrier()
    start = time.perf_counter()
    for _ in range(count):
        op()
    finish()
    return sync.max(time.perf_counter() - start)


def iterations(per_op: float, config: TimingConfig) -> int:
    """Operations that fill one round of ``config.round_time`` (1 .. ``max_iters``)."""
    return max(1, min(config.max_iters, round(config.round_time / max(per_op, 1e-12))))


def calibrate(
    op: Callable[[], object], sync: Sync, config: TimingConfig, finish: Callable[[], None]
) -> float:
    """Estimated seconds per operation, from batches grown to a fraction of a round.

    The final batch size is timed twice and the faster kept: one batch slowed down by a
    descheduled rank would otherwise make every round of the point far too short.
    """
    goal = config.round_time * CALIBRATION_FRACTION
    count = 1
    while True:
        elapsed = timed_batch(op, count, sync, finish)
        if elapsed >= goal or count >= config.max_iters:
            break
        wanted = count * goal / max(elapsed, 1e-9)
        count = min(config.max_iters, count * MAX_GROWTH, max(count * 2, int(wanted) + 1))
    again = timed_batch(op, count, sync, finish)
    return min(elapsed, again) / count


def measure(
    op: Callable[[], object],
    sync: Sync,
    config: TimingConfig,
    finish: Callable[[], None] = _noop,
    first_call_s: float = 0.0,
) -> Timing:
    """Runs the protocol on ``op`` (already called once, taking ``first_call_s``).

    A round that shows the operation faster than calibrated lengthens the following rounds,
    so that every round lasts about ``round_time`` even after a noisy calibration.
    """
    warmup = config.warmup
    if first_call_s > 0:
        warmup = min(warmup, int(config.round_time / first_call_s))
    for _ in range(warmup):
        op()
    finish()
    per_op = calibrate(op, sync, config, finish)
    rounds: list[float] = []
    counts: list[int] = []
    for _ in range(max(1, config.rounds)):
        count = iterations(per_op, config)
        rounds.append(timed_batch(op, count, sync, finish) / count)
        counts.append(count)
        per_op = min(per_op, rounds[-1])
    best = min(range(len(rounds)), key=rounds.__getitem__)
    return Timing(
        rounds[best], statistics.median(rounds), tuple(rounds), counts[best], tuple(counts)
    )
