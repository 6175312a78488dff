"""A /dev/shm too small for a group (Docker's default is 64 MiB): never a SIGBUS.

tmpfs allocates pages lazily, so a segment larger than the free space was created without
complaint and the first rank to touch a missing page died of SIGBUS, without a message. Now
rank 0 reserves the pages when it creates the segment: where the asked-for buffers do not fit
it falls back to smaller ones (and says so in the debug log); where nothing fits every rank
raises, saying how much is needed, how much is free and what to do.

Each case runs its ranks in a private mount namespace (``unshare -m``) with a small tmpfs on
/dev/shm: a real full /dev/shm, not a simulated one.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from typing import Any

import faultjob
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module, support.requires_one_host]

ELEMENTS = 1 << 20  # 4 MiB of floats: many slots' worth


def allreduce_big() -> dict[str, Any]:
    rank = faultjob.rank()
    try:
        faultjob.init_default_group(timeout_s=20)
        t = torch.full((ELEMENTS,), float(rank + 1))
        dist.all_reduce(t)
        expected = float(sum(r + 1 for r in range(faultjob.world_size())))
        return {"error": None, "correct": bool((t == expected).all())}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    """Inside the namespace: run a 2-rank job, print what happened as JSON."""
    job = faultjob.run_job(2, allreduce_big, init=False, timeout_s=120)
    print(
        json.dumps(
            {
                "ranks": [
                    {
                        "exitcode": r.exitcode,
                        "returned": r.returned,
                        "value": r.value,
                        "log": r.log,
                    }
                    for r in job.ranks
                ],
                "leftover_shm": job.leftover_shm,
            }
        )
    )


def run_with_small_shm(size: str, buffer_bytes: str) -> dict[str, Any]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs on /dev/shm")
    tests = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path.insert(0, {tests!r}); import test_shm_space as t; t.main()"
    script = (
        f"mount -t tmpfs -o size={size} tmpfs /dev/shm && "
        f"exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"
    )
    env = support.subprocess_env(
        DUMMY_COLLECTIVES_BUFFER_BYTES=buffer_bytes,
        DUMMY_COLLECTIVES_PEER_ACCESS="0",  # through the slots: the segment's pages are touched
        DUMMY_COLLECTIVES_DEBUG="WARN",
    )
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace: {probe.stderr.decode().strip()}")
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_falls_back_to_smaller_buffers_where_dev_shm_is_short() -> None:
    # 2 ranks with buffer_bytes 4 MiB need ~17 MiB of shared memory; 8 MiB hold it with 1 MiB.
    result = run_with_small_shm("8M", "4M")
    report = json.dumps(result, indent=1)
    for rank in result["ranks"]:
        assert rank["exitcode"] == 0 and rank["returned"], report  # no SIGBUS (-7)
        assert rank["value"] == {"error": None, "correct": True}, report
    log = result["ranks"][0]["log"]
    assert "/dev/shm has too little free space" in log, report
    assert "using buffer_bytes 1 MiB" in log, report
    assert not result["leftover_shm"], report


@pytest.mark.slow
def test_raises_on_every_rank_where_dev_shm_holds_no_group() -> None:
    # The point-to-point rings alone (1 MiB for 2 ranks) do not fit in 1 MiB.
    result = run_with_small_shm("1M", "1M")
    report = json.dumps(result, indent=1)
    for rank in result["ranks"]:
        assert rank["exitcode"] == 0 and rank["returned"], report  # no SIGBUS (-7)
        error = rank["value"]["error"]
        assert error is not None and "/dev/shm is too small" in error, report
        assert "needs" in error and "free" in error, report
        assert "--shm-size" in error and "--ipc=host" in error, report
    assert not result["leftover_shm"], report
