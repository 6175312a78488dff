"""The Open MPI peer: ``mpirun -np N python -m benchmarks.bench.mpi_peer --spec JSON``.

Runs the same timing protocol as the torch ranks (:mod:`.timing`) with mpi4py on numpy
float32 buffers of the same layout (:mod:`.layout`); rank 0 prints one line per point,
``BENCH_RESULT {json}``, which :func:`benchmarks.bench.peers.run_openmpi` reads.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from benchmarks.bench.layout import layout
from benchmarks.bench.peers import RESULT_PREFIX
from benchmarks.bench.plan import OPENMPI
from benchmarks.bench.results import ERROR, Result, measured, not_measured
from benchmarks.bench.timing import TimingConfig, measure

ROOT = 0


class MpiSync:
    """The timing protocol's Sync over an MPI communicator."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm

    def barrier(self) -> None:
        """``MPI_Barrier``."""
        self.comm.Barrier()

    def max(self, value: float) -> float:
        """``MPI_Allreduce`` with ``MPI_MAX`` of one Python float."""
        return float(self.comm.allreduce(value, op=MPI.MAX))


def make_op(comm: Any, collective: str, inp: np.ndarray, out: np.ndarray) -> Callable[[], object]:
    """A no-argument callable running ``collective`` once, like the torch ranks do."""
    root = comm.Get_rank() == ROOT
    if collective == "allreduce":
        return lambda: comm.Allreduce(MPI.IN_PLACE, inp, op=MPI.SUM)
    if collective == "allgather":
        return lambda: comm.Allgather(inp, out)
    if collective == "broadcast":
        return lambda: comm.Bcast(inp, root=ROOT)
    if collective == "reduce":
        if root:
            return lambda: comm.Reduce(MPI.IN_PLACE, inp, op=MPI.SUM, root=ROOT)
        return lambda: comm.Reduce(inp, None, op=MPI.SUM, root=ROOT)
    if collective == "reduce_scatter":
        return lambda: comm.Reduce_scatter_block(inp, out, op=MPI.SUM)
    if collective == "alltoall":
        return lambda: comm.Alltoall(inp, out)
    if collective == "gather":
        return lambda: comm.Gather(inp, out if root else None, root=ROOT)
    if collective == "scatter":
        return lambda: comm.Scatter(inp if root else None, out, root=ROOT)
    raise ValueError(f"unknown collective {collective!r}")


def run_point(comm: Any, collective: str, size: int, config: TimingConfig) -> Result:
    """Checks (allreduce) and times one point; the same result on every rank."""
    rank, ws = comm.Get_rank(), comm.Get_size()
    lay = layout(collective, size, ws)
    inp = np.full(lay.in_numel, rank + 1, dtype=np.float32)
    whole = collective in ("allreduce", "broadcast", "reduce")
    out = inp if whole else np.zeros(lay.out_numel, dtype=np.float32)
    op = make_op(comm, collective, inp, out)
    error = ""
    start = time.perf_counter()
    try:
        op()
        first = time.perf_counter() - start
        if collective == "allreduce" and not np.all(inp == ws * (ws + 1) / 2):
            error = f"wrong allreduce result on rank {rank}: {inp[:4].tolist()}"
    except Exception as exc:  # reported as the point's result
        first, error = 0.0, f"{type(exc).__name__}: {exc}"
    errors = [text for text in comm.allgather(error) if text]
    if errors:
        return not_measured(OPENMPI, collective, ws, size, ERROR, errors[0])
    inp.fill(0)
    out.fill(0)
    sync = MpiSync(comm)
    timing = measure(op, sync, config, first_call_s=sync.max(first))
    return measured(OPENMPI, collective, ws, size, lay.nbytes, timing)


def main(argv: list[str] | None = None) -> int:
    """Measures every (collective, size) of ``--spec`` and prints the results on rank 0."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="JSON: collectives, sizes, timing")
    spec = json.loads(parser.parse_args(argv).spec)
    config = TimingConfig(**spec["timing"])
    comm = MPI.COMM_WORLD
    for collective in spec["collectives"]:
        for size in spec["sizes"]:
            result = run_point(comm, collective, int(size), config)
            if comm.Get_rank() == ROOT:
                print(RESULT_PREFIX + json.dumps(result.to_dict()), flush=True)
    comm.Barrier()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
