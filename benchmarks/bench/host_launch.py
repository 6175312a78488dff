"""One pass of one layout of the multi-host mode: start the ranks, read their messages, end them.

Two ways to start the ranks (``--launch``):

- ``torchrun`` (the default), as users start a job: one ``torchrun -m
  benchmarks.bench.host_rank ...`` per host (node rank i on host i, static rendezvous
  at host0; :meth:`~tools.namespaced_hosts.NamespacedHosts.torchrun`), which makes
  each rank its own process and session. This process sees only the torchruns, one per host;
- ``direct``: one process per rank through nsenter, the env:// variables set by
  :meth:`~tools.namespaced_hosts.NamespacedHosts.launch_ranks`; no launcher in the
  way of a rank's exit status or of a signal, which helps when torchrun itself is in doubt.

Either way the ranks append their messages to a JSON-lines file (a process started through
nsenter cannot share a multiprocessing queue with this one; the hosts share the file system),
and :func:`.spawn.collect`, the one-host reader with its time limits, reads it. A pass fails
when a rank raises (its message says why), dies, hangs past ``--init-timeout`` / ``--timeout``,
or, under torchrun, when a host's torchrun exits -- with any status -- before rank 0 said it
was done: torchrun exits once its workers have, so that is a rank that died or quit early,
and the other hosts' ranks would wait for it in a collective for 30 minutes. Every process of
the pass is then stopped (a torchrun by SIGTERM, which it passes on to its workers, then
SIGKILL) and the notes say how each ended and what the ones that failed printed last.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench.host_layouts import HostLayout
from benchmarks.bench.peers import Outcome
from benchmarks.bench.plan import DIRECT, TORCHRUN, Plan, WorldSpec
from benchmarks.bench.results import Result
from benchmarks.bench.spawn import collect
from tools.namespaced_hosts import NamespacedHosts, wait_all

RANK_MODULE = "benchmarks.bench.host_rank"
_READ_POLL_S = 0.05
_JOIN_S = 30.0  # for ranks that said they are done to exit
_FAILED_JOIN_S = 3.0  # for the others of a failed rank, which wait_all stops, to be gone
_FAILED_TORCHRUN_JOIN_S = 10.0  # the same for torchruns, which first stop their workers
_TORCHRUN_TERM_S = 10.0  # for a torchrun to stop its workers on SIGTERM before SIGKILL
_TAIL_LINES = 3
_STOPPED_MARK = "[stopped: "  # what wait_all appends to the output of a process it stopped
# torchrun's log lines in a host's output.
_TORCHRUN_LOG = re.compile(r"^[IWE]\d{4} .*torch/distributed/(elastic|run)")
# The log line after which a torchrun's output is its own: a worker failed, or it was stopped.
_TORCHRUN_END = re.compile(r"\] (failed \(exitcode|Received \d+ death signal)").search
_ROOT_FIELD = re.compile(r"^\s*(rank|exitcode|traceback)\s*:\s*(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Started:
    """The processes of one pass as this process sees them, and a label each."""

    processes: list[subprocess.Popen[str]]
    labels: list[str]  # 'rank 2 (host1)' or 'torchrun on host1 (ranks 2-3)'
    launch: str

    @property
    def one_per_host(self) -> bool:
        """Whether each process is a host's torchrun rather than a rank."""
        return self.launch == TORCHRUN


def start(
    hosts: NamespacedHosts,
    layout: HostLayout,
    launch: str,
    argv: list[str],
    env: dict[str, str],
    port: int,
) -> Started:
    """Starts ``python argv`` (``-m module args``) as every rank of ``layout`` on ``hosts``."""
    names = [host.name for host in hosts.hosts]
    ranks_by_host = layout.ranks_by_host()
    if launch == TORCHRUN:
        processes = hosts.torchrun(argv, list(layout.counts), env=env, master_port=port)
        labels = [f"torchrun on {names[h]} ({_span(r)})" for h, r in enumerate(ranks_by_host)]
        return Started(processes, labels, launch)
    if launch != DIRECT:
        raise ValueError(f"unknown launch {launch!r}; known: {TORCHRUN}, {DIRECT}")
    processes = hosts.launch_ranks(argv, ranks_by_host, env=env, master_port=port)
    host_of = {rank: h for h, ranks in enumerate(ranks_by_host) for rank in ranks}
    labels = [f"rank {rank} ({names[host_of[rank]]})" for rank in range(layout.world_size)]
    return Started(processes, labels, launch)


def _span(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


def _ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


class _Process:
    """A started process as :func:`.spawn.dead_ranks` sees it (``exitcode``, None while
    alive)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()


class MessageFile:
    """The ranks' JSON-lines file (:class:`.host_rank.JsonLines`), read like the one-host mode's
    queue: ``get`` returns the next message or raises ``queue.Empty`` after ``timeout``.

    It also turns exits that :func:`.spawn.dead_ranks` cannot see as failures into an error
    message: every process exiting cleanly before rank 0's "done" and, under torchrun, any
    torchrun exiting before it."""

    def __init__(self, path: Path, started: Started) -> None:
        self._file = path.open("rb")
        self._partial = b""  # a line still being written
        self._pending: list[Any] = []
        self._started = started
        self.errors = 0  # "error" messages the ranks wrote: a rank said why it failed

    def get(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        processes = self._started.processes
        while not self._pending:
            # Looked at before reading: a rank that wrote and then exited is read this round.
            codes = [p.poll() for p in processes]
            self._read()
            if self._pending:
                break
            exited = [i for i, code in enumerate(codes) if code is not None]
            if self._started.one_per_host and exited:
                ends = ", ".join(f"{self._started.labels[i]} {_ended(codes[i])}" for i in exited)
                return ["error", "-", f"{ends} before rank 0 said it was done"]
            if len(exited) == len(processes) and not any(codes):
                # dead_ranks only sees failures; without this a clean exit that skipped rank
                # 0's "done" would wait for the whole time limit.
                return ["error", "-", "every rank exited before rank 0 said it was done"]
            if time.monotonic() >= deadline:
                raise queue.Empty
            time.sleep(_READ_POLL_S)
        message = self._pending.pop(0)
        self.errors += message[0] == "error"
        return message

    def _read(self) -> None:
        *lines, self._partial = (self._partial + self._file.read()).split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                self._pending.append(json.loads(line))
            except ValueError:
                self._pending.append(["error", "-", f"unreadable message: {line[:200]!r}"])

    def close(self) -> None:
        self._file.close()


@dataclass
class PassEnd:
    """What one pass left: its results and notes, and whether the layout may go on (False
    after a failure, or where a torchrun outlived its ranks and had to be killed)."""

    outcome: Outcome
    ok: bool


def run_pass(
    hosts: NamespacedHosts,
    layout: HostLayout,
    launch: str,
    plan: Plan,
    port: int,
    folder: Path,
    env: dict[str, str],
    emit: Callable[[Result], None],
) -> PassEnd:
    """Measures ``plan`` once on ``layout``; every process of the pass is gone on return."""
    ws = layout.world_size
    spec = WorldSpec(plan, ws, port)
    path = folder / f"messages-{layout.label.replace('+', 'p')}-port{port}.jsonl"
    path.touch()
    argv = ["-m", RANK_MODULE, "--plan", plan.to_json(), "--messages", str(path)]
    started = start(hosts, layout, launch, argv, env, port)
    processes = started.processes
    outputs: list[tuple[int, str]] = []
    # wait_all drains the processes' output (a full pipe would block them) and, once one fails,
    # stops the others, which would otherwise wait for it in a collective for 30 minutes.
    watcher = threading.Thread(
        target=lambda: outputs.extend(wait_all(processes, None, fail_fast=True)), daemon=True
    )
    watcher.start()
    messages = MessageFile(path, started)
    outcome = Outcome()
    finished = False
    try:
        finished = collect(spec, messages, [_Process(p) for p in processes], emit, outcome)
    finally:
        messages.close()
        # Ranks that are done exit by themselves; after a failure wait_all stops the others.
        grace = _FAILED_TORCHRUN_JOIN_S if started.one_per_host else _FAILED_JOIN_S
        watcher.join(_JOIN_S if finished else grace)
        stopped = _stop(started)
        watcher.join(_JOIN_S)
    if finished and stopped:
        labels = ", ".join(started.labels[i] for i in stopped)
        outcome.notes.append(f"{labels} still ran {_JOIN_S:g} s after the end: stopped")
    if not finished:
        outcome.notes.append(_exits(started, outputs, stopped))
        if not messages.errors and outputs:
            # Died or hung without a word: what the ranks printed last is all there is.
            outcome.notes += _tails(started, outputs)
    # A torchrun killed may leave its workers behind: the next pass would share the CPUs
    # with them, so the layout ends here (closing the hosts kills whatever is left).
    return PassEnd(outcome, finished and not (stopped and started.one_per_host))


def _stop(started: Started) -> list[int]:
    """Stops what still runs; returns their indexes. A rank (nsenter execs it) is killed; a
    torchrun gets SIGTERM first, on which it stops its workers, and SIGKILL if it lingers."""
    alive = [i for i, p in enumerate(started.processes) if p.poll() is None]
    if started.one_per_host:
        for i in alive:
            started.processes[i].terminate()
        deadline = time.monotonic() + _TORCHRUN_TERM_S
        for i in alive:
            try:
                started.processes[i].wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
    for i in alive:
        if started.processes[i].poll() is None:
            started.processes[i].kill()
    return alive


def _stopped_by_wait_all(outputs: list[tuple[int, str]], index: int) -> bool:
    return index < len(outputs) and _STOPPED_MARK in outputs[index][1][-200:]


def _exits(started: Started, outputs: list[tuple[int, str]], stopped: list[int]) -> str:
    """How each process of a failed pass ended: the one that failed first is the one that
    was neither stopped by wait_all (once another had failed) nor by us."""
    parts = []
    for index, process in enumerate(started.processes):
        label = started.labels[index]
        if index in stopped:
            parts.append(f"{label} stopped by the bench")
        elif _stopped_by_wait_all(outputs, index):
            parts.append(f"{label} stopped once another had failed")
        else:
            known = started.one_per_host and index < len(outputs)
            cause = _torchrun_parts(outputs[index][1])[1] if known else ""
            parts.append(f"{label} {_ended(process.returncode)}{cause}")
    return "; ".join(parts)


def _tails(started: Started, outputs: list[tuple[int, str]]) -> list[str]:
    """Notes with the last lines of the processes that failed on their own (not those stopped
    because of them, nor by us), else of the first: where a traceback or a fatal message is.
    A torchrun's output is reduced to its workers' lines and its root-cause summary."""
    failed = [
        i
        for i, (code, _) in enumerate(outputs)
        if code and not _stopped_by_wait_all(outputs, i) and code != -signal.SIGKILL
    ]
    notes = []
    for index in failed or [0]:
        code, text = outputs[index]
        if started.one_per_host:
            text = _torchrun_parts(text)[0]
        last = [line.strip() for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
        said = " | ".join(last) if last else "nothing"
        notes.append(f"{started.labels[index]} ({_ended(code)}): output ends: {said}")
    return notes


def _torchrun_parts(text: str) -> tuple[str, str]:
    """A torchrun's output split into what its workers printed (its own log lines, banner and
    failure summary left out) and the first failure it saw, from its summary's "Root Cause", in
    a phrase: ' (first failure it saw: rank 2 (local_rank: 1), exitcode -9 ...)'."""
    lines = text.splitlines()
    end = next(
        (i for i, line in enumerate(lines) if _TORCHRUN_LOG.match(line) and _TORCHRUN_END(line)),
        len(lines),
    )
    workers = [
        line
        for line in lines[:end]
        if not _TORCHRUN_LOG.match(line)
        and not line.startswith(("*****", "Setting OMP_NUM_THREADS", _STOPPED_MARK))
    ]
    root = text.rfind("Root Cause")
    fields = dict(_ROOT_FIELD.findall(text[root:])) if root >= 0 else {}
    said = fields.get("traceback", "")
    if said.startswith(("Signal", "To enable traceback")):  # the exit code names the signal
        del fields["traceback"]
    cause = ", ".join(
        f"{key} {' '.join(fields[key].split())}"
        for key in ("rank", "exitcode", "traceback")
        if key in fields
    )
    return "\n".join(workers), f" (first failure it saw: {cause})" if cause else ""
