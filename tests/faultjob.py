"""Short-lived dedicated rank jobs, for tests whose ranks die, exit or break a group for good.

The cached pools of ``conftest.py`` must stay healthy, so a test in which a rank is killed,
exits with work outstanding, re-initialises the default group or forks runs its ranks here:

``run_job(world_size, fn, *args)`` spawns ``world_size`` fresh processes (``spawn`` start
method). Each one imports the backend module, initialises a default process group over a
FileStore (unless ``init=False``) and calls the module-level ``fn(*args)``; then it exits
normally (so interpreter shutdown is part of every job). The job waits until every rank has
exited, SIGKILLs whatever is still alive at the deadline (nothing outlives the call) and
returns a :class:`JobResult`: per rank the exit code, ``fn``'s return value or the exception
it raised, and the tail of its output; plus the shared-memory names of ours (``/dev/shm/
dummy_collectives_<pid>_...``) that the job's processes left behind.

Inside a rank: :func:`rank`, :func:`world_size`, :func:`job_dir` (a directory shared by the
job's ranks), :func:`note` / :func:`read_note` (tiny files for cross-rank facts such as "I am
about to die at monotonic time t"), :func:`file_barrier`, :func:`init_method` (a fresh
FileStore URL) and :func:`init_default_group`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import faulthandler
import importlib
import itertools
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness
import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "dummy_collectives_"
LOG_TAIL_CHARS = 4000


@dataclasses.dataclass(frozen=True)
class RankOutcome:
    rank: int
    pid: int | None
    exitcode: int | None  # negative: ended by that signal
    hung: bool  # still running at the job's deadline (then SIGKILLed)
    ended_at: float | None  # when the process ended, time.monotonic() (same clock in ranks)
    returned: bool  # fn returned normally
    value: Any  # what fn returned
    error: harness.RankError | None  # what fn raised
    log: str  # tail of the rank's stdout + stderr

    def describe(self) -> str:
        what = f"value {self.value!r}" if self.returned else f"error {self.error}"
        hung = " (hung: killed at the deadline)" if self.hung else ""
        return f"rank {self.rank} (pid {self.pid}): exit code {self.exitcode}{hung}, {what}"


@dataclasses.dataclass(frozen=True)
class JobResult:
    ranks: list[RankOutcome]
    leftover_shm: list[str]  # /dev/shm names of ours created by this job's processes
    wall_s: float

    def __getitem__(self, rank: int) -> RankOutcome:
        return self.ranks[rank]

    def report(self) -> str:
        lines = [f"job of {len(self.ranks)} ranks ({self.wall_s:.1f} s):"]
        for outcome in self.ranks:
            lines.append("  " + outcome.describe())
        if self.leftover_shm:
            lines.append(f"  left in {SHM_DIR}: {self.leftover_shm}")
        for outcome in self.ranks:
            if outcome.log.strip():
                lines.append(f"---- output of rank {outcome.rank} (tail) ----\n{outcome.log}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- inside a rank


@dataclasses.dataclass(frozen=True)
class _Config:
    rank: int
    world_size: int
    workdir: str
    backend: str
    backend_module: str | None
    pg_timeout_s: float
    init: bool


_CONFIG: _Config | None = None
_stores = itertools.count()


def _config() -> _Config:
    if _CONFIG is None:
        raise RuntimeError("only available inside a faultjob rank")
    return _CONFIG


def rank() -> int:
    return _config().rank


def world_size() -> int:
    return _config().world_size


def job_dir() -> Path:
    return Path(_config().workdir)


def init_method() -> str:
    """A FileStore URL no earlier init of this job used (every rank gets the same sequence)."""
    return f"file://{job_dir()}/store{next(_stores)}"


def tcp_store(timeout_s: float) -> dist.TCPStore:
    """A TCPStore served by rank 0, as torchrun's is; rank 0 does not wait for the others to
    connect (a test may kill one first). Where a test bounds how long a wait takes: torch's
    FileStore overshoots a wait's timeout by about a second."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if rank() == 0:
        store = dist.TCPStore("127.0.0.1", 0, world_size(), True, timeout, wait_for_workers=False)
        note("tcp-store-port", store.port)
        return store
    port = read_note("tcp-store-port", wait_s=60.0)
    return dist.TCPStore("127.0.0.1", port, world_size(), False, timeout)


def init_default_group(timeout_s: float | None = None, store: dist.Store | None = None) -> None:
    """The job's default group on a fresh FileStore, or on ``store``."""
    cfg = _config()
    dist.init_process_group(
        cfg.backend,
        init_method=None if store else init_method(),
        store=store,
        rank=cfg.rank,
        world_size=cfg.world_size,
        timeout=datetime.timedelta(seconds=timeout_s or cfg.pg_timeout_s),
    )


def note(name: str, value: object) -> None:
    """Publishes a small fact for the other ranks and the test (atomic file replace)."""
    path = job_dir() / f"note-{name}"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(pickle.dumps(value))
    os.replace(tmp, path)


def read_note(name: str, wait_s: float = 0.0) -> Any:
    return _read_note(job_dir(), name, wait_s)


def file_barrier(name: str, wait_s: float = 60.0) -> None:
    """Waits until every rank got here (no process group needed; e.g. before an init with a
    short timeout, so that start-up skew between the spawned ranks does not count)."""
    note(f"{name}-{rank()}", True)
    for r in range(world_size()):
        read_note(f"{name}-{r}", wait_s)


def _read_note(workdir: Path | str, name: str, wait_s: float = 0.0) -> Any:
    path = Path(workdir) / f"note-{name}"
    deadline = time.monotonic() + wait_s
    while not path.exists():
        if time.monotonic() >= deadline:
            raise FileNotFoundError(f"no note {name!r} (waited {wait_s} s)")
        time.sleep(0.01)
    return pickle.loads(path.read_bytes())


def _job_main(config: _Config, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    global _CONFIG
    log_fd = os.open(
        os.path.join(config.workdir, f"rank{config.rank}.log"),
        os.O_WRONLY | os.O_CREAT | os.O_APPEND,
        0o644,
    )
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    _CONFIG = config
    torch.set_num_threads(1)
    if config.backend_module:
        importlib.import_module(config.backend_module)
    if config.init:
        init_default_group()
    result_path = os.path.join(config.workdir, f"result{config.rank}")
    pid = os.getpid()
    try:
        value = fn(*args)
    except BaseException as exc:
        if os.getpid() == pid:  # not a child that fn forked and that leaves by an exception
            with open(result_path, "wb") as f:
                pickle.dump(("err", harness.RankError.from_exception(exc)), f)
        raise  # the process exits through the exception, as a failing script would
    if os.getpid() != pid:
        return
    with open(result_path, "wb") as f:
        pickle.dump(("ok", value), f)
    sys.stdout.flush()
    sys.stderr.flush()


# --------------------------------------------------------------------------- in the test


def shm_names_of(pids: set[int]) -> list[str]:
    """Our shared-memory names in /dev/shm whose creator is one of ``pids``."""
    names = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.listdir(SHM_DIR):
            if not entry.startswith(SHM_PREFIX):
                continue
            creator = entry[len(SHM_PREFIX) :].split("_", 1)[0]
            if creator.isdigit() and int(creator) in pids:
                names.append(entry)
    return sorted(names)


def run_job(
    world_size: int,
    fn: Callable[..., Any],
    *args: Any,
    timeout_s: float = 60.0,
    pg_timeout_s: float = 60.0,
    init: bool = True,
    backend: str = "dummy",
    extra_pids_note: str | None = None,
) -> JobResult:
    """Runs ``fn(*args)`` in ``world_size`` fresh rank processes; see the module docstring.

    ``extra_pids_note``: the name of a note in which ranks list more pids of theirs (forked
    children) whose shared-memory names must not survive either.
    """
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix=f"faultjob-{world_size}-")
    ctx = torch_mp.get_context("spawn")
    procs: list[BaseProcess] = []
    hung: list[BaseProcess] = []
    ended: dict[int, float] = {}  # rank -> when its process ended (time.monotonic)
    try:
        for r in range(world_size):
            config = _Config(
                rank=r,
                world_size=world_size,
                workdir=workdir,
                backend=backend,
                backend_module=harness.backend_module_for(backend),
                pg_timeout_s=pg_timeout_s,
                init=init,
            )
            child = ctx.Process(
                target=_job_main, args=(config, fn, args), name=f"faultjob-rank{r}", daemon=True
            )
            child.start()
            procs.append(child)
        deadline = start + timeout_s
        while len(ended) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            pending = {procs[r].sentinel: r for r in range(world_size) if r not in ended}
            ready = wait(list(pending), timeout=remaining)
            now = time.monotonic()
            for sentinel in ready:
                ended[pending[sentinel]] = now  # type: ignore[index]
        hung = [p for r, p in enumerate(procs) if r not in ended]
        for proc in hung:  # stacks of hung ranks into their logs, then kill
            with contextlib.suppress(OSError):
                os.kill(proc.pid or 0, signal.SIGUSR1)
        if hung:
            time.sleep(0.5)
    finally:
        for proc in procs:
            if proc.exitcode is None:
                proc.kill()
            proc.join(10)
    outcomes = []
    pids: set[int] = set()
    for r, proc in enumerate(procs):
        pids.add(proc.pid or 0)
        result_path = Path(workdir) / f"result{r}"
        returned, value, error = False, None, None
        if result_path.exists():
            status, payload = pickle.loads(result_path.read_bytes())
            if status == "ok":
                returned, value = True, payload
            else:
                error = payload
        log_path = Path(workdir) / f"rank{r}.log"
        log = log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:] if log_path.exists() else ""
        outcomes.append(
            RankOutcome(
                r, proc.pid, proc.exitcode, proc in hung, ended.get(r), returned, value, error, log
            )
        )
    if extra_pids_note is not None:
        with contextlib.suppress(FileNotFoundError):
            pids.update(_read_note(workdir, extra_pids_note))
    leftovers = shm_names_of(pids)
    for name in leftovers:  # the test reports them; do not let them pile up
        with contextlib.suppress(OSError):
            os.unlink(SHM_DIR / name)
    shutil.rmtree(workdir, ignore_errors=True)
    return JobResult(outcomes, leftovers, time.monotonic() - start)
