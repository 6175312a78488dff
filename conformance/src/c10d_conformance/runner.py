"""Rank processes that run many checks, each under a deadline.

:class:`Ranks` spawns ``world_size`` processes once. Each one imports the backend's module,
calls ``init_process_group`` with the backend under test (file:// rendezvous), makes a gloo group
over the same ranks (the reference) and then serves calls: the parent sends a module-level
function, every rank runs ``fn(ctx, **kwargs)`` with a :class:`RankContext` and answers its value
or the exception it raised, as text. A call whose ranks do not all answer within its deadline
kills the processes (after dumping their Python stacks with faulthandler, to say where they
hung) and reports :class:`Outcome` ``hung``; the caller starts new ranks for the next check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import faulthandler
import importlib
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp


@dataclasses.dataclass(frozen=True)
class Config:
    """How to start the ranks of the backend under test."""

    backend: str
    module: str | None
    world_size: int
    hosts: int = 0  # 0: one host; H: rank r gets host_env=simhost<r*H//world_size>
    host_env: str = "C10D_CONFORMANCE_HOST_ID"
    pg_timeout_s: float = 60.0
    startup_s: float = 120.0


@dataclasses.dataclass
class RankContext:
    """What a check sees inside a rank."""

    rank: int
    world_size: int
    backend: str
    group: Any  # the backend under test (the default group)
    ref: Any  # gloo over the same ranks
    scratch: str  # a folder shared by the ranks

    def groups(self) -> list[tuple[str, Any]]:
        """(name, group): gloo first, then the backend under test."""
        return [("gloo", self.ref), (self.backend, self.group)]


@dataclasses.dataclass(frozen=True)
class RankAnswer:
    rank: int
    ok: bool
    value: Any = None
    error_type: str = ""
    message: str = ""
    trace: str = ""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One call on every rank: ``answers`` when every rank answered, else why not."""

    answers: list[RankAnswer]
    hung: str = ""  # non-empty: the ranks did not all answer; says which, and where they were
    seconds: float = 0.0


# ---------------------------------------------------------------------------- inside a rank


def host_of(rank: int, world_size: int, hosts: int) -> int:
    """The simulated host of ``rank``: contiguous blocks, as even as possible."""
    return rank * max(1, min(hosts, world_size)) // world_size


def _rank_main(cfg: Config, rank: int, store: str, scratch: str, log: str, conn: Any) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parent = os.getppid()

    def orphan_watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=orphan_watch, daemon=True).start()
    if cfg.hosts > 1:
        os.environ[cfg.host_env] = f"simhost{host_of(rank, cfg.world_size, cfg.hosts)}"
    torch.set_num_threads(1)
    try:
        if cfg.module:
            importlib.import_module(cfg.module)
        dist.init_process_group(
            cfg.backend,
            init_method=f"file://{store}",
            rank=rank,
            world_size=cfg.world_size,
            timeout=datetime.timedelta(seconds=cfg.pg_timeout_s),
        )
        ref = dist.new_group(backend="gloo")
        ctx = RankContext(rank, cfg.world_size, cfg.backend, dist.group.WORLD, ref, scratch)
    except BaseException as exc:
        conn.send_bytes(pickle.dumps(_answer(rank, exc)))
        return
    conn.send_bytes(pickle.dumps(RankAnswer(rank, True, os.getpid())))
    while True:
        try:
            request = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if request is None:
            break
        fn, kwargs = request
        try:
            answer = RankAnswer(rank, True, fn(ctx, **kwargs))
        except BaseException as exc:
            answer = _answer(rank, exc)
        try:
            data = pickle.dumps(answer)
        except Exception as exc:  # an unpicklable value
            data = pickle.dumps(_answer(rank, exc))
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send_bytes(data)
    # Leave without destroying groups: a backend left broken by a check could hang there.
    os._exit(0)


def _answer(rank: int, exc: BaseException) -> RankAnswer:
    return RankAnswer(
        rank,
        False,
        error_type=type(exc).__name__,
        message=str(exc).strip(),
        trace="".join(traceback.format_exception(exc))[-4000:],
    )


# ---------------------------------------------------------------------------- parent side


def where_hung(stack_dump: str) -> str:
    """Where a rank hung, from its faulthandler dump: the innermost public torch.distributed
    call of the thread running a check, and that check, e.g.
    'torch.distributed.all_gather (from check_all_gather)'."""
    for block in reversed(re.split(r"\n(?=(?:Current thread|Thread) 0x)", stack_dump)):
        frames = re.findall(r'File "([^"]+)", line \d+ in (\S+)', block)
        check = next((f for _, f in reversed(frames) if f.startswith("check_")), "")
        if not check:
            continue
        calls = [f for p, f in frames if p.endswith("distributed_c10d.py") and f[0] != "_"]
        return f"torch.distributed.{calls[0]} (from {check})" if calls else check
    return ""


class Ranks:
    """``cfg.world_size`` spawned ranks of the backend under test; see the module doc."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._dir = tempfile.mkdtemp(prefix=f"c10d-conformance-{cfg.world_size}-")
        scratch = os.path.join(self._dir, "scratch")
        os.mkdir(scratch)
        self.logs = [os.path.join(self._dir, f"rank{r}.log") for r in range(cfg.world_size)]
        ctx = torch_mp.get_context("spawn")
        self._procs = []
        self._conns: list[Connection] = []
        for r in range(cfg.world_size):
            mine, theirs = ctx.Pipe()
            args = (cfg, r, os.path.join(self._dir, "store"), scratch, self.logs[r], theirs)
            proc = ctx.Process(target=_rank_main, args=args, daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(mine)
        self.alive = True
        self.startup = self._collect(cfg.startup_s)
        if self.startup.hung or not all(a.ok for a in self.startup.answers):
            self.close()

    def run(
        self, fn: Callable[..., Any], deadline_s: float, dying: tuple[int, ...] = (), **kwargs: Any
    ) -> Outcome:
        """``fn(ctx, **kwargs)`` in every rank; ranks in ``dying`` may exit instead of answering
        (the processes are then closed: a check that kills a rank ends its ranks' use)."""
        if not self.alive:
            raise RuntimeError("these ranks were closed")
        data = pickle.dumps((fn, kwargs))
        for conn in self._conns:
            conn.send_bytes(data)
        outcome = self._collect(deadline_s, dying)
        if outcome.hung or dying:
            self.close()
        return outcome

    def _collect(self, deadline_s: float, dying: tuple[int, ...] = ()) -> Outcome:
        start = time.monotonic()
        answers: dict[int, RankAnswer] = {}
        gone: set[int] = set()
        while len(answers) + len(gone) < len(self._conns):
            pending = [r for r in range(len(self._conns)) if r not in answers and r not in gone]
            left = start + deadline_s - time.monotonic()
            ready = wait([self._conns[r] for r in pending], timeout=left) if left > 0 else []
            if not ready:
                return self._hang(pending, answers, time.monotonic() - start)
            for conn in ready:
                r = self._conns.index(conn)  # type: ignore[arg-type]
                try:
                    answers[r] = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    gone.add(r)
        died = sorted(gone - set(dying))
        for r in died:
            self._procs[r].join(2.0)
            code = self._procs[r].exitcode
            answers[r] = RankAnswer(r, False, error_type="died", message=f"exit code {code}")
        for r in sorted(gone & set(dying)):
            answers[r] = RankAnswer(r, True, "")  # exited, as the check asked
        if died:
            self.close()
        seconds = time.monotonic() - start
        return Outcome([answers[r] for r in sorted(answers)], seconds=seconds)

    def _hang(self, pending: list[int], answers: dict[int, RankAnswer], waited: float) -> Outcome:
        for r in pending:
            with contextlib.suppress(OSError, TypeError):
                os.kill(self._procs[r].pid or 0, signal.SIGUSR1)
        time.sleep(0.5)
        places = []
        for r in pending:
            with open(self.logs[r], errors="replace") as f:
                spot = where_hung(f.read()[-20000:])
            places.append(f"rank {r}" + (f" in {spot}" if spot else ""))
        self.close()
        text = f"hung: {', '.join(places)} did not finish within {waited:.0f} s"
        return Outcome(list(answers.values()), hung=text, seconds=waited)

    def log_tail(self, rank: int, chars: int = 2000) -> str:
        with contextlib.suppress(OSError), open(self.logs[rank], errors="replace") as f:
            return f.read()[-chars:]
        return ""

    def close(self) -> None:
        """Stop the ranks (killing those that do not leave at once) and remove their files."""
        if not self.alive and not self._procs:
            return
        self.alive = False
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send_bytes(pickle.dumps(None))
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5.0)
        for conn in self._conns:
            conn.close()
        self._procs = []
        self._conns = []
        shutil.rmtree(self._dir, ignore_errors=True)
