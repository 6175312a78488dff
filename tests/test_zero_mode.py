"""The tutorial's behaviour ("zero" mode): outputs zeroed, broadcast raises.

Selected per group, either by ``DUMMY_COLLECTIVES_MODE=zero`` in the
environment when the group is created or by
``pg_options=dummy_collectives.Options(mode="zero")``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Literal

import pytest
import support
import torch
import torch.distributed as dist
from support import SMALL_SHAPES, WORLD_SIZES, dtype_id, filler, rank_input

pytestmark = [support.requires_dummy, support.requires_backend_module]

MODE_ENV = "DUMMY_COLLECTIVES_MODE"
ZERO_DTYPES = (torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.complex64)


@contextlib.contextmanager
def env_var(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def make_zero_group(how: Literal["env", "options"]) -> dist.ProcessGroup:
    if how == "env":
        with env_var(MODE_ENV, "zero"):
            return dist.new_group(backend="dummy")
    import dummy_collectives

    return dist.new_group(backend="dummy", pg_options=dummy_collectives.Options(mode="zero"))


def check_zero_mode(how: Literal["env", "options"]) -> list[str]:
    rank, ws = dist.get_rank(), dist.get_world_size()
    failures: list[str] = []
    group = make_zero_group(how)
    try:
        for dtype in ZERO_DTYPES:
            for shape in SMALL_SHAPES:
                what = f"{dtype_id(dtype)}{list(shape)}"
                zeros = torch.zeros(shape, dtype=dtype)
                tensor = torch.ones(shape, dtype=dtype)
                dist.all_reduce(tensor, group=group)
                support.check_equal(failures, f"zero-mode allreduce {what}", tensor, zeros)

                outputs = [filler(shape, dtype) for _ in range(ws)]
                mine = filler(shape, dtype)
                dist.all_gather(outputs, mine.clone(), group=group)
                for r, out in enumerate(outputs):
                    support.check_equal(
                        failures, f"zero-mode all_gather {what} slot {r}", out, zeros
                    )
        try:
            dist.broadcast(torch.ones(8), src=0, group=group)
        except RuntimeError:
            pass
        else:
            failures.append("zero-mode broadcast did not raise RuntimeError")
        # Async ops are zeroed too.
        tensor = torch.ones(100)
        work = dist.all_reduce(tensor, group=group, async_op=True)
        work.wait()
        support.check_equal(failures, "zero-mode async allreduce", tensor, torch.zeros(100))
    finally:
        dist.destroy_process_group(group)

    # The default group and new groups without the setting are unaffected.
    support.check_group_usable(failures, "default group after zero-mode group")
    normal = dist.new_group(backend="dummy")
    try:
        support.check_group_usable(failures, "new group without zero mode", normal)
        t = rank_input(rank, (11,), torch.float32)
        dist.broadcast(t, src=0, group=normal)
        support.check_equal(failures, "normal broadcast", t, rank_input(0, (11,), torch.float32))
    finally:
        dist.destroy_process_group(normal)
    if os.environ.get(MODE_ENV) == "zero":
        failures.append(f"{MODE_ENV} leaked into the environment")
    return failures


@pytest.mark.parametrize("how", ["env", "options"])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_zero_mode(pool: support.PoolFactory, world_size: int, how: str) -> None:
    support.assert_no_failures(pool(world_size).run_ok(check_zero_mode, how))


def check_options_object() -> dict[str, str]:
    import dummy_collectives

    with env_var(MODE_ENV, "zero"):
        from_env = dummy_collectives.Options()
    return {
        "explicit": str(getattr(dummy_collectives.Options(mode="zero"), "mode", "?")),
        "default": str(getattr(dummy_collectives.Options(), "mode", "?")),
        "from_env": str(getattr(from_env, "mode", "?")),
    }


def test_options_mode_attribute(pool: support.PoolFactory) -> None:
    (info,) = pool(1).run_ok(check_options_object)
    if "?" in info.values():
        pytest.skip(f"dummy_collectives.Options has no readable mode: {info}")
    assert "zero" in info["explicit"].lower(), info
    assert "zero" in info["from_env"].lower(), info
    assert "zero" not in info["default"].lower(), info
