"""The peers, each run in processes of its own after the torch ranks of a world size are done.

Nothing of DeepSpeed is loaded into the dummy/gloo rank processes (its OpenMP kernels, thread
settings and busy-waiting shm op stay out of their measurements), and its ranks get
``OMP_NUM_THREADS=1`` before torch is imported rather than relying on a later
``torch.set_num_threads(1)``.

DeepSpeed: N processes ``python -m benchmarks.bench.deepspeed_peer --plan JSON``
(:mod:`.deepspeed_peer`), environment from :func:`deepspeed_environment`: ``DS_ACCELERATOR=cpu``,
``OMP_NUM_THREADS=1``, the rendezvous and ``LOCAL_SIZE`` = the world size (DeepSpeed's shm path
is taken only then). There ``deepspeed.comm.init_distributed`` wraps the gloo group in its
``TorchBackend``, which JIT-builds (first time: about a minute) and initialises the
``deepspeed_shm_comm_op``; ``deepspeed.comm.inference_all_reduce`` then reduces float32 CPU
tensors in shared memory. Rank 0 prints one result line per point.

Open MPI: ``mpirun --allow-run-as-root --oversubscribe -np N python -m
benchmarks.bench.mpi_peer --spec JSON`` runs :mod:`.mpi_peer`, which prints one
result line per point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from benchmarks.bench.plan import DEEPSPEED, OPENMPI, Plan
from benchmarks.bench.results import ERROR, Result, not_measured

RESULT_PREFIX = "BENCH_RESULT "
NOTE_PREFIX = "BENCH_NOTE "
DEEPSPEED_SHM_PREFIX = "deepspeed_allreduce_buffer"
DEEPSPEED_COLLECTIVES = ("allreduce",)
MASTER_ADDR = "127.0.0.1"
_LINE_POLL_S = 1.0
_WAIT_S = 30.0  # for processes that said all they had to say
_FAILED_WAIT_S = 3.0  # for the others of a failed rank: they may wait for it forever


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


def deepspeed_segment(port: int, rank: int) -> str:
    """The /dev/shm name of the segment DeepSpeed's shm op makes for ``rank`` of a run on ``port``.

    Its parts: the uid, MASTER_ADDR (127.0.0.1 here), MASTER_PORT and the rank.
    """
    return f"{DEEPSPEED_SHM_PREFIX}_{os.getuid()}_{MASTER_ADDR}_{port}_{rank}"


def remove_deepspeed_segments(port: int, world_size: int) -> list[str]:
    """Deletes the /dev/shm segments DeepSpeed's shm op left for the ranks that used ``port``.

    DeepSpeed never unlinks them (66 MiB per rank); their names hold the uid, MASTER_ADDR,
    MASTER_PORT and rank, so only this run's are touched.
    """
    removed = []
    for rank in range(world_size):
        name = deepspeed_segment(port, rank)
        path = Path("/dev/shm") / name
        if path.exists():
            path.unlink(missing_ok=True)
            removed.append(name)
    return removed


def deepspeed_environment(world_size: int, rank: int, port: int) -> dict[str, str]:
    """The environment of one DeepSpeed rank process: ours plus rendezvous and thread settings.

    ``OMP_NUM_THREADS=1`` has to be there before torch is imported: the shm kernels' copy and
    reduce loops are OpenMP parallel regions, and a second OpenMP thread per rank competes with
    the other ranks for the cores (and spins after each region).
    """
    env = dict(os.environ)
    env.update(
        DS_ACCELERATOR="cpu",
        OMP_NUM_THREADS="1",
        MASTER_ADDR=MASTER_ADDR,
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
        LOCAL_SIZE=str(world_size),  # the shm path is taken only when all ranks are local
    )
    return env


def run_deepspeed(
    plan: Plan, world_size: int, port: int, emit: Callable[[Result], None]
) -> Outcome:
    """Runs DeepSpeed's ranks (:mod:`.deepspeed_peer`) for one world size, then removes the
    shared memory segments they left; results as they come, notes on failures."""
    command = [sys.executable, "-m", "benchmarks.bench.deepspeed_peer"]
    command += ["--plan", plan.to_json()]
    launches = [
        Launch(command, deepspeed_environment(world_size, rank, port), f"rank {rank}")
        for rank in range(world_size)
    ]
    try:
        return _run_processes(DEEPSPEED, plan, world_size, launches, emit)
    finally:
        remove_deepspeed_segments(port, world_size)


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
        "benchmarks.bench.mpi_peer",
        "--spec",
        json.dumps(spec, separators=(",", ":")),
    ]


@dataclass
class Launch:
    """One process of a peer: its command line, environment (None: ours) and name in notes."""

    command: list[str]
    env: dict[str, str] | None
    label: str


def _pump(index: int, stream: IO[str], lines: queue.Queue[tuple[int, str | None]]) -> None:
    for line in stream:
        lines.put((index, line))
    lines.put((index, None))


def run_openmpi(plan: Plan, world_size: int, emit: Callable[[Result], None]) -> Outcome:
    """Runs the MPI peer for one world size; results as they come, notes on failures."""
    launch = Launch(mpirun_command(plan, world_size), None, "mpirun")
    return _run_processes(OPENMPI, plan, world_size, [launch], emit)


def _run_processes(
    name: str,
    plan: Plan,
    world_size: int,
    launches: list[Launch],
    emit: Callable[[Result], None],
) -> Outcome:
    """Starts the processes (each in a session of its own), reads their output until all
    have closed it, and ends them: result and note lines make the outcome, the other lines
    go into the note on a failure. One process exiting non-zero ends the others (they may be
    waiting for it forever)."""
    outcome = Outcome()
    lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
    procs: list[subprocess.Popen[str]] = []
    other: list[str] = []
    failed = True
    try:
        for index, launch in enumerate(launches):
            proc = subprocess.Popen(
                launch.command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
                env=launch.env,
            )
            procs.append(proc)
            threading.Thread(target=_pump, args=(index, proc.stdout, lines), daemon=True).start()
        labels = [launch.label for launch in launches]
        failed = _read(name, plan, world_size, procs, lines, emit, outcome, other, labels)
    except OSError as exc:
        other.append(f"could not start {launches[len(procs)].label}: {exc}")
    finally:
        for proc in procs:
            _stop(proc, _FAILED_WAIT_S if failed else _WAIT_S)
    exits = [
        f"{launches[index].label} exited {proc.returncode}"
        for index, proc in enumerate(procs)
        if proc.returncode
    ]
    if exits or len(procs) < len(launches):
        tail = " | ".join(other[-5:])
        outcome.notes.append(f"{name} (ws={world_size}): {', '.join(exits) or 'failed'}: {tail}")
        if not outcome.results:
            outcome.results.append(
                not_measured(name, "allreduce", world_size, plan.sizes[0], ERROR, tail)
            )
    return outcome


def _read(
    name: str,
    plan: Plan,
    world_size: int,
    procs: list[subprocess.Popen[str]],
    lines: queue.Queue[tuple[int, str | None]],
    emit: Callable[[Result], None],
    outcome: Outcome,
    other: list[str],
    labels: list[str],
) -> bool:
    """Fills ``outcome`` (and ``other``) from the processes' lines; True if they failed."""
    deadline = time.monotonic() + plan.init_timeout_s
    open_streams = len(procs)
    while open_streams:
        try:
            index, line = lines.get(timeout=_LINE_POLL_S)
        except queue.Empty:
            if any(proc.poll() for proc in procs):
                return True
            if time.monotonic() > deadline:
                outcome.notes.append(f"{name} (ws={world_size}): timed out")
                return True
            continue
        if line is None:
            open_streams -= 1
        elif line.startswith(RESULT_PREFIX):
            result = Result.from_dict(json.loads(line[len(RESULT_PREFIX) :]))
            outcome.results.append(result)
            emit(result)
            deadline = time.monotonic() + plan.timeout_s
        elif line.startswith(NOTE_PREFIX):
            outcome.notes.append(line[len(NOTE_PREFIX) :].strip())
        elif line.strip():
            other.append(f"[{labels[index]}] {line.rstrip()}" if len(labels) > 1 else line.rstrip())
    return False


def _stop(proc: subprocess.Popen[str], wait_s: float) -> None:
    """Waits a little for a process, then ends its process group (it was started in its own)."""
    try:
        proc.wait(timeout=wait_s)
        return
    except subprocess.TimeoutExpired:
        pass
    for sig, grace_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
