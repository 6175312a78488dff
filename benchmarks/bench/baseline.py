"""References measured in the benchmark's own process: memcpy bandwidth and the c10d floor."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from benchmarks.bench.results import Result, measured, not_measured
from benchmarks.bench.timing import LocalSync, TimingConfig, measure

MEMCPY = "memcpy"
FLOOR = "c10d-floor"
FLOOR_WORLD_SIZE = 2


def _sync_for(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memcpy(size: int, device: torch.device, config: TimingConfig) -> Result:
    """Single-thread ``dst.copy_(src)`` of ``size`` bytes; algbw is bytes copied per second."""
    src = torch.ones(size, dtype=torch.uint8, device=device)
    dst = torch.zeros(size, dtype=torch.uint8, device=device)
    start = time.perf_counter()
    dst.copy_(src)
    _sync_for(device)
    first = time.perf_counter() - start
    timing = measure(lambda: dst.copy_(src), LocalSync(), config, lambda: _sync_for(device), first)
    return measured(MEMCPY, "copy_", 1, size, size, timing)


def c10d_floor(config: TimingConfig) -> Result:
    """``dist.all_reduce`` of one float32 on PyTorch's FakeProcessGroup (no communication)."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as exc:  # torch built without its testing helpers
        return not_measured(FLOOR, "allreduce", FLOOR_WORLD_SIZE, 4, "skipped", str(exc))
    if dist.is_initialized():
        raise RuntimeError("the floor needs a process without a default process group")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=FLOOR_WORLD_SIZE)
    try:
        tensor = torch.ones(1, dtype=torch.float32)
        start = time.perf_counter()
        dist.all_reduce(tensor)
        first = time.perf_counter() - start
        # The same call as the one timed for the backends (collectives.make_op), group included.
        timing = measure(
            lambda: dist.all_reduce(tensor, group=None), LocalSync(), config, first_call_s=first
        )
    finally:
        dist.destroy_process_group()
    return measured(FLOOR, "allreduce", FLOOR_WORLD_SIZE, 4, 4, timing)
