"""Reusable multi-process harness for testing a ``torch.distributed`` backend.

Nothing in here is specific to ``dummy_collectives`` except the defaults read
from the environment, so a new c10d backend can reuse it unchanged:

``DC_TEST_BACKEND``
    backend string passed to ``init_process_group`` in every rank
    (default ``"dummy"``; ``"gloo"`` works without any extension).
``DC_TEST_BACKEND_MODULE``
    module imported in every rank before ``init_process_group`` so that it
    can register its backend (default: ``dummy_collectives`` when the backend
    string mentions ``dummy``, ``minimal_backend`` for ``minimal``, nothing
    otherwise).
``DC_TEST_BACKEND_CAPABILITIES``
    what the backend implements, comma-separated, as torch.distributed names
    the calls (``all_reduce:SUM,all_gather,broadcast,barrier``; ``all_reduce``
    alone: every ReduceOp), or ``all``. Default: the ``CAPABILITIES`` of the
    backend's module where it has one (examples/minimal_backend does), else
    ``all``. Tests say what they need (``@pytest.mark.needs``, conftest.py);
    the others skip, saying why. See :func:`backend_capabilities`.
``DC_TEST_CALL_TIMEOUT_S`` / ``DC_TEST_STARTUP_TIMEOUT_S``
    default time limits for one :meth:`RankPool.run` and for starting a pool.
``DC_TEST_MAX_PROCS``
    how many rank processes a :class:`PoolCache` keeps alive (default 10).
``DC_TEST_WORKER_OUTPUT=inherit``
    let ranks print to the terminal instead of a per-rank log file (the tail
    of that log is quoted in every harness error).
``DC_TEST_HOSTS``
    split every pool's ranks into that many simulated hosts: rank ``r``
    gets the environment variable named by ``DC_TEST_HOST_ID_ENV`` (default
    ``DUMMY_COLLECTIVES_HOST_ID``, which dummy_collectives reads as NCCL reads
    ``NCCL_HOSTID``) set to its host's name. Hosts take contiguous ranks, as
    evenly as possible (4 ranks on 2 hosts: 0 1 | 2 3; 3 ranks: 0 1 | 2);
    ``DC_TEST_HOSTS=2:interleaved`` deals them round-robin (0 2 | 1 3). So the
    whole suite can run against a backend's multi-host path on one machine.

How it works: :class:`RankPool` spawns ``world_size`` processes (``spawn``
start method). Each one initialises the default process group once, creates a
gloo group over all ranks (:func:`reference_group`) and then serves requests:
the parent sends ``(fn, args, kwargs)`` with ``fn`` a module-level function,
every rank runs it and sends back its return value or the exception it raised.
Requests and answers are pickled with the standard :mod:`pickle` (never
through shared memory); tensors in answers are copied to CPU first.

Every request is bounded by a timeout. If a rank does not answer in time, or
dies, the whole pool is killed and :class:`RankPoolError` is raised with the
names of the ranks that did not answer, their exit codes, the Python stacks of
hung ranks (via :mod:`faulthandler`) and the tail of their output.

Functions run inside ranks can use :func:`rank`, :func:`world_size`,
:func:`backend`, :func:`is_dummy`, :func:`errors_are_failures`,
:func:`reference_group` and :func:`scratch_dir`; anywhere,
:func:`backend_capabilities` and :func:`supports` say what the backend under
test implements.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import datetime
import faulthandler
import functools
import gc
import importlib
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterator, Mapping
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

BACKEND_ENV = "DC_TEST_BACKEND"
BACKEND_MODULE_ENV = "DC_TEST_BACKEND_MODULE"
CAPABILITIES_ENV = "DC_TEST_BACKEND_CAPABILITIES"
DEFAULT_BACKEND = "dummy"
# Backends whose name appears in the backend string -> module registering them.
KNOWN_BACKEND_MODULES: dict[str, str] = {
    "dummy": "dummy_collectives",
    "minimal": "minimal_backend",  # examples/minimal_backend
}

InitMethod = Literal["file", "tcp", "env"]


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


DEFAULT_CALL_TIMEOUT_S = _env_float("DC_TEST_CALL_TIMEOUT_S", 120.0)
DEFAULT_STARTUP_TIMEOUT_S = _env_float("DC_TEST_STARTUP_TIMEOUT_S", 180.0)
DEFAULT_MAX_PROCESSES = int(os.environ.get("DC_TEST_MAX_PROCS", "10"))


def simulated_host(rank: int, world_size: int, spec: str | None = None) -> int | None:
    """The simulated host of ``rank`` under ``DC_TEST_HOSTS`` (``spec``), or None."""
    spec = os.environ.get("DC_TEST_HOSTS", "") if spec is None else spec
    if not spec:
        return None
    count, _, layout = spec.partition(":")
    hosts = max(1, min(int(count), world_size))
    if layout == "interleaved":
        return rank % hosts
    if layout not in ("", "contiguous"):
        raise ValueError(f"DC_TEST_HOSTS={spec!r}: the layout must be contiguous or interleaved")
    return rank * hosts // world_size


def simulated_host_env(rank: int, world_size: int) -> dict[str, str]:
    """The environment that puts ``rank`` on its simulated host (empty without DC_TEST_HOSTS)."""
    host = simulated_host(rank, world_size)
    if host is None:
        return {}
    name = os.environ.get("DC_TEST_HOST_ID_ENV", "DUMMY_COLLECTIVES_HOST_ID")
    return {name: f"simhost{host}"}


LOG_TAIL_CHARS = 3000


def backend_under_test() -> str:
    """The backend string the suite runs against (``$DC_TEST_BACKEND``)."""
    return os.environ.get(BACKEND_ENV, "").strip() or DEFAULT_BACKEND


def backend_module_for(backend_name: str) -> str | None:
    """Module to import in a rank before initialising ``backend_name``."""
    override = os.environ.get(BACKEND_MODULE_ENV)
    if override is not None:
        return override.strip() or None
    for key, module in KNOWN_BACKEND_MODULES.items():
        if key in backend_name:
            return module
    return None


def backend_module_importable(module: str | None = None) -> bool:
    """Whether the backend's registration module can be imported here."""
    name = module if module is not None else backend_module_for(backend_under_test())
    if name is None:
        return True
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


@functools.cache
def backend_capabilities() -> frozenset[str] | None:
    """What the backend under test implements, where it says; None: everything (dummy, gloo).

    Names are torch.distributed's (``all_reduce``, ``all_gather``, ``broadcast``, ``barrier``,
    ``reduce``, ``all_gather_into_tensor``, ...); ``all_reduce:SUM`` is one ReduceOp of
    all_reduce. From ``$DC_TEST_BACKEND_CAPABILITIES`` (comma-separated, or ``all``), else the
    ``CAPABILITIES`` attribute of the backend's registration module, else None. Works in the
    pytest process (which then imports that module) and inside ranks alike.
    """
    value = os.environ.get(CAPABILITIES_ENV)
    if value is not None:
        names = [name.strip() for name in value.split(",") if name.strip()]
        return None if names == ["all"] else frozenset(names)
    module_name = backend_module_for(backend_under_test())
    if module_name is None:
        return None
    try:
        module = importlib.import_module(module_name)
    except Exception:
        return None  # not importable: the pool's start says why
    declared = getattr(module, "CAPABILITIES", None)
    return None if declared is None else frozenset(str(name) for name in declared)


def supports(need: str) -> bool:
    """Whether the backend under test implements ``need`` (a name of
    :func:`backend_capabilities`): ``all_reduce`` is implemented when any ReduceOp of it is,
    ``all_reduce:MAX`` when that op or the whole of all_reduce is."""
    caps = backend_capabilities()
    if caps is None or need in caps:
        return True
    call, _, op = need.partition(":")
    if op:
        return call in caps
    return any(name.partition(":")[0] == call for name in caps)


def free_port() -> int:
    """A TCP port that was free a moment ago (good enough for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------
# Results and errors
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RankError:
    """An exception raised inside a rank, as text (exceptions may not pickle)."""

    type_name: str
    qualified_type: str
    message: str
    traceback: str

    @classmethod
    def from_exception(cls, exc: BaseException) -> RankError:
        exc_type = type(exc)
        return cls(
            type_name=exc_type.__name__,
            qualified_type=f"{exc_type.__module__}.{exc_type.__qualname__}",
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
        )

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


@dataclasses.dataclass(frozen=True)
class RankResult:
    """What one rank answered to :meth:`RankPool.run`."""

    rank: int
    value: Any = None
    error: RankError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class RankPoolError(Exception):
    """The pool could not answer: startup failed, a rank hung or died."""


def format_failures(results: list[RankResult], what: str = "call") -> str:
    failed = [r for r in results if r.error is not None]
    lines = [f"{what}: {len(failed)} of {len(results)} ranks failed"]
    for result in failed:
        assert result.error is not None
        lines.append(f"---- rank {result.rank}: {result.error} ----")
        lines.append(result.error.traceback.rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Inside a rank
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    rank: int
    world_size: int
    backend: str
    backend_module: str | None
    init_method: str
    scratch_dir: str
    log_path: str | None
    env: dict[str, str]
    pg_timeout_s: float | None
    reference_backend: str | None


class _RankState:
    config: WorkerConfig | None = None
    reference_group: Any = None


_STATE = _RankState()


def _config() -> WorkerConfig:
    if _STATE.config is None:
        raise RuntimeError("this helper can only be used inside a RankPool rank")
    return _STATE.config


def adopt_launched_rank(scratch_dir: str, reference_backend: str | None = "gloo") -> None:
    """Makes this module's rank helpers (rank(), reference_group(), ...) work in a rank that
    another launcher started (torchrun, or the namespaced hosts of test_multihost.py): call it
    once the default process group exists. Creates the reference group like a pool's rank."""
    _STATE.config = WorkerConfig(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        backend=str(dist.get_backend()),
        backend_module=None,
        init_method="env://",
        scratch_dir=scratch_dir,
        log_path=None,
        env={},
        pg_timeout_s=None,
        reference_backend=reference_backend,
    )
    if reference_backend is not None:
        _STATE.reference_group = dist.new_group(backend=reference_backend)


def in_rank() -> bool:
    """True inside a RankPool worker process."""
    return _STATE.config is not None


def rank() -> int:
    return _config().rank


def world_size() -> int:
    return _config().world_size


def backend() -> str:
    """Backend string of the default process group in this rank."""
    return _config().backend


def is_dummy() -> bool:
    return backend() == "dummy"


def errors_are_failures() -> bool:
    """Inside a rank: whether a collective that raises for arguments it should take fails the
    test, rather than being noted as unsupported (gloo lacks some dtypes). True for dummy, and
    for a backend under test that declares its capabilities: it promises every dtype of what it
    declares (:func:`backend_capabilities`)."""
    if is_dummy():
        return True
    return backend() == backend_under_test() and backend_capabilities() is not None


def scratch_dir() -> Path:
    """A directory shared by all ranks of the pool (removed with the pool)."""
    return Path(_config().scratch_dir)


def reference_group() -> dist.ProcessGroup:
    """A gloo group over all ranks, created once when the rank started."""
    _config()
    if _STATE.reference_group is None:
        raise RuntimeError("this pool was started without a reference group")
    group: dist.ProcessGroup = _STATE.reference_group
    return group


def _health_check() -> None:
    """Runs in every rank after a failed call: are all groups still in step?"""
    ws = dist.get_world_size()
    groups: list[Any] = [None]
    if _STATE.reference_group is not None:
        groups.append(_STATE.reference_group)
    for group in groups:
        t = torch.ones(3)
        dist.all_reduce(t, group=group)
        if not torch.equal(t, torch.full((3,), float(ws))):
            raise RuntimeError(f"health check allreduce gave {t.tolist()}, expected all {ws}")


def _to_wire(value: Any) -> Any:
    """Make an answer safe to pickle: tensors become compact CPU copies."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True).clone()
    if isinstance(value, list):
        return [_to_wire(v) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_to_wire(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    return value


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    try:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        err = RankError.from_exception(exc)
        data = pickle.dumps((message[0], message[1], "err", err))
    conn.send_bytes(data)


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(3)


def _redirect_output(log_path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)


def _worker_main(config: WorkerConfig, conn: Connection, parent_pid: int) -> None:
    """Entry point of a rank process."""
    if config.log_path is not None:
        _redirect_output(config.log_path)
    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    os.environ.update(config.env)
    try:
        torch.set_num_threads(1)
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(1)
        if config.backend_module:
            importlib.import_module(config.backend_module)
        timeout_kw: dict[str, Any] = {}
        if config.pg_timeout_s is not None:
            timeout_kw["timeout"] = datetime.timedelta(seconds=config.pg_timeout_s)
        if config.init_method == "env://":
            dist.init_process_group(config.backend, **timeout_kw)
        else:
            dist.init_process_group(
                config.backend,
                init_method=config.init_method,
                rank=config.rank,
                world_size=config.world_size,
                **timeout_kw,
            )
        _STATE.config = config
        if config.reference_backend is not None:
            _STATE.reference_group = dist.new_group(backend=config.reference_backend)
    except BaseException as exc:
        _send(conn, ("init", 0, "err", RankError.from_exception(exc)))
        sys.stderr.flush()
        return
    _send(conn, ("init", 0, "ok", os.getpid()))

    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            break
        seq = -1
        try:
            request = pickle.loads(data)
            if request[0] == "stop":
                break
            _, seq, fn, args, kwargs = request
            value = fn(*args, **kwargs)
            answer: tuple[Any, ...] = ("call", seq, "ok", _to_wire(value))
            del value
        except BaseException as exc:
            answer = ("call", seq, "err", RankError.from_exception(exc))
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            _send(conn, answer)
        except (EOFError, OSError):
            break
        failed = answer[2] == "err"
        del answer
        # Tensors are freed by reference counting; a full collection (~70 ms
        # with torch loaded) is only worth it when a traceback may hold frames.
        gc.collect(2 if failed else 0)

    with contextlib.suppress(Exception):
        if _STATE.reference_group is not None:
            dist.destroy_process_group(_STATE.reference_group)
            _STATE.reference_group = None
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is released: skip the interpreter's slow teardown (seconds
    # with torch loaded, times ten processes on a small machine).
    os._exit(0)


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------


_LIVE_POOLS: weakref.WeakSet[RankPool] = weakref.WeakSet()


class RankPool:
    """``world_size`` long-lived rank processes serving function calls.

    Args:
        world_size: number of ranks.
        backend: backend string for ``init_process_group``
            (default: :func:`backend_under_test`).
        timeout_s: default time limit of one :meth:`run`.
        init_method: ``"file"`` (default), ``"tcp"`` or ``"env"``.
        backend_module: module each rank imports first (default:
            :func:`backend_module_for`).
        reference_backend: backend of :func:`reference_group` (``None``: none).
        env: extra environment variables set in every rank before the
            backend module is imported and the process group created.
        pg_timeout_s: ``timeout`` passed to ``init_process_group``.
        startup_timeout_s: time limit to start all ranks.
        error_grace_s: once a rank has failed, how long the others get to
            answer (a failed rank usually leaves its peers hanging).
        health_timeout_s: limit of the health check that follows any call in
            which a rank raised (the pool is discarded if it fails).
        capture_output: send each rank's stdout/stderr to a log file.
    """

    def __init__(
        self,
        world_size: int,
        backend: str | None = None,
        timeout_s: float | None = None,
        *,
        init_method: InitMethod = "file",
        backend_module: str | None | Literal["auto"] = "auto",
        reference_backend: str | None = "gloo",
        env: Mapping[str, str] | None = None,
        pg_timeout_s: float | None = None,
        startup_timeout_s: float | None = None,
        error_grace_s: float = 30.0,
        health_timeout_s: float = 20.0,
        capture_output: bool | None = None,
    ) -> None:
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self.backend = backend if backend is not None else backend_under_test()
        self.timeout_s = DEFAULT_CALL_TIMEOUT_S if timeout_s is None else timeout_s
        self.error_grace_s = error_grace_s
        self.init_method_kind: InitMethod = init_method
        if capture_output is None:
            capture_output = os.environ.get("DC_TEST_WORKER_OUTPUT") != "inherit"
        module = backend_module_for(self.backend) if backend_module == "auto" else backend_module
        self._tmpdir = tempfile.mkdtemp(prefix=f"rankpool-{world_size}-")
        self._scratch = os.path.join(self._tmpdir, "scratch")
        os.mkdir(self._scratch)
        self._procs: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._log_paths: list[str | None] = []
        self._seq = 0
        self.check_health_after_errors = True
        self.health_timeout_s = health_timeout_s
        self.discarded_because: str | None = None
        self._closed = False
        self._broken: str | None = None
        _LIVE_POOLS.add(self)

        init_url, base_env = self._init_method(init_method)
        base_env.update(env or {})
        ctx = torch_mp.get_context("spawn")
        try:
            for r in range(world_size):
                rank_env = simulated_host_env(r, world_size)
                rank_env.update(base_env)
                if init_method == "env":
                    rank_env.update(
                        RANK=str(r),
                        WORLD_SIZE=str(world_size),
                        LOCAL_RANK=str(r),
                        LOCAL_WORLD_SIZE=str(world_size),
                    )
                log_path = os.path.join(self._tmpdir, f"rank{r}.log") if capture_output else None
                config = WorkerConfig(
                    rank=r,
                    world_size=world_size,
                    backend=self.backend,
                    backend_module=module,
                    init_method=init_url,
                    scratch_dir=self._scratch,
                    log_path=log_path,
                    env=rank_env,
                    pg_timeout_s=pg_timeout_s,
                    reference_backend=reference_backend,
                )
                parent_conn, child_conn = ctx.Pipe(duplex=True)
                proc = ctx.Process(
                    target=_worker_main,
                    args=(config, child_conn, os.getpid()),
                    name=f"rankpool{world_size}-rank{r}",
                    daemon=True,
                )
                proc.start()
                child_conn.close()
                self._procs.append(proc)
                self._conns.append(parent_conn)
                self._log_paths.append(log_path)
            startup = DEFAULT_STARTUP_TIMEOUT_S if startup_timeout_s is None else startup_timeout_s
            results = self._collect("init", 0, startup, "startup")
        except BaseException:
            self.kill()
            raise
        if any(not r.ok for r in results):
            message = format_failures(
                results, f"starting {world_size} ranks of backend {self.backend!r}"
            )
            self.kill()
            raise RankPoolError(message + self._log_tails(range(world_size)))
        self.pids = [int(r.value) for r in results]

    def _init_method(self, kind: InitMethod) -> tuple[str, dict[str, str]]:
        if kind == "file":
            return "file://" + os.path.join(self._tmpdir, "store"), {}
        if kind == "tcp":
            return f"tcp://127.0.0.1:{free_port()}", {}
        if kind == "env":
            env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
            return "env://", env
        raise ValueError(f"unknown init method {kind!r}")

    # ---- state -----------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self._closed and self._broken is None

    @property
    def processes(self) -> int:
        """How many of this pool's processes are alive."""
        return sum(1 for p in self._procs if p.is_alive())

    def __repr__(self) -> str:
        state = "alive" if self.alive else (self._broken or "closed")
        return f"RankPool(world_size={self.world_size}, backend={self.backend!r}, {state})"

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- calls -----------------------------------------------------------

    def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> list[RankResult]:
        """Run ``fn(*args, **kwargs)`` in every rank; one result per rank.

        ``fn`` must be importable by name (a module-level function). Raises
        :class:`RankPoolError` (and kills the pool) if a rank does not answer
        within ``timeout_s`` or dies. If any rank raised, a quick health check
        follows; a pool failing it is discarded (``alive`` becomes False, the
        cache replaces it) and ``discarded_because`` says why.
        """
        limit = self.timeout_s if timeout_s is None else timeout_s
        results = self._call(fn, args, kwargs, limit)
        if self.check_health_after_errors and any(not r.ok for r in results):
            self._check_health()
        return results

    def _call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout_s: float,
    ) -> list[RankResult]:
        if not self.alive:
            raise RankPoolError(f"{self!r} cannot run anything: {self._broken or 'closed'}")
        what = getattr(fn, "__qualname__", repr(fn))
        self._seq += 1
        data = pickle.dumps(("call", self._seq, fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        for r, conn in enumerate(self._conns):
            try:
                conn.send_bytes(data)
            except OSError as exc:
                self._fail(f"could not send {what} to rank {r}: {exc!r}", [r])
        return self._collect("call", self._seq, timeout_s, what)

    def _check_health(self) -> None:
        """After a rank raised, the ranks may be out of step (an op one rank
        skipped, an async op never waited). Run a collective on every group
        the pool owns; if that fails or hangs, discard the pool so the next
        user gets a fresh one instead of a hang."""
        try:
            results = self._call(_health_check, (), {}, self.health_timeout_s)
        except RankPoolError as exc:
            self.discarded_because = f"health check after an error failed: {exc}"
            return
        if any(not r.ok for r in results):
            self.discarded_because = "health check after an error failed: " + format_failures(
                results, "health check"
            )
            self.kill()
            self._broken = "failed its health check"

    def run_ok(
        self,
        fn: Callable[..., Any],
        *args: Any,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> list[Any]:
        """Like :meth:`run`, but every rank must succeed; returns the values."""
        results = self.run(fn, *args, timeout_s=timeout_s, **kwargs)
        if any(not r.ok for r in results):
            what = getattr(fn, "__qualname__", repr(fn))
            message = format_failures(results, f"{what} on {self.world_size} ranks")
            if self.discarded_because:
                message += "\n(the pool was discarded afterwards: " + self.discarded_because + ")"
            raise AssertionError(message)
        return [r.value for r in results]

    def _collect(self, kind: str, seq: int, timeout_s: float, what: str) -> list[RankResult]:
        start = time.monotonic()
        deadline = start + timeout_s
        results: dict[int, RankResult] = {}
        first_error: float | None = None
        conn_rank = {id(c): r for r, c in enumerate(self._conns)}
        sentinel_rank = {p.sentinel: r for r, p in enumerate(self._procs)}
        while len(results) < self.world_size:
            pending = [r for r in range(self.world_size) if r not in results]
            limit = deadline
            if first_error is not None:
                limit = min(deadline, first_error + self.error_grace_s)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                waited = time.monotonic() - start
                why = (
                    f"{what}: rank(s) {pending} did not answer within {waited:.1f} s"
                    f" (limit {timeout_s:.0f} s"
                    + (
                        f", {self.error_grace_s:.0f} s after another rank failed"
                        if first_error is not None and limit < deadline
                        else ""
                    )
                    + ")"
                )
                self._fail(why, pending, results, dump_stacks=True)
            waitables: list[Any] = [self._conns[r] for r in pending]
            waitables += [self._procs[r].sentinel for r in pending]
            ready = wait(waitables, timeout=remaining)
            dead: list[int] = []
            for obj in ready:
                if isinstance(obj, Connection):
                    r = conn_rank[id(obj)]
                    try:
                        message = pickle.loads(obj.recv_bytes())
                    except (EOFError, OSError):
                        dead.append(r)
                        continue
                    m_kind, m_seq, status, payload = message
                    if (m_kind, m_seq) != (kind, seq):
                        continue  # stale answer; cannot happen in a healthy pool
                    if status == "ok":
                        results[r] = RankResult(r, value=payload)
                    else:
                        results[r] = RankResult(r, error=payload)
                        if first_error is None:
                            first_error = time.monotonic()
                else:
                    r = sentinel_rank[obj]
                    if r not in results and not self._conns[r].poll():
                        dead.append(r)
            dead = sorted({r for r in dead if r not in results})
            if dead:
                for r in dead:
                    self._procs[r].join(1.0)
                codes = ", ".join(f"rank {r} exit code {self._procs[r].exitcode}" for r in dead)
                self._fail(f"{what}: rank(s) {dead} died ({codes})", dead, results)
        return [results[r] for r in range(self.world_size)]

    def _fail(
        self,
        why: str,
        ranks: list[int],
        results: Mapping[int, RankResult] | None = None,
        dump_stacks: bool = False,
    ) -> None:
        if dump_stacks and hasattr(signal, "SIGUSR1"):
            for r in ranks:
                pid = self._procs[r].pid
                if pid is not None and self._procs[r].is_alive():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGUSR1)
            time.sleep(0.5)
        message = [why + f"; pool of {self.world_size} ({self.backend}) killed"]
        for r, result in sorted((results or {}).items()):
            if result.error is not None:
                message.append(f"---- rank {r} raised {result.error} ----")
                message.append(result.error.traceback.rstrip())
        text = "\n".join(message) + self._log_tails(ranks)
        self.kill()
        self._broken = why
        raise RankPoolError(text)

    def _log_tails(self, ranks: Any) -> str:
        parts = []
        for r in ranks:
            path = self._log_paths[r] if r < len(self._log_paths) else None
            if path is None or not os.path.exists(path):
                continue
            with open(path, errors="replace") as f:
                text = f.read()
            if text.strip():
                parts.append(f"\n---- output of rank {r} (tail) ----\n{text[-LOG_TAIL_CHARS:]}")
        return "".join(parts)

    # ---- shutdown --------------------------------------------------------

    def request_stop(self) -> None:
        """Ask every rank to finish (first half of :meth:`close`)."""
        if self._closed:
            return
        self._closed = True
        data = pickle.dumps(("stop",))
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send_bytes(data)

    def reap(self, deadline: float) -> None:
        """Wait until ``deadline`` (monotonic) for ranks to exit, then kill."""
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def close(self, grace_s: float = 10.0) -> None:
        """Stop all ranks (killing those that do not exit in ``grace_s``)."""
        self.request_stop()
        self.reap(time.monotonic() + grace_s)

    def kill(self) -> None:
        """Kill every rank now and release all resources."""
        self._closed = True
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
        for proc in self._procs:
            proc.join(5.0)
            with contextlib.suppress(ValueError):
                proc.close()
        for conn in self._conns:
            conn.close()
        self._procs = []
        self._conns = []
        shutil.rmtree(self._tmpdir, ignore_errors=True)
        _LIVE_POOLS.discard(self)


class PoolCache:
    """Keeps pools alive across tests, keyed by ``(world_size, backend)``.

    At most ``max_processes`` rank processes stay alive: least recently used
    pools are closed to make room. Broken (killed) pools are dropped.
    """

    def __init__(
        self,
        max_processes: int = DEFAULT_MAX_PROCESSES,
        factory: Callable[..., RankPool] = RankPool,
    ) -> None:
        self.max_processes = max_processes
        self._factory = factory
        self._pools: collections.OrderedDict[tuple[int, str], RankPool] = collections.OrderedDict()
        self.started = 0

    def _prune(self) -> None:
        for key in [k for k, p in self._pools.items() if not p.alive]:
            self._pools.pop(key).kill()

    def live_processes(self) -> int:
        self._prune()
        return sum(p.world_size for p in self._pools.values())

    def make_room(self, n: int) -> None:
        """Close least recently used pools until ``n`` more processes fit."""
        self._prune()
        while self._pools and self.live_processes() + n > self.max_processes:
            _, oldest = self._pools.popitem(last=False)
            oldest.close()

    def get(self, world_size: int, backend: str | None = None) -> RankPool:
        name = backend if backend is not None else backend_under_test()
        key = (world_size, name)
        self._prune()
        pool = self._pools.get(key)
        if pool is not None:
            self._pools.move_to_end(key)
            return pool
        self.make_room(world_size)
        pool = self._factory(world_size, name)
        self.started += 1
        self._pools[key] = pool
        return pool

    @contextlib.contextmanager
    def fresh(self, world_size: int, **kwargs: Any) -> Iterator[RankPool]:
        """A one-off pool (not cached), closed on exit; respects the bound."""
        self.make_room(world_size)
        pool = RankPool(world_size, **kwargs)
        try:
            yield pool
        finally:
            pool.close()

    def close_all(self, grace_s: float = 10.0) -> None:
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            pool.request_stop()
        deadline = time.monotonic() + grace_s
        for pool in pools:
            pool.reap(deadline)


def _kill_leftovers() -> None:
    for pool in list(_LIVE_POOLS):
        pool.kill()


atexit.register(_kill_leftovers)
