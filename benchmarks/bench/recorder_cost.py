"""What the flight recorder costs a small collective: ``--recorder-cost``.

The recorder reads ``TORCH_FR_BUFFER_SIZE`` once per process, so each measurement is a fresh set
of rank processes: a 4-byte allreduce timed (the benchmark's protocol: best round, max over
ranks) with the recorder off (``TORCH_FR_BUFFER_SIZE=0``) and on (torch's default, 2000
entries), the two alternating for ``passes`` passes so that a slow spell of a shared machine
hits both alike. The report gives every pass and the median difference, and the recording
alone (``_C._fr_hot_path_ns``: record, started and completed of a 1-element allreduce in a
loop), which a loaded machine blurs far less than the collective around it: where ranks wait
for each other's cores, one hand-off costs more than the whole recording.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import tempfile
import traceback
from contextlib import contextmanager
from typing import Any

from benchmarks.bench.rank_floor import ProcessSync
from benchmarks.bench.spawn import stop
from benchmarks.bench.timing import TimingConfig, measure

VARIABLE = "TORCH_FR_BUFFER_SIZE"
SETTINGS = (("off", "0"), ("on", None))  # None: unset, torch's default
HOT_PATH_ITERATIONS = 200_000
_RESULT_TIMEOUT_S = 300.0
_JOIN_S = 30.0


def _rank(
    rank: int, world_size: int, store_path: str, config: TimingConfig, shared: Any, out: Any
) -> None:
    barrier, values = shared
    try:
        import torch
        import torch.distributed as dist

        import dummy_collectives  # noqa: F401  (registers "dummy")

        torch.set_num_threads(1)
        dist.init_process_group(
            "dummy", init_method=f"file://{store_path}", rank=rank, world_size=world_size
        )
        tensor = torch.ones(1, dtype=torch.float32)

        def op() -> None:
            dist.all_reduce(tensor)

        op()
        timing = measure(op, ProcessSync(rank, barrier, values), config)
        entries = dummy_collectives.flight_recorder.buffer_size()
        dist.destroy_process_group()
        if rank == 0:
            # The recording itself, without the collective around it: steady under load, where
            # the whole allreduce's time is not.
            hot_path_s = dummy_collectives._C._fr_hot_path_ns(HOT_PATH_ITERATIONS) * 1e-9
            out.put(("ok", (timing.best_s, timing.median_s, entries, hot_path_s)))
    except Exception:
        out.put(("error", f"rank {rank}: {traceback.format_exc().strip().splitlines()[-1]}"))
        barrier.abort()


@contextmanager
def _environment(value: str | None) -> Any:
    """``TORCH_FR_BUFFER_SIZE`` set (or unset) for the processes started inside."""
    saved = os.environ.get(VARIABLE)
    if value is None:
        os.environ.pop(VARIABLE, None)
    else:
        os.environ[VARIABLE] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(VARIABLE, None)
        else:
            os.environ[VARIABLE] = saved


def _measure(world_size: int, value: str | None, config: TimingConfig) -> tuple[float, ...]:
    """(best, median) seconds per allreduce, the recorder's entries and (recorder on) the
    seconds recording alone takes per operation, in fresh ranks."""
    context = multiprocessing.get_context("spawn")
    shared = (context.Barrier(world_size), context.Array("d", world_size))
    out = context.Queue()
    with tempfile.TemporaryDirectory(prefix="dc-recorder-cost-") as tmp:
        store = os.path.join(tmp, "store")
        with _environment(value):
            ranks = [
                context.Process(target=_rank, args=(r, world_size, store, config, shared, out))
                for r in range(world_size)
            ]
            for process in ranks:
                process.start()
        try:
            kind, payload = out.get(timeout=_RESULT_TIMEOUT_S)
        finally:
            stop(ranks, _JOIN_S)
    if kind != "ok":
        raise RuntimeError(f"recorder cost: {payload}")
    return tuple(payload)


def run(world_size: int, passes: int, config: TimingConfig) -> int:
    """Measures and prints the recorder's cost; the exit status."""
    print(
        f"flight recorder cost: 4 B allreduce, {world_size} ranks, {passes} passes "
        f"alternating {VARIABLE}=0 (off) and unset (on, torch's default)"
    )
    print(f"{'pass':>4}  {'off best':>9} {'on best':>9} {'diff':>7}   "
          f"{'off median':>10} {'on median':>10} {'diff':>7}  (us)")  # fmt: skip
    best_diffs: list[float] = []
    median_diffs: list[float] = []
    hot_paths: list[float] = []
    for p in range(passes):
        measured: dict[str, tuple[float, ...]] = {}
        order = SETTINGS if p % 2 == 0 else tuple(reversed(SETTINGS))
        for name, value in order:
            measured[name] = _measure(world_size, value, config)
        off, on = measured["off"], measured["on"]
        if off[2] != 0 or on[2] == 0:
            raise RuntimeError(f"recorder cost: entries off {off[2]}, on {on[2]}")
        best_diffs.append((on[0] - off[0]) * 1e6)
        median_diffs.append((on[1] - off[1]) * 1e6)
        print(f"{p + 1:>4}  {off[0] * 1e6:>9.2f} {on[0] * 1e6:>9.2f} {best_diffs[-1]:>+7.2f}   "
              f"{off[1] * 1e6:>10.2f} {on[1] * 1e6:>10.2f} {median_diffs[-1]:>+7.2f}")  # fmt: skip
        hot_paths.append(on[3] * 1e6)
    print(
        f"median difference (on - off): best rounds {statistics.median(best_diffs):+.2f} us, "
        f"median rounds {statistics.median(median_diffs):+.2f} us per allreduce"
    )
    print(
        f"recording alone (record + started + completed of a 1-element allreduce, best of 5 "
        f"batches of {HOT_PATH_ITERATIONS}): {min(hot_paths):.3f} us "
        f"(passes: {', '.join(f'{t:.3f}' for t in hot_paths)})"
    )
    return 0
