"""Helpers shared by the test modules (importable inside rank processes too)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import harness
import pytest
import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

REPO_ROOT = Path(__file__).resolve().parent.parent

# Type of the ``pool`` fixture (conftest.py): world_size -> started RankPool.
PoolFactory = Callable[..., harness.RankPool]

WORLD_SIZES = (1, 2, 3, 4)

ALL_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
# Dtypes that also get a multi-MiB run (the expensive part of the suite).
BIG_DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.int64)
# Shapes every collective is checked with: empty, one element, odd, n-d, and
# an odd size of tens of KiB (crosses typical small-message thresholds).
SMALL_SHAPES: tuple[tuple[int, ...], ...] = ((0,), (1,), (1023,), (3, 5, 7), (20011,))
BIG_BYTES = 3 * 2**20

IS_DUMMY = harness.backend_under_test() == "dummy"

# Tests that compare the backend under test with gloo: against gloo they would compare gloo with
# itself, and their programs include what gloo cannot run (PREMUL_SUM, uneven list all_to_all).
compares_with_gloo = pytest.mark.skipif(
    harness.backend_under_test() == "gloo", reason="compares the backend under test with gloo"
)

requires_dummy = pytest.mark.skipif(
    not IS_DUMMY,
    reason=f"checks dummy-specific behaviour; backend under test is "
    f"{harness.backend_under_test()!r}",
)
# DC_TEST_HOSTS (harness.py) splits the ranks over simulated hosts: the backend then runs its
# multi-host path, whose groups take no receive from any source (README).
SIMULATED_HOSTS = bool(os.environ.get("DC_TEST_HOSTS"))
requires_one_host = pytest.mark.skipif(
    SIMULATED_HOSTS,
    reason="checks one host's shared-memory path or a receive from any source; DC_TEST_HOSTS "
    "puts the ranks on several simulated hosts",
)
requires_backend_module = pytest.mark.skipif(
    not harness.backend_module_importable(),
    reason="the backend's Python module (e.g. dummy_collectives) is not importable",
)


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def big_shape(dtype: torch.dtype) -> tuple[int]:
    """A few MiB plus an odd number of elements."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return (BIG_BYTES // itemsize + 7,)


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def is_int(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def rank_input(rank: int, shape: Sequence[int], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Deterministic input of ``rank``; any rank can recompute any other's.

    Values are small integers (halves for floating types) so that sums,
    products, min/max and bit operations over 4 ranks are exact in every
    dtype: signed values are in {-2..2}, unsigned in {0, 1, 2}, and bool
    patterns cover every combination of up to 4 ranks.
    """
    numel = 1
    for dim in shape:
        numel *= dim
    idx = torch.arange(numel, dtype=torch.int64)
    base = (idx * 7 + rank * 5 + seed * 3) % 5 - 2
    if dtype == torch.bool:
        out = (((idx + seed) % 16) >> rank) & 1
        return out.to(torch.bool).reshape(shape)
    if dtype == torch.uint8:
        return ((idx * 7 + rank * 5 + seed * 3) % 3).to(dtype).reshape(shape)
    if dtype.is_complex:
        imag = (idx * 3 + rank * 7 + seed) % 5 - 2
        real = base.to(torch.float64) / 2
        value = torch.complex(real, imag.to(torch.float64) / 2)
        return value.to(dtype).reshape(shape)
    if dtype.is_floating_point:
        return (base.to(torch.float64) / 2).to(dtype).reshape(shape)
    return base.to(dtype).reshape(shape)


def filler(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Garbage to pre-fill outputs with (distinct from every rank_input)."""
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    return torch.full(shape, 77, dtype=dtype)


def describe_mismatch(actual: torch.Tensor, expected: torch.Tensor) -> str:
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        return (
            f"got {actual.dtype}{list(actual.shape)}, "
            f"expected {expected.dtype}{list(expected.shape)}"
        )
    a = actual.reshape(-1)
    e = expected.reshape(-1)
    if a.dtype == torch.bool:
        bad = (a != e).nonzero().reshape(-1)
    else:
        bad = (a.to(torch.complex128) != e.to(torch.complex128)).nonzero().reshape(-1)
    if bad.numel() == 0:
        return "values equal but tensors differ (layout/NaN?)"
    first = int(bad[0])
    return (
        f"{bad.numel()} of {a.numel()} elements differ; first at flat index {first}: "
        f"got {a[first].item()!r}, expected {e[first].item()!r}"
    )


def check_equal(
    failures: list[str], what: str, actual: torch.Tensor, expected: torch.Tensor
) -> bool:
    """Append a failure unless ``actual`` equals ``expected`` exactly."""
    if (
        actual.shape == expected.shape
        and actual.dtype == expected.dtype
        and torch.equal(actual.cpu(), expected.cpu())
    ):
        return True
    failures.append(f"{what}: {describe_mismatch(actual.cpu(), expected.cpu())}")
    return False


def check_close(
    failures: list[str], what: str, actual: torch.Tensor, expected: torch.Tensor
) -> bool:
    """Like :func:`check_equal` with a few ulps of tolerance (AVG results)."""
    if not (expected.dtype.is_floating_point or expected.dtype.is_complex):
        return check_equal(failures, what, actual, expected)
    real = expected.real.dtype if expected.dtype.is_complex else expected.dtype
    eps = torch.finfo(real).eps
    try:
        torch.testing.assert_close(actual.cpu(), expected.cpu(), rtol=4 * eps, atol=4 * eps)
    except AssertionError as exc:
        failures.append(f"{what}: {str(exc).splitlines()[0]} ({exc})")
        return False
    return True


def check_reduced(
    failures: list[str], what: str, op: str, actual: torch.Tensor, expected: torch.Tensor
) -> bool:
    """The result of reduction ``op``: exact, but AVG (a division) within a few ulps."""
    check = check_close if op == "AVG" else check_equal
    return check(failures, what, actual, expected)


def assert_no_failures(per_rank: Sequence[Iterable[str]], limit: int = 40) -> None:
    """Raise one AssertionError listing the failures every rank reported."""
    lines = [f"rank {r}: {f}" for r, fs in enumerate(per_rank) for f in fs]
    if lines:
        shown = "\n".join(lines[:limit])
        more = f"\n... and {len(lines) - limit} more" if len(lines) > limit else ""
        raise AssertionError(f"{len(lines)} failure(s):\n{shown}{more}")


def record_error(
    failures: list[str], unsupported: list[str], what: str, exc: BaseException
) -> None:
    """A collective raised: a failure for the dummy backend and for a backend that declares
    what it implements (harness.errors_are_failures); for any other backend under test (e.g.
    gloo without int16) just "unsupported"."""
    text = f"{what}: {type(exc).__name__}: {exc}"
    if harness.errors_are_failures():
        failures.append(text)
    else:
        unsupported.append(text.splitlines()[0])


def check_group_usable(
    failures: list[str], what: str, group: dist.ProcessGroup | None = None
) -> None:
    """Run a SUM allreduce on ``group`` and check it (after an error)."""
    ws = dist.get_world_size(group)
    rank = dist.get_rank(group)
    t = torch.full((5,), float(rank + 1))
    try:
        dist.all_reduce(t, group=group)
    except (RuntimeError, ValueError) as exc:
        failures.append(f"{what}: group unusable afterwards: {exc}")
        return
    check_equal(
        failures,
        f"{what}: allreduce afterwards",
        t,
        torch.full((5,), float(ws * (ws + 1) // 2)),
    )


def subprocess_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python: inherits ours, one thread, no pytest."""
    env = dict(os.environ)
    env.pop("PYTEST_CURRENT_TEST", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def torchrun_command(nproc: int, script: Path | str, *args: str) -> list[str]:
    """``torchrun --standalone`` (its module form, bound to this interpreter)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        str(script),
        *args,
    ]


def run_subprocess(
    cmd: Sequence[str], env: dict[str, str], timeout_s: float = 180.0
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session; on timeout kill the whole session."""
    proc = subprocess.Popen(
        list(cmd),
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"{' '.join(cmd)} did not finish in {timeout_s} s\nstdout:\n{out}\nstderr:\n{err}"
        )
    finally:
        # torchrun's workers live in the same session: leave nothing behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


# ---------------------------------------------------------------- allreduce reference

OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
PREMUL_FACTOR = 2.5
BITWISE = ("BAND", "BOR", "BXOR")


def implemented_ops(ops: Sequence[str] = OPS) -> list[str]:
    """The ReduceOps of ``ops`` the backend under test implements for all_reduce: all of them,
    unless it declares otherwise (harness.backend_capabilities, e.g. minimal: SUM only)."""
    return [op for op in ops if harness.supports(f"all_reduce:{op}")]


def make_op(name: str) -> ReduceOp:
    """The ReduceOp passed to ``all_reduce`` for ``name``."""
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return getattr(ReduceOp, name)


def invalid_reason(dtype: torch.dtype, op: str) -> str | None:
    """Why (dtype, op) must be rejected, or None if it must work."""
    if dtype.is_complex and op in ("MIN", "MAX", "PRODUCT", *BITWISE):
        return "no order/bits on complex (PRODUCT: rejected by torch's frontend)"
    if dtype.is_floating_point and op in BITWISE:
        return "bitwise op on floating type"
    if dtype == torch.bool and op in ("AVG", "PREMUL_SUM"):
        return "AVG/PREMUL_SUM on bool"
    if is_int(dtype) and op == "PREMUL_SUM":
        return "PREMUL_SUM on integer type"
    return None


def _bitwise(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: Sequence[torch.Tensor],
) -> torch.Tensor:
    return functools.reduce(fn, inputs)


def reference(dtype: torch.dtype, op: str, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Exact elementwise reduction of ``inputs`` (one tensor per rank).

    SUM/PRODUCT/MIN/MAX elementwise; AVG is SUM / world size, truncated
    towards zero for integer dtypes (like C++ ``/``); PREMUL_SUM is
    sum(PREMUL_FACTOR * x); on bool SUM/MAX/BOR are "or", PRODUCT/MIN/BAND
    "and" and BXOR "xor". Computed in a wide dtype, then cast (the inputs are
    chosen so that the results are exact in every dtype).
    """
    ws = len(inputs)
    if dtype == torch.bool:
        stacked = torch.stack(list(inputs))
        if op in ("SUM", "MAX", "BOR"):
            return stacked.any(0)
        if op in ("PRODUCT", "MIN", "BAND"):
            return stacked.all(0)
        if op == "BXOR":
            return _bitwise(torch.bitwise_xor, inputs)
        raise AssertionError(op)
    if dtype.is_complex:
        wide = torch.complex128
    elif dtype.is_floating_point:
        wide = torch.float64
    else:
        wide = torch.int64
    stacked = torch.stack([t.to(wide) for t in inputs])
    if op == "SUM":
        out = stacked.sum(0)
    elif op == "PRODUCT":
        out = stacked.prod(0)
    elif op == "MIN":
        out = stacked.amin(0)
    elif op == "MAX":
        out = stacked.amax(0)
    elif op == "AVG":
        total = stacked.sum(0)
        if wide == torch.int64:
            out = torch.div(total, ws, rounding_mode="trunc")
        else:
            out = total / ws
    elif op == "PREMUL_SUM":
        out = (stacked * PREMUL_FACTOR).sum(0)
    elif op == "BAND":
        out = _bitwise(torch.bitwise_and, list(stacked))
    elif op == "BOR":
        out = _bitwise(torch.bitwise_or, list(stacked))
    elif op == "BXOR":
        out = _bitwise(torch.bitwise_xor, list(stacked))
    else:
        raise AssertionError(op)
    return out.to(dtype)


def cuda_device() -> torch.device:
    """GPU 0, made this process's current device (the CUDA tests put every rank on it)."""
    torch.cuda.set_device(0)
    return torch.device("cuda", 0)


def torchfrtrace(trace_dir: Path, prefix: str) -> str:
    """What ``torchfrtrace trace_dir -p prefix`` prints (torch's flight recorder analyser, run
    as its module: the console script may not be on the PATH); asserts that it succeeded."""
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(trace_dir),
         "-p", prefix],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    return output
