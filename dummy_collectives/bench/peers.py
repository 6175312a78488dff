"""The peers: DeepSpeed's shm allreduce (inside the rank processes) and Open MPI (mpirun).

DeepSpeed: with ``DS_ACCELERATOR=cpu`` and torch.distributed already initialised (gloo),
``deepspeed.comm.init_distributed`` wraps the existing group in its ``TorchBackend``, which
JIT-builds (first time: about a minute) and initialises the ``deepspeed_shm_comm_op``; its
shm path is taken only when ``LOCAL_SIZE`` equals the world size (set by the runner).
``deepspeed.comm.inference_all_reduce`` then reduces float32 CPU tensors in shared memory.

Open MPI: ``mpirun --allow-run-as-root --oversubscribe -np N python -m
dummy_collectives.bench.mpi_peer --spec JSON`` runs :mod:`.mpi_peer`, which prints one
result line per point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from dummy_collectives.bench.plan import DEEPSPEED, OPENMPI, Plan
from dummy_collectives.bench.results import ERROR, Result, not_measured

if TYPE_CHECKING:
    from dummy_collectives.bench.collectives import Buffers

RESULT_PREFIX = "BENCH_RESULT "
DEEPSPEED_SHM_PREFIX = "deepspeed_allreduce_buffer"
DEEPSPEED_COLLECTIVES = ("allreduce",)
_LINE_POLL_S = 1.0


@dataclass
class PeerStatus:
    """Whether a peer can run here, and what the report says about it."""

    name: str
    available: bool
    detail: str


@dataclass
class Outcome:
    """What a set of ranks (torch or MPI) produced for one world size."""

    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def deepspeed_status(plan: Plan) -> PeerStatus:
    """DeepSpeed runs on CPU allreduce only, and only when importable."""
    if DEEPSPEED not in plan.peers:
        return PeerStatus(DEEPSPEED, False, "DeepSpeed: not requested")
    if importlib.util.find_spec("deepspeed") is None:
        return PeerStatus(DEEPSPEED, False, "DeepSpeed: not installed")
    if plan.device != "cpu":
        return PeerStatus(DEEPSPEED, False, "DeepSpeed: skipped (its shm allreduce is CPU-only)")
    if not set(DEEPSPEED_COLLECTIVES) & set(plan.collectives):
        return PeerStatus(DEEPSPEED, False, "DeepSpeed: skipped (it offers allreduce only)")
    from importlib.metadata import version

    return PeerStatus(
        DEEPSPEED,
        True,
        f"DeepSpeed {version('deepspeed')}: shm allreduce "
        "(deepspeed.comm.inference_all_reduce, DS_ACCELERATOR=cpu), allreduce only",
    )


def open_deepspeed(world_size: int) -> Callable[[str, Buffers], Callable[[], object] | None]:
    """Sets up DeepSpeed's shm allreduce in this rank; an op factory for allreduce only."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed.comm as dsc
    import torch
    from deepspeed.comm import comm as ds_comm

    dsc.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    backend = ds_comm.cdb
    shm_op = getattr(backend, "shm_comm_op", None)
    level = getattr(backend, "shm_vector_kernel_level", 0)
    if shm_op is None or not hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        raise RuntimeError("DeepSpeed's shm comm op did not load (it would fall back to gloo)")
    if level < 1:
        raise RuntimeError("no AVX2: DeepSpeed's float32 shm kernel would fall back to gloo")

    def factory(collective: str, bufs: Buffers) -> Callable[[], object] | None:
        if collective not in DEEPSPEED_COLLECTIVES:
            return None
        tensor = bufs.inp
        return lambda: dsc.inference_all_reduce(tensor)

    return factory


def remove_deepspeed_segments(port: int, world_size: int) -> list[str]:
    """Deletes the /dev/shm segments DeepSpeed's shm op left for the ranks that used ``port``.

    DeepSpeed never unlinks them (66 MiB per rank); their names hold the uid, MASTER_ADDR,
    MASTER_PORT and rank, so only this run's are touched.
    """
    removed = []
    for rank in range(world_size):
        name = f"{DEEPSPEED_SHM_PREFIX}_{os.getuid()}_127.0.0.1_{port}_{rank}"
        path = Path("/dev/shm") / name
        if path.exists():
            path.unlink(missing_ok=True)
            removed.append(name)
    return removed


def openmpi_status(plan: Plan) -> PeerStatus:
    """Open MPI needs ``mpirun`` (Open MPI's), mpi4py and numpy; CPU only."""
    if OPENMPI not in plan.peers:
        return PeerStatus(OPENMPI, False, "Open MPI: not requested")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return PeerStatus(OPENMPI, False, "Open MPI: not installed (no mpirun on PATH)")
    for module in ("mpi4py", "numpy"):
        if importlib.util.find_spec(module) is None:
            return PeerStatus(OPENMPI, False, f"Open MPI: not usable ({module} not installed)")
    if plan.device != "cpu":
        return PeerStatus(OPENMPI, False, "Open MPI: skipped (CPU peer; --device cuda)")
    try:
        out = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return PeerStatus(OPENMPI, False, f"Open MPI: mpirun --version failed ({exc})")
    first = out.strip().splitlines()[0] if out.strip() else "?"
    if "Open MPI" not in out:
        return PeerStatus(OPENMPI, False, f"Open MPI: skipped (mpirun is not Open MPI: {first})")
    from importlib.metadata import version

    return PeerStatus(OPENMPI, True, f"{first}, mpi4py {version('mpi4py')}, numpy float32")


def mpirun_command(plan: Plan, world_size: int) -> list[str]:
    """The command line that runs :mod:`.mpi_peer` on ``world_size`` ranks."""
    spec = {
        "collectives": list(plan.collectives),
        "sizes": list(plan.sizes),
        "timing": asdict(plan.timing),
    }
    return [
        shutil.which("mpirun") or "mpirun",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        str(world_size),
        sys.executable,
        "-m",
        "dummy_collectives.bench.mpi_peer",
        "--spec",
        json.dumps(spec, separators=(",", ":")),
    ]


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_openmpi(plan: Plan, world_size: int, emit: Callable[[Result], None]) -> Outcome:
    """Runs the MPI peer for one world size; results as they come, notes on failures."""
    outcome = Outcome()
    proc = subprocess.Popen(
        mpirun_command(plan, world_size),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    deadline = time.monotonic() + plan.init_timeout_s
    other: list[str] = []
    try:
        while True:
            try:
                line = lines.get(timeout=_LINE_POLL_S)
            except queue.Empty:
                if time.monotonic() > deadline:
                    outcome.notes.append(f"openmpi (ws={world_size}): timed out")
                    break
                continue
            if line is None:
                break
            if line.startswith(RESULT_PREFIX):
                result = Result.from_dict(json.loads(line[len(RESULT_PREFIX) :]))
                outcome.results.append(result)
                emit(result)
                deadline = time.monotonic() + plan.timeout_s
            elif line.strip():
                other.append(line.rstrip())
    finally:
        _stop(proc)
    if proc.returncode:
        tail = " | ".join(other[-5:])
        outcome.notes.append(f"openmpi (ws={world_size}): mpirun exited {proc.returncode}: {tail}")
        if not outcome.results:
            outcome.results.append(
                not_measured(OPENMPI, "allreduce", world_size, plan.sizes[0], ERROR, tail)
            )
    return outcome


def _stop(proc: subprocess.Popen[str]) -> None:
    """Waits a little for mpirun, then ends its process group (it was started in its own)."""
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
