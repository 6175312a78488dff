"""Faults in groups that span hosts, on simulated hosts (one ``DUMMY_COLLECTIVES_HOST_ID`` per
rank): errors name the rank that failed and carry no C++ frames or gloo source locations, and a
group whose store's host has left is silent while idle.

Ranks die or exit here, so every test runs a dedicated short-lived job (faultjob.run_job). The
real-host counterparts (namespaces, torchrun) are in test_multihost.py.
"""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import timedelta
from typing import Any

import faultjob
import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module, pytest.mark.slow]

# What an error must not quote: C++ stack frames (c10's "frame #3: ..." and "Exception raised
# from ..."), and gloo's or torch's source locations ("[.../gloo/transport/tcp/pair.cc:534]").
CPP_NOISE = re.compile(r"frame #\d+|Exception raised from|\.(cc|cpp|h|hpp):\d+")


def init_on_own_host(port: int | None = None, timeout_s: float = 30.0) -> None:
    """The job's default group, each rank on a simulated host of its own; the store a TCPStore
    served by rank 0 when ``port`` is given (else a file)."""
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"simhost{faultjob.rank()}"
    method = f"tcp://127.0.0.1:{port}" if port else faultjob.init_method()
    dist.init_process_group(
        "dummy",
        init_method=method,
        rank=faultjob.rank(),
        world_size=faultjob.world_size(),
        timeout=timedelta(seconds=timeout_s),
    )
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    assert backend.lowering == "two_level", backend.lowering


def allreduce_until_failure(victim: int, after: int) -> str | None:
    """Allreduces of a few sizes (inline, pipelined); ``victim`` SIGKILLs itself in its
    ``after``-th. Returns the error the others raised (None: none)."""
    tensors = [torch.ones(16), torch.ones(64 << 10)]
    for i in range(after + 500):
        if faultjob.rank() == victim and i == after:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            dist.all_reduce(tensors[i % 2])
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------- inside the ranks


def process_ended(pid: int) -> bool:
    """Gone, or a zombie its parent (the test) has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def lone_rank_dies() -> str | None:
    init_on_own_host()
    return allreduce_until_failure(victim=2, after=20)


def store_host_dies(port: int) -> str | None:
    init_on_own_host(port)
    return allreduce_until_failure(victim=0, after=20)


def store_host_leaves(port: int, idle_s: float) -> dict[str, Any]:
    """Rank 0 (the TCPStore's) leaves normally after a few collectives; rank 1 keeps its group
    and idles: what it writes to stderr meanwhile."""
    init_on_own_host(port)
    t = torch.ones(1000)
    for _ in range(3):
        dist.all_reduce(t)
    if faultjob.rank() == 0:
        faultjob.note("store-pid", os.getpid())
        return {}
    pid = faultjob.read_note("store-pid", wait_s=30)
    deadline = time.monotonic() + 30
    while not process_ended(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)  # its connections have closed
    before = os.fstat(2).st_size
    time.sleep(idle_s)
    return {"stderr_bytes": os.fstat(2).st_size - before}


# --------------------------------------------------------------------------- the tests


def test_a_rank_alone_on_its_host_that_dies_is_named_by_every_survivor() -> None:
    # Nobody shares the victim's host, so nobody sees its process die: the survivors learn it
    # from the cross-host engine's closed connection, and must name rank 2 and its host.
    job = faultjob.run_job(3, lone_rank_dies, timeout_s=120, init=False)
    assert job[2].exitcode == -signal.SIGKILL, job.report()
    for rank in (0, 1):
        error = job[rank].value
        assert job[rank].returned and error is not None, job.report()
        assert "rank 2 (host simhost2)" in error, (rank, error)
        assert not CPP_NOISE.search(error), (rank, error)
    assert not job.leftover_shm, job.leftover_shm


def test_the_store_host_dying_mid_collective_is_named_without_cpp_frames() -> None:
    job = faultjob.run_job(2, store_host_dies, harness.free_port(), timeout_s=120, init=False)
    assert job[0].exitcode == -signal.SIGKILL, job.report()
    error = job[1].value
    assert job[1].returned and error is not None, job.report()
    assert "rank 0 (host simhost0)" in error, error
    assert not CPP_NOISE.search(error), error
    assert not job.leftover_shm, job.leftover_shm


def test_ranks_idle_after_the_store_host_left_are_silent() -> None:
    # A store the watcher cannot reach is not a failure by itself (its host may leave after its
    # last collective; docs/design.md, "Faults across hosts"). Being idle then must not flood
    # stderr with store warnings (docs/faults.md).
    job = faultjob.run_job(
        2, store_host_leaves, harness.free_port(), 3.0, timeout_s=120, init=False
    )
    assert job[0].returned and job[0].exitcode == 0, job.report()
    assert job[1].returned, job.report()
    assert job[1].value["stderr_bytes"] == 0, (job[1].value, job[1].log[-3000:])
    assert job[1].exitcode == 0, job.report()
    assert not job.leftover_shm, job.leftover_shm
