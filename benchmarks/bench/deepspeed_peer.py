"""The DeepSpeed peer: one rank of DeepSpeed's shm allreduce, in a process of its own.

:func:`benchmarks.bench.peers.run_deepspeed` starts ``python -m
benchmarks.bench.deepspeed_peer --plan JSON`` once per rank, with ``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, ``LOCAL_SIZE`` (= the world size, which
DeepSpeed's shm path needs), ``DS_ACCELERATOR=cpu`` and ``OMP_NUM_THREADS=1`` in the
environment, set there because importing the package already imports torch.

Each rank sets ``torch.set_num_threads(1)``, initialises gloo (the control group of the
timing protocol), then ``deepspeed.comm.init_distributed``, which wraps that group and
initialises the ``deepspeed_shm_comm`` op; the points are checked and timed with the torch
ranks' own :func:`~benchmarks.bench.runner.run_point`. Rank 0 prints one line per
point, ``BENCH_RESULT {json}``, and ``BENCH_NOTE text`` when DeepSpeed cannot be used.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from benchmarks.bench.peers import (
    DEEPSPEED_COLLECTIVES,
    NOTE_PREFIX,
    RESULT_PREFIX,
    deepspeed_segment,
)
from benchmarks.bench.plan import DEEPSPEED, Plan, WorldSpec
from benchmarks.bench.runner import PG_TIMEOUT, GlooSync, RankContext, first_line, run_point

if TYPE_CHECKING:
    from benchmarks.bench.collectives import Buffers

OpFactory = Callable[["Buffers"], "Callable[[], object]"]


def open_deepspeed(rank: int, port: int) -> OpFactory:
    """Sets up DeepSpeed's shm allreduce in this rank; makes allreduce ops on a buffer.

    Raises unless the shm path is really the one taken: the op loaded, the CPU has the AVX2
    its float32 kernel needs (else DeepSpeed falls back to gloo) and this rank's shared
    memory segment exists (created only when ``LOCAL_SIZE`` equals the world size).
    """
    import deepspeed.comm as dsc
    from deepspeed.comm import comm as ds_comm

    dsc.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    backend = ds_comm.cdb
    shm_op = getattr(backend, "shm_comm_op", None)
    level = getattr(backend, "shm_vector_kernel_level", 0)
    if shm_op is None or not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        raise RuntimeError("DeepSpeed's shm comm op did not load (it would fall back to gloo)")
    if level < 1:
        raise RuntimeError("no AVX2: DeepSpeed's float32 shm kernel would fall back to gloo")
    segment = Path("/dev/shm") / deepspeed_segment(port, rank)
    if dist.get_world_size() > 1 and not segment.exists():
        raise RuntimeError(f"DeepSpeed's shm path is off: no {segment} (LOCAL_SIZE?)")

    def factory(bufs: Buffers) -> Callable[[], object]:
        tensor = bufs.inp
        return lambda: dsc.inference_all_reduce(tensor)

    return factory


def _say(rank: int, prefix: str, text: str) -> None:
    if rank == 0:
        print(prefix + text, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Measures DeepSpeed's allreduce at every size of ``--plan`` in this rank."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", required=True, help="the run's plan, as JSON")
    plan = Plan.from_json(parser.parse_args(argv).plan)
    rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = int(os.environ["MASTER_PORT"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=ws, timeout=PG_TIMEOUT)
    sync = GlooSync()
    ctx = RankContext(WorldSpec(plan, ws, port), rank, torch.device("cpu"), sync, lambda: None)
    error = ""
    factory: OpFactory | None = None
    try:
        factory = open_deepspeed(rank, port)
    except Exception as exc:  # reported, the run goes on without DeepSpeed
        error = first_line(exc)
    errors = [f"rank {r}: {text}" for r, text in enumerate(sync.gather_text(error)) if text]
    if errors or factory is None:
        why = errors[0] if errors else "no factory"
        _say(rank, NOTE_PREFIX, f"deepspeed: unavailable: {why} (ws={ws})")
    else:
        make = factory
        for collective in plan.collectives:
            if collective not in DEEPSPEED_COLLECTIVES:
                continue
            for size in plan.sizes:
                result = run_point(ctx, DEEPSPEED, lambda _c, bufs: make(bufs), collective, size)
                _say(rank, RESULT_PREFIX, json.dumps(result.to_dict()))
    sync.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
