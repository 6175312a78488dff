"""Group creation across (simulated) hosts: settings every rank must share are checked on every
rank at once.

Four processes on this machine, two "hosts" by ``DUMMY_COLLECTIVES_HOST_ID`` (read as NCCL reads
``NCCL_HOSTID``), so the group takes the multi-host path without namespaces. One rank sets
another cross-host chunk size: every rank must raise the same ValueError at
``init_process_group``, at once, not only that rank while the others wait for it.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import time
from typing import Any

import harness
import pytest
import support

WORLD = 4
ODD_RANK = 3
TIMEOUT_S = 60  # the group timeout: a rank left waiting would take this long


def _rank(rank: int, port: int, results: Any, env: dict[int, dict[str, str]], done: Any) -> None:
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"host{rank // 2}"
    os.environ.update(env.get(rank, {}))
    import torch.distributed as dist

    import dummy_collectives  # noqa: F401

    start = time.monotonic()
    try:
        dist.init_process_group(
            "dummy",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=WORLD,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        error = None
        dist.destroy_process_group()
    except Exception as exc:  # what the test checks
        error = f"{type(exc).__name__}: {exc}"
    results.put((rank, error, time.monotonic() - start))
    # Rank 0 serves the store: leaving before the others have read every record would break
    # their reads ("Broken pipe") instead of letting them raise what they found.
    done.wait(timeout=TIMEOUT_S + 60)


def _create_group(env: dict[int, dict[str, str]]) -> dict[int, tuple[str | None, float]]:
    """Every rank's error (None: the group was made) and how long init_process_group took."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = harness.free_port()
    done = ctx.Event()
    procs = [ctx.Process(target=_rank, args=(r, port, results, env, done)) for r in range(WORLD)]
    for proc in procs:
        proc.start()
    try:
        seen = {}
        for _ in range(WORLD):
            rank, error, seconds = results.get(timeout=TIMEOUT_S + 60)
            seen[rank] = (error, seconds)
    finally:
        done.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    return seen


@support.requires_dummy
def test_a_setting_that_differs_on_one_rank_fails_every_rank_at_group_creation() -> None:
    seen = _create_group({ODD_RANK: {"DUMMY_COLLECTIVES_INTER_HOST_CHUNK_BYTES": str(64 << 10)}})
    assert sorted(seen) == list(range(WORLD)), seen
    for rank, (error, seconds) in sorted(seen.items()):
        assert error is not None and error.startswith("ValueError"), (rank, error)
        assert "inter_host_chunk_bytes" in error, (rank, error)
        assert f"rank {ODD_RANK} uses 65536" in error, (rank, error)
        # At once, not after the group timeout.
        assert seconds < TIMEOUT_S / 2, (rank, seconds, error)


@support.requires_dummy
def test_a_cross_host_setting_no_group_can_use_fails_every_rank() -> None:
    too_small = {"DUMMY_COLLECTIVES_INTER_HOST_INLINE_BYTES": "16"}
    seen = _create_group({r: too_small for r in range(WORLD)})
    assert sorted(seen) == list(range(WORLD)), seen
    for rank, (error, _) in sorted(seen.items()):
        assert error is not None and error.startswith("ValueError"), (rank, error)
        assert "inter_host_inline_bytes must be between 1024 and 1048576" in error, (rank, error)


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
