"""Code that runs inside the spawned rank processes.

Each rank sets ``torch.set_num_threads(1)`` and initialises the default process group with
dummy when the plan measures it (as users run it: ``init_process_group("dummy")``, which is also
how the c10d floor is measured; a non-default group costs a few more microseconds of Python in
torch.distributed), else with gloo. Every other backend gets ``dist.new_group(backend=...)``; a
gloo group is the control group (barriers and max-over-ranks). The ranks then measure every
(collective, size, backend) point in the same order; rank 0 sends each result to the parent
through ``queue``. DeepSpeed is measured in ranks of its own (:mod:`.deepspeed_peer`), which
reuse :class:`GlooSync` and :func:`run_point` from here.
Messages: ``("ready", notes)``, ``("result", dict)``, ``("done", None)`` and
``("error", rank, traceback)``.
"""

from __future__ import annotations

import datetime
import functools
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.bench.collectives import Buffers, allocate, check, fill_for_check, make_op
from benchmarks.bench.layout import layout
from benchmarks.bench.plan import DUMMY, GLOO, NCCL, WorldSpec
from benchmarks.bench.results import ERROR, SKIPPED, Result, measured, not_measured
from benchmarks.bench.timing import measure

UNSUPPORTED_WORDS = ("not supported", "unsupported", "not implemented", "does not support")
PG_TIMEOUT = datetime.timedelta(minutes=30)

OpFactory = Callable[[str, Buffers], "Callable[[], object] | None"]


class GlooSync:
    """The timing protocol's :class:`~benchmarks.bench.timing.Sync` over gloo."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group

    def barrier(self) -> None:
        """``dist.barrier`` on the control group."""
        dist.barrier(group=self.group)

    def max(self, value: float) -> float:
        """All-reduce MAX of one float64 on the control group."""
        tensor = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group)
        return float(tensor.item())

    def all_ok(self, ok: bool) -> bool:
        """Whether ``ok`` holds on every rank."""
        return self.max(0.0 if ok else 1.0) == 0.0

    def gather_text(self, text: str) -> list[str]:
        """``text`` of every rank, by rank."""
        texts: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(texts, text, group=self.group)
        return [str(item) for item in texts]


@dataclass
class RankContext:
    """One rank's view of the run."""

    spec: WorldSpec
    rank: int
    device: torch.device
    sync: GlooSync
    finish: Callable[[], None]
    default_backend: str = GLOO  # the backend of the default process group


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def is_unsupported(message: str) -> bool:
    """Whether an error message says the operation is not supported."""
    lowered = message.lower()
    return any(word in lowered for word in UNSUPPORTED_WORDS)


def _torch_factory(group: dist.ProcessGroup | None, rank: int) -> OpFactory:
    return lambda collective, bufs: make_op(collective, bufs, group, rank)


def _new_group_factory(backend: str, rank: int) -> OpFactory:
    return _torch_factory(dist.new_group(backend=backend), rank)


def _open(ctx: RankContext, name: str, opener: Callable[[], OpFactory]) -> OpFactory | str:
    """``opener()`` on every rank; its factory if it worked everywhere, else the reason."""
    error = ""
    factory: OpFactory | None = None
    try:
        factory = opener()
    except Exception as exc:  # reported, the other backends go on
        error = first_line(exc)
    errors = [text for text in ctx.sync.gather_text(error) if text]
    if errors or factory is None:
        return f"{name}: unavailable: {errors[0] if errors else 'no factory'}"
    return factory


def open_backends(ctx: RankContext) -> tuple[dict[str, OpFactory], list[str]]:
    """The backends of the plan that could be set up, and notes on the others."""
    plan, ws = ctx.spec.plan, ctx.spec.world_size
    openers: dict[str, Callable[[], OpFactory]] = {}
    notes: list[str] = []
    for name in plan.backends:
        if name == ctx.default_backend:
            openers[name] = lambda: _torch_factory(None, ctx.rank)
        elif name == GLOO:
            openers[name] = lambda: _torch_factory(ctx.sync.group, ctx.rank)
        elif name == NCCL and (ctx.device.type != "cuda" or ws > torch.cuda.device_count()):
            notes.append(
                f"nccl (ws={ws}): skipped: needs one CUDA device per rank "
                f"({torch.cuda.device_count()} device(s))"
            )
        else:
            openers[name] = functools.partial(_new_group_factory, name, ctx.rank)
    factories: dict[str, OpFactory] = {}
    for name, opener in openers.items():
        opened = _open(ctx, name, opener)
        if isinstance(opened, str):
            notes.append(f"{opened} (ws={ws})")
        else:
            factories[name] = opened
    return factories, notes


def run_point(
    ctx: RankContext, backend: str, factory: OpFactory, collective: str, size: int
) -> Result:
    """Checks one call's result, then times ``collective`` at ``size`` on ``backend``."""
    ws = ctx.spec.world_size
    lay = layout(collective, size, ws)
    bufs = allocate(collective, lay, ws, ctx.device)
    op = factory(collective, bufs)
    if op is None:
        return not_measured(
            backend, collective, ws, size, SKIPPED, f"{backend} has no {collective}"
        )
    fill_for_check(collective, bufs, ctx.rank)
    start = time.perf_counter()
    try:
        op()
        ctx.finish()
        first = time.perf_counter() - start
        error = check(collective, bufs, ctx.rank)
    except Exception as exc:  # reported as the point's result
        first, error = 0.0, first_line(exc)
    errors = [f"rank {r}: {text}" for r, text in enumerate(ctx.sync.gather_text(error)) if text]
    if errors:
        status = SKIPPED if is_unsupported(errors[0]) else ERROR
        return not_measured(backend, collective, ws, size, status, errors[0])
    bufs.zero()
    timing = measure(op, ctx.sync, ctx.spec.plan.timing, ctx.finish, ctx.sync.max(first))
    return measured(backend, collective, ws, size, lay.nbytes, timing)


def _local_rendezvous(rank: int, spec: WorldSpec) -> None:
    """The env:// variables of a rank spawned on this machine (all ranks on 127.0.0.1)."""
    ws = spec.world_size
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(spec.port),
        RANK=str(rank),
        WORLD_SIZE=str(ws),
        LOCAL_RANK=str(rank),
        LOCAL_SIZE=str(ws),
    )


def init_rank(rank: int, spec: WorldSpec) -> RankContext:
    """Initialises this rank's process groups from the env:// variables already set (by
    :func:`_local_rendezvous`, or by the multi-host launcher, :mod:`.hosts`)."""
    ws = spec.world_size
    torch.set_num_threads(1)
    import dummy_collectives  # noqa: F401 - registers the "dummy" backend

    device = torch.device("cpu")
    finish: Callable[[], None] = lambda: None  # noqa: E731
    if spec.plan.device == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        finish = lambda: torch.cuda.synchronize(device)  # noqa: E731
    default = DUMMY if DUMMY in spec.plan.backends else GLOO
    dist.init_process_group(default, rank=rank, world_size=ws, timeout=PG_TIMEOUT)
    control = None if default == GLOO else dist.new_group(backend=GLOO, timeout=PG_TIMEOUT)
    return RankContext(spec, rank, device, GlooSync(control), finish, default)


def _measure_all(ctx: RankContext, factories: dict[str, OpFactory], queue: Any) -> None:
    plan = ctx.spec.plan
    ws = ctx.spec.world_size
    unsupported: dict[tuple[str, str], str] = {}
    for collective in plan.collectives:
        for size in plan.sizes:
            for backend, factory in factories.items():
                why = unsupported.get((backend, collective))
                if why is None:
                    result = run_point(ctx, backend, factory, collective, size)
                    if result.status == SKIPPED:
                        unsupported[(backend, collective)] = f"{result.note} (at {size} B)"
                else:
                    result = not_measured(backend, collective, ws, size, SKIPPED, why)
                if ctx.rank == 0:
                    queue.put(("result", result.to_dict()))


def run_rank(rank: int, spec: WorldSpec, queue: Any) -> None:
    """Measures the plan in this rank (rendezvous from the env:// variables); every message
    goes to ``queue`` (anything with ``put``), an error too, before it is raised again."""
    try:
        ctx = init_rank(rank, spec)
        factories, notes = open_backends(ctx)
        if rank == 0:
            queue.put(("ready", notes))
        _measure_all(ctx, factories, queue)
        ctx.sync.barrier()
        if rank == 0:
            queue.put(("done", None))
        dist.destroy_process_group()
    except BaseException:
        queue.put(("error", rank, traceback.format_exc()))
        raise


def rank_main(rank: int, spec: WorldSpec, queue: Any) -> None:
    """Entry point of one spawned rank (``torch.multiprocessing.spawn``)."""
    _local_rendezvous(rank, spec)
    run_rank(rank, spec, queue)
