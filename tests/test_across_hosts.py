"""Groups that span hosts, made inside the cached pools: each rank names its simulated host
(``DUMMY_COLLECTIVES_HOST_ID``, read when a group is made) and the pool makes a dummy group over
every rank, so these run the two-level path whatever ``DC_TEST_HOSTS`` says.

- a send and a receive of different sizes across hosts: an error on both ranks, naming both
  sides, and the group stays usable (as on one host), never gloo's abort of the receiver;
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module]

HOST_ID = "DUMMY_COLLECTIVES_HOST_ID"


@contextlib.contextmanager
def spanning_group(hosts_of: Sequence[int]) -> Iterator[dist.ProcessGroup]:
    """A dummy group of every rank of the pool, rank r on simulated host ``hosts_of[r]``."""
    before = os.environ.get(HOST_ID)
    os.environ[HOST_ID] = f"span{hosts_of[harness.rank()]}"
    try:
        group = dist.new_group(backend="dummy")
    finally:
        if before is None:
            del os.environ[HOST_ID]
        else:
            os.environ[HOST_ID] = before
    backend = group._get_backend(torch.device("cpu"))
    assert type(backend).__name__ == "HierarchicalBackend", type(backend)
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


def attempt(fn: Any) -> str | None:
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# --------------------------------------------------------------------------- inside the ranks

TAG = 7


def send_recv_size_mismatch(sent: int, expected: int) -> dict[str, Any]:
    """Rank 0 sends ``sent`` floats to rank 1 (another host), which receives into ``expected``;
    then the same pair and tag with matching sizes, and an allreduce."""
    out: dict[str, Any] = {}
    with spanning_group([0, 1]) as group:
        if harness.rank() == 0:
            data = torch.arange(float(sent))
            out["error"] = attempt(lambda: dist.send(data, dst=1, group=group, tag=TAG))
            dist.send(torch.arange(5.0), dst=1, group=group, tag=TAG)
        else:
            buf = torch.full((expected,), -1.0)
            out["error"] = attempt(lambda: dist.recv(buf, src=0, group=group, tag=TAG))
            out["untouched"] = bool((buf == -1.0).all())
            after = torch.zeros(5)
            dist.recv(after, src=0, group=group, tag=TAG)
            out["after"] = after.tolist()
        total = torch.ones(3)
        dist.all_reduce(total, group=group)
        out["allreduce"] = total.tolist()
    return out


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("sent, expected", [(8, 4), (4, 8)], ids=["larger", "smaller"])
def test_send_recv_of_different_sizes_across_hosts_fails_both_and_leaves_the_group_usable(
    pool: support.PoolFactory, sent: int, expected: int
) -> None:
    # Before: gloo aborted the receiver of a larger message (SIGABRT: "Received data size
    # doesn't match expected size") and filled part of the buffer from a smaller one silently.
    sender, receiver = pool(2).run_ok(send_recv_size_mismatch, sent, expected)
    for side, result in (("send", sender), ("recv", receiver)):
        error = result["error"]
        assert error is not None and error.startswith("DistBackendError"), (side, error)
        assert f"dummy {side} " in error, (side, error)
        assert "rank 0" in error and "rank 1" in error, (side, error)
        assert f"{sent * 4} bytes ({sent} Float elements)" in error, (side, error)
        assert f"{expected * 4} bytes ({expected} Float elements)" in error, (side, error)
        assert result["allreduce"] == [2.0] * 3, (side, result)
    assert receiver["untouched"], receiver
    assert receiver["after"] == [0.0, 1.0, 2.0, 3.0, 4.0], receiver
