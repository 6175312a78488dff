"""minimal_backend's own promises, each in fresh rank processes.

The project's suite (../../tests, DC_TEST_BACKEND=minimal) checks the results of the four
collectives; these check what is particular to this backend: the timeout, its errors, the
futures and the Store it leaves behind. Run: ``python -m pytest tests`` in examples/minimal_backend.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import queue
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import minimal_backend
import pytest
import torch
import torch.distributed as dist

TIMEOUT_S = 2.0


def _rank_main(
    rank: int, world_size: int, store_path: str, fn: Callable[..., Any], results: Any
) -> None:
    """One rank: a group of the minimal backend over a FileStore, then ``fn()``."""
    try:
        torch.set_num_threads(1)
        store = dist.FileStore(store_path, world_size)
        dist.init_process_group(
            minimal_backend.BACKEND_NAME,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        results.put((rank, "ok", fn(store)))
        dist.destroy_process_group()
    except BaseException:
        results.put((rank, "raised", traceback.format_exc()))


def run_ranks(world_size: int, fn: Callable[..., Any], limit_s: float = 90.0) -> list[Any]:
    """Runs module-level ``fn(store)`` in ``world_size`` fresh ranks; returns their values."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="minimal-backend-test-") as tmp:
        args = (world_size, os.path.join(tmp, "store"), fn, results)
        procs = [ctx.Process(target=_rank_main, args=(r, *args)) for r in range(world_size)]
        for proc in procs:
            proc.start()
        answers: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + limit_s
        try:
            while len(answers) < world_size:
                rank, status, value = results.get(timeout=max(0.1, deadline - time.monotonic()))
                answers[rank] = (status, value)
        except queue.Empty:
            pytest.fail(f"ranks {sorted(set(range(world_size)) - set(answers))} hung")
        finally:
            for proc in procs:
                proc.join(10.0)
                if proc.is_alive():
                    proc.kill()
    failed = {r: v for r, (status, v) in answers.items() if status != "ok"}
    assert not failed, "\n".join(f"rank {r}:\n{tb}" for r, tb in sorted(failed.items()))
    return [answers[r][1] for r in range(world_size)]


def _error(call: Callable[[], Any]) -> tuple[str, bool, str] | None:
    """(type name, is a RuntimeError or ValueError, message) of what ``call`` raised, or None."""
    try:
        call()
    except Exception as exc:
        return type(exc).__name__, isinstance(exc, (RuntimeError, ValueError)), str(exc)
    return None


def only_rank0_calls(store: dist.Store) -> dict[str, Any]:
    """Rank 0 calls all_reduce, rank 1 never does: rank 0 must raise within the timeout."""
    if dist.get_rank() != 0:
        time.sleep(3 * TIMEOUT_S)  # stays alive (and silent) past rank 0's timeout
        return {}
    start = time.monotonic()
    work = dist.all_reduce(torch.ones(4), async_op=True)
    issued_s = time.monotonic() - start
    future = work.get_future()
    error = _error(work.wait)
    took_s = time.monotonic() - start
    return {
        "issued_s": issued_s,
        "took_s": took_s,
        "error": error,
        "future_error": _error(future.wait),
        "next": _error(lambda: dist.all_reduce(torch.ones(1))),
    }


def test_a_rank_that_never_calls_makes_its_peer_raise_within_the_timeout() -> None:
    result = run_ranks(2, only_rank0_calls)[0]
    assert result["issued_s"] < 0.5, "all_reduce(async_op=True) blocked"
    assert TIMEOUT_S * 0.9 <= result["took_s"] < TIMEOUT_S + 3.0, result
    assert result["error"] is not None, "all_reduce without its peer returned"
    type_name, is_runtime_error, message = result["error"]
    assert is_runtime_error, result
    for words in ("all_reduce", "rank 0 of 2", "timed out", "rank(s) 1"):
        assert words in message, (words, message)
    assert result["future_error"] is not None and "timed out" in result["future_error"][2]
    # The group is out of step now: its next collective refuses at once, saying why.
    assert result["next"] is not None and "failed earlier" in result["next"][2], result


NOT_IMPLEMENTED: dict[str, Callable[[], Any]] = {
    "reduce": lambda: dist.reduce(torch.ones(2), dst=0),
    "gather": lambda: dist.gather(torch.ones(2), [torch.ones(2)] * 2, dst=dist.get_rank()),
    "scatter": lambda: dist.scatter(torch.ones(2), [torch.ones(2)] * 2, src=dist.get_rank()),
    "reduce_scatter": lambda: dist.reduce_scatter(torch.ones(2), [torch.ones(2)] * 2),
    "reduce_scatter_tensor": lambda: dist.reduce_scatter_tensor(torch.ones(2), torch.ones(4)),
    "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(torch.ones(4), torch.ones(2)),
    "all_to_all_single": lambda: dist.all_to_all_single(torch.ones(2), torch.ones(2)),
    "all_to_all": lambda: dist.all_to_all([torch.ones(1)] * 2, [torch.ones(1)] * 2),
    "send": lambda: dist.send(torch.ones(1), dst=1 - dist.get_rank()),
    "recv": lambda: dist.recv(torch.ones(1), src=1 - dist.get_rank()),
    "MAX": lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.MAX),
    "AVG": lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG),
}


def call_unimplemented(store: dist.Store) -> dict[str, Any]:
    errors = {name: _error(call) for name, call in NOT_IMPLEMENTED.items()}
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t)  # the group still works
    return {"errors": errors, "sum": t.tolist()}


def test_what_it_lacks_raises_naming_the_call_and_the_rank() -> None:
    for rank, result in enumerate(run_ranks(2, call_unimplemented)):
        assert result["sum"] == [3.0] * 3
        for name, error in result["errors"].items():
            assert error is not None, f"{name} did not raise"
            type_name, is_runtime_error, message = error
            assert is_runtime_error, (name, error)
            assert name in message and f"rank {rank} of 2" in message, (name, message)
            assert "not implemented" in message, (name, message)


def call_with_bad_input(store: dist.Store) -> dict[str, Any]:
    rank = dist.get_rank()
    errors = {
        "non-contiguous": _error(lambda: dist.all_reduce(torch.ones(4, 4).t())),
        "output list": _error(lambda: dist.all_gather([torch.ones(2)], torch.ones(2))),
        "output size": _error(lambda: dist.all_gather([torch.ones(3)] * 2, torch.ones(2))),
        "root": _error(lambda: dist.broadcast(torch.ones(2), src=5)),
        # Every rank calls, with different sizes: each raises, and the group stays in step.
        "sizes across ranks": _error(lambda: dist.all_reduce(torch.ones(2 + rank))),
    }
    t = torch.ones(2)
    dist.all_reduce(t)
    return {"errors": errors, "sum": t.tolist()}


def test_bad_input_raises_saying_what_is_wrong() -> None:
    expected = {
        "non-contiguous": "not contiguous",
        "output list": "output tensors",
        "output size": "mismatched sizes",
        "root": "is not a rank of this group",
        "sizes across ranks": "mismatched sizes",
    }
    for result in run_ranks(2, call_with_bad_input):
        assert result["sum"] == [2.0, 2.0]
        for name, words in expected.items():
            error = result["errors"][name]
            assert error is not None and error[1], (name, error)
            assert words is None or words in error[2], (name, error)


def futures_and_store(store: dist.Store) -> dict[str, Any]:
    """Futures complete with the outputs; a long run leaves the Store no bigger."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    t = torch.full((5,), float(rank + 1))
    value = dist.all_reduce(t, async_op=True).get_future().wait()
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(ws)]
    gathered = dist.all_gather(outs, torch.full((2,), rank), async_op=True).get_future().wait()
    dist.barrier()
    keys_before = store.num_keys()
    for _ in range(50):
        dist.all_reduce(torch.ones(8))
        dist.broadcast(torch.ones(8), src=0)
    dist.barrier()
    world = dist.group.WORLD
    assert world is not None
    return {
        "value": [v.tolist() for v in value],
        "gathered": [v.tolist() for v in gathered],
        "keys": (keys_before, store.num_keys()),
        "names": (str(dist.get_backend()), world._get_backend(torch.device("cpu")).name()),
    }


def test_futures_carry_outputs_and_the_store_does_not_grow() -> None:
    for result in run_ranks(2, futures_and_store):
        assert result["value"] == [[3.0] * 5]
        assert result["gathered"] == [[0, 0], [1, 1]]
        # Each rank deletes its previous key once it read its peers', so at rest the store holds
        # at most one key per rank and group, give or take the one a peer has yet to delete
        # when it is counted: the count may differ by the world size, never by the 200 keys
        # that 100 collectives would leave.
        before, after = result["keys"]
        grew = f"the store grew from {before} to {after} keys in 100 collectives"
        assert after <= before + 2, grew
        assert result["names"] == ("minimal", "minimal")


def rank0_leaves_last(store: dist.Store) -> dict[str, Any]:
    """Rank 1 destroys a group 1 s after rank 0: rank 0's destroy waits for it (its process
    serves a TCPStore in env:// and tcp:// jobs), then removes the group's keys."""
    rank = dist.get_rank()
    group = dist.new_group(backend=minimal_backend.BACKEND_NAME)
    for _ in range(10):
        dist.all_reduce(torch.ones(4), group=group)
    # The Store as c10d hands it to the group's backend: the default group's, prefixed with the
    # group's name, then with its device (a private function: this test checks key names).
    default_store = dist.distributed_c10d._get_default_store()
    view = dist.PrefixStore("cpu/", dist.PrefixStore(f"{group.group_name}/", default_store))
    seen = [key for key in ("minimal/9/0", "minimal/9/1") if view.check([key])]
    if rank == 1:
        time.sleep(1.0)
    start = time.monotonic()
    dist.destroy_process_group(group)
    took_s = time.monotonic() - start
    keys = [f"minimal/{seq}/{r}" for seq in range(10) for r in range(2)]
    keys += [f"minimal/bye/{r}" for r in range(2)]
    return {"took_s": took_s, "seen": seen, "left": [key for key in keys if view.check([key])]}


def test_rank0_leaves_a_group_last_and_clears_its_keys() -> None:
    rank0, rank1 = run_ranks(2, rank0_leaves_last)
    assert len(rank0["seen"]) == len(rank1["seen"]) == 2, (rank0, rank1)  # the keys' names hold
    assert rank0["took_s"] >= 0.8, f"rank 0 left after {rank0['took_s']:.2f} s, before rank 1"
    assert rank0["left"] == [], f"keys left behind: {rank0['left']}"
