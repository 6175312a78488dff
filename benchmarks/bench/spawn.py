"""Parent side of the rank processes: spawn one world size, stream its results, clean up.

The ranks of a world size stay alive for all its measurements (spawning costs seconds).
Whatever happens -- a rank raising, dying or hanging past the time limits -- the ranks are
ended before :func:`run_world` returns, and the reason becomes a note.
"""

from __future__ import annotations

import multiprocessing
import queue
import socket
import time
from collections.abc import Callable
from typing import Any

from torch.multiprocessing.spawn import start_processes

from benchmarks.bench.peers import Outcome
from benchmarks.bench.plan import WorldSpec
from benchmarks.bench.results import Result
from benchmarks.bench.runner import rank_main

_POLL_S = 1.0
_JOIN_S = 30.0
_FAILED_JOIN_S = 3.0  # ranks left in a collective by a failed one never get out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dead_ranks(processes: list[Any]) -> str:
    """'rank R exit C' for every process that exited with an error, comma-separated."""
    dead = [f"rank {i} exit {p.exitcode}" for i, p in enumerate(processes) if p.exitcode]
    return ", ".join(dead)


def collect(
    spec: WorldSpec,
    messages: Any,
    processes: list[Any],
    emit: Callable[[Result], None],
    outcome: Outcome,
) -> bool:
    """Fills ``outcome`` from the ranks' messages; True once rank 0 said it is done.

    ``messages`` needs ``get(timeout=...)`` raising ``queue.Empty`` (a multiprocessing queue;
    the multi-host mode reads a file), ``processes`` an ``exitcode`` each (None while alive)."""
    ws = spec.world_size
    deadline = time.monotonic() + spec.plan.init_timeout_s
    while True:
        try:
            message = messages.get(timeout=_POLL_S)
        except queue.Empty:
            dead = dead_ranks(processes)
            if dead:
                outcome.notes.append(f"ws={ws}: ranks died ({dead})")
                return False
            if time.monotonic() > deadline:
                outcome.notes.append(f"ws={ws}: timed out waiting for the ranks")
                return False
            continue
        kind = message[0]
        if kind == "ready":
            outcome.notes.extend(message[1])
        elif kind == "result":
            result = Result.from_dict(message[1])
            outcome.results.append(result)
            emit(result)
        elif kind == "error":
            last = message[2].strip().splitlines()[-1]
            outcome.notes.append(f"ws={ws}: rank {message[1]} failed: {last}")
            print(f"[ws={ws}] rank {message[1]} failed:\n{message[2]}", flush=True)
            return False
        elif kind == "done":
            return True
        deadline = time.monotonic() + spec.plan.timeout_s


def stop(processes: list[Any], grace_s: float) -> None:
    """Joins the ranks; kills (by process object) those still alive after ``grace_s``."""
    end = time.monotonic() + grace_s
    for process in processes:
        process.join(timeout=max(0.0, end - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(timeout=_JOIN_S)


def run_world(spec: WorldSpec, emit: Callable[[Result], None]) -> Outcome:
    """Spawns ``spec.world_size`` ranks, measures the plan in them, returns what they found."""
    messages = multiprocessing.get_context("spawn").Queue()
    context = start_processes(
        rank_main,
        args=(spec, messages),
        nprocs=spec.world_size,
        join=False,
        start_method="spawn",
    )
    processes = list(context.processes)
    outcome = Outcome()
    finished = False
    try:
        finished = collect(spec, messages, processes, emit, outcome)
    finally:
        stop(processes, _JOIN_S if finished else _FAILED_JOIN_S)
    return outcome
