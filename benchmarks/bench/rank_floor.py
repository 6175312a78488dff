"""The c10d floor at a world size, measured in rank processes of its own.

The floor (:func:`benchmarks.bench.baseline.c10d_floor`) is what one c10d call costs
with nothing moved: PyTorch's FakeProcessGroup, in one process. Ranks of a real group run
their calls at the same time, as many processes, and every c10d backend pays what that costs:

- Where each rank has a core, the processes run side by side, and two busy Python processes
  each take longer per call than one alone (docs/benchmarks.md, "The c10d floor").
- Where ranks outnumber cores, the ranks sharing a core run their calls one after the other,
  and the core must pass between their processes, which costs a Python process several
  microseconds of cold caches each time, far more than it costs two small C processes.

How few hand-offs a collective can take: no rank finishes a collective before every rank has
entered it, so every rank needs a turn on its core in every collective, and one turn holds one
call's worth of the c10d path (the end of the collective the others have entered and the start
of the next). So here ``world_size`` FakeProcessGroup ranks, pinned round-robin to the usable
cores (one to a core where there are enough), take turns on each core: a turn is one
``dist.all_reduce`` call, then the turn passes to the next rank on that core (a word in shared
memory; a rank waits for its turn with ``os.sched_yield``). They run the benchmark's timing
protocol (barrier-started rounds, max over ranks, best round); the floor is that time per call.
An earlier floor took two calls a turn, which halves the hand-offs per call below what any
collective can take, and so measured well under what one call a turn does (docs/benchmarks.md,
"The c10d floor"). The floor leaves out what a real collective adds (waiting across cores,
migrations), but it is not a strict lower bound: a forced turn can wait on the scheduler (a
declined ``sched_yield``) where a backend's rank would have found other work, and the
turn-passing adds a fraction of a microsecond of Python per turn.
With a core each there is one rank to a core, no turn passes, and the rounds time what the
ranks' calls cost side by side. Either way the report also shows every small allreduce's time
above the one-process floor.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.bench.baseline import FLOOR
from benchmarks.bench.results import ERROR, SKIPPED, Result, measured, not_measured
from benchmarks.bench.spawn import dead_ranks, stop
from benchmarks.bench.timing import TimingConfig, measure

_RESULT_TIMEOUT_S = 300.0
_POLL_S = 1.0
_JOIN_S = 30.0


class ProcessSync:
    """The timing protocol's :class:`~benchmarks.bench.timing.Sync` over
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
    rank: int,
    world_size: int,
    config: TimingConfig,
    shared: tuple[Any, Any, Any],
    out: Any,
) -> None:
    barrier, values, turns = shared
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore

        cores = sorted(os.sched_getaffinity(0))
        slot = rank % len(cores)
        os.sched_setaffinity(0, {cores[slot]})
        mates = list(range(slot, world_size, len(cores)))  # the ranks on this core, in turn order
        successor = mates[(mates.index(rank) + 1) % len(mates)]
        torch.set_num_threads(1)
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        tensor = torch.ones(1, dtype=torch.float32)

        def turn() -> None:
            while turns[slot] != rank:
                os.sched_yield()
            # The same call as the one timed for the backends (collectives.make_op).
            dist.all_reduce(tensor, group=None)
            turns[slot] = successor

        turn()
        timing = measure(turn, ProcessSync(rank, barrier, values), config)
        dist.destroy_process_group()
        if rank == 0:
            out.put(("ok", timing))
    except Exception:  # reported by the parent as the floor's note
        out.put(("error", f"rank {rank}: {traceback.format_exc().strip().splitlines()[-1]}"))
        barrier.abort()


def _result(out: Any, ranks: list[Any]) -> tuple[str, Any]:
    """Rank 0's result or the first error, without waiting long for ranks that died."""
    deadline = time.monotonic() + _RESULT_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            return out.get(timeout=_POLL_S)
        except queue.Empty:
            dead = dead_ranks(ranks)
            if dead:
                return "error", f"ranks died ({dead})"
    return "error", f"no result within {_RESULT_TIMEOUT_S:g} s"


def rank_floor(world_size: int, config: TimingConfig) -> Result:
    """The c10d floor per call for ``world_size`` ranks on this machine's usable cores."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401
    except ImportError as exc:  # torch built without its testing helpers
        return not_measured(FLOOR, "allreduce", world_size, 4, SKIPPED, str(exc))
    context = multiprocessing.get_context("spawn")
    cores = len(os.sched_getaffinity(0))
    # turns[c]: the rank whose turn it is on the c-th usable core (the first rank there begins).
    turns = context.Array("i", list(range(cores)), lock=False)
    shared = (context.Barrier(world_size), context.Array("d", world_size), turns)
    out = context.Queue()
    ranks = [
        context.Process(target=_rank, args=(r, world_size, config, shared, out))
        for r in range(world_size)
    ]
    for process in ranks:
        process.start()
    try:
        kind, payload = _result(out, ranks)
    finally:
        stop(ranks, _JOIN_S)
    if kind != "ok":
        return not_measured(FLOOR, "allreduce", world_size, 4, ERROR, str(payload))
    return measured(FLOOR, "allreduce", world_size, 4, 4, payload)
