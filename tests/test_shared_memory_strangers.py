"""A group's shared memory named by a stranger: the segment's name rides the group's store,
which anyone who reaches the store may write. A rank maps only a segment of this library's
naming that its own user owns and nobody else may open; any other it refuses, clearly.

Each test plants a real segment of another group (made by rank 0), opened up to others or handed
to another user, and points the store of a group that rank 1 then joins at it.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import faultjob
import pytest
import support
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module, support.requires_one_host]

SEGMENT_KEY = "dummy_collectives/shm"  # shm_transport.cpp's kStoreKey
NOBODY = 65534


def join_a_planted_segment(how: str) -> dict[str, Any]:
    from dummy_collectives._C import DummyBackend

    from dummy_collectives import Options

    store = dist.FileStore(str(faultjob.job_dir() / "store"), 2)
    store.set_timeout(timedelta(seconds=30))
    decoy_store, victim_store = dist.PrefixStore("decoy", store), dist.PrefixStore("victim", store)
    timeout = timedelta(seconds=10)
    if faultjob.rank() == 0:
        # Another group's segment, which only rank 0 of it ever maps.
        decoy = DummyBackend(decoy_store, 0, 2, timeout, Options())
        published = decoy_store.get(SEGMENT_KEY).decode()
        path = "/dev/shm" + published.split()[0]
        if how == "open to others":
            os.chmod(path, 0o666)
        else:
            os.chown(path, NOBODY, NOBODY)
        victim_store.set(SEGMENT_KEY, published)
        faultjob.note("planted", published.split()[0])
        faultjob.file_barrier("joined")
        del decoy
        return {}
    name = faultjob.read_note("planted", wait_s=60)
    error = None
    try:
        DummyBackend(victim_store, 1, 2, timeout, Options())
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    faultjob.file_barrier("joined")
    return {"name": name, "error": error}


@pytest.mark.parametrize("how", ["open to others", "another user's"])
def test_a_segment_named_by_a_stranger_is_refused(how: str) -> None:
    job = faultjob.run_job(2, join_a_planted_segment, how, timeout_s=60, init=False)
    assert job[0].returned and job[1].returned, job.report()
    result = job[1].value
    error = result["error"]
    assert error is not None, result  # it mapped a segment it should not have
    assert error.startswith("RuntimeError: "), error
    assert f"refusing shared memory {result['name']}" in error, error
    owner = f"owned by uid {NOBODY}" if how == "another user's" else "with mode 666"
    assert owner in error, error
    assert not job.leftover_shm, job.leftover_shm
