"""The c10d floor where ranks outnumber cores, measured in rank processes of its own.

The floor (:func:`dummy_collectives.bench.baseline.c10d_floor`) is what one c10d call costs
with nothing moved: PyTorch's FakeProcessGroup, in one process. Where ranks outnumber cores,
every c10d backend pays more than that per collective: the ranks sharing a core run their
calls one after the other, and the core must pass between their processes, which costs a
Python process several microseconds of cold caches each time (on the 2-core machine ~8 us,
against ~1 us between two small C processes).

How few hand-offs a collective can take: no rank finishes a collective before every rank has
entered it, so no rank gets more than one collective ahead of another, and one turn on a core
holds at most two of a rank's calls (finish the collective the others have entered, enter the
next). So here each of ``world_size`` FakeProcessGroup ranks calls ``dist.all_reduce`` twice
and then yields its core (``os.sched_yield``), all at once, with the benchmark's timing
protocol (barrier-started rounds, max over ranks, best round); the floor is that time per
call. It is a lower bound: the fake ranks never wait for each other across cores, and a yield
the scheduler declines only saves a hand-off.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import traceback
from typing import Any

import torch
import torch.distributed as dist

from dummy_collectives.bench.baseline import FLOOR
from dummy_collectives.bench.results import ERROR, SKIPPED, Result, measured, not_measured
from dummy_collectives.bench.timing import Timing, TimingConfig, measure

CALLS_PER_TURN = 2
_RESULT_TIMEOUT_S = 300.0


class ProcessSync:
    """The timing protocol's :class:`~dummy_collectives.bench.timing.Sync` over
    ``multiprocessing`` primitives (the fake ranks have no process group that communicates)."""

    def __init__(self, rank: int, barrier: Any, values: Any) -> None:
        self.rank = rank
        self._barrier = barrier
        self._values = values

    def barrier(self) -> None:
        """Returns once every rank has called it."""
        self._barrier.wait()

    def max(self, value: float) -> float:
        """The maximum of ``value`` over the ranks."""
        self._values[self.rank] = value
        self._barrier.wait()
        result = max(self._values)
        self._barrier.wait()  # nobody overwrites a value before everyone has read them all
        return float(result)


def _rank(
    rank: int, world_size: int, config: TimingConfig, barrier: Any, values: Any, out: Any
) -> None:
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        torch.set_num_threads(1)
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        tensor = torch.ones(1, dtype=torch.float32)

        def turn() -> None:
            # The same call as the one timed for the backends (collectives.make_op).
            dist.all_reduce(tensor, group=None)
            dist.all_reduce(tensor, group=None)
            os.sched_yield()

        turn()
        timing = measure(turn, ProcessSync(rank, barrier, values), config)
        dist.destroy_process_group()
        if rank == 0:
            out.put(("ok", timing))
    except Exception:  # reported by the parent as the floor's note
        out.put(("error", f"rank {rank}: {traceback.format_exc().strip().splitlines()[-1]}"))
        barrier.abort()


def _per_call(timing: Timing) -> Timing:
    return Timing(
        timing.best_s / CALLS_PER_TURN,
        timing.median_s / CALLS_PER_TURN,
        tuple(t / CALLS_PER_TURN for t in timing.rounds_s),
        timing.iters * CALLS_PER_TURN,
        tuple(n * CALLS_PER_TURN for n in timing.round_iters),
    )


def shared_core_floor(world_size: int, config: TimingConfig) -> Result:
    """The c10d floor per call for ``world_size`` ranks on this machine's usable cores."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401
    except ImportError as exc:  # torch built without its testing helpers
        return not_measured(FLOOR, "allreduce", world_size, 4, SKIPPED, str(exc))
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(world_size)
    values = context.Array("d", world_size)
    out = context.Queue()
    ranks = [
        context.Process(target=_rank, args=(r, world_size, config, barrier, values, out))
        for r in range(world_size)
    ]
    for process in ranks:
        process.start()
    try:
        kind, payload = out.get(timeout=_RESULT_TIMEOUT_S)
    except queue.Empty:
        kind, payload = "error", f"no result within {_RESULT_TIMEOUT_S:g} s"
    finally:
        for process in ranks:
            process.join(timeout=30.0)
            if process.is_alive():
                process.kill()
                process.join()
    if kind != "ok":
        return not_measured(FLOOR, "allreduce", world_size, 4, ERROR, str(payload))
    return measured(FLOOR, "allreduce", world_size, 4, 4, _per_call(payload))
