"""The benchmark's multi-host mode (``--hosts H``): dummy against gloo across simulated hosts.

H namespaced hosts (:mod:`dummy_collectives.namespaced_hosts`: a network namespace, /dev/shm
and hostname each, links optionally shaped with tbf) on this machine, L ranks on each (a host's
ranks contiguous, as torchrun numbers them); once per ranks-per-host value and per pass, the
ranks are started inside the hosts (``launch_ranks``, through nsenter) and run
:mod:`.host_rank`: the one-host mode's measurement (:func:`.runner.run_rank`), with dummy as the
default group, which spans the hosts, and gloo over the same ranks as the baseline.

A process started through nsenter cannot share a multiprocessing queue with this one, so the
ranks append their messages to a JSON-lines file in a temporary folder (the hosts share the file
system) and :func:`.spawn.collect`, the one-host reader with its time limits, reads it through
two adapters. A rank that raises, dies or hangs past ``--init-timeout`` / ``--timeout`` ends its
layout: every rank of it is stopped and the reason becomes a note; the hosts are removed at the
end whatever happens.

DUMMY_COLLECTIVES_* variables of this process reach the ranks (and the report lists them), so
the backend's knobs can be tried across hosts. Not measured in this mode: DeepSpeed and Open
MPI (one-host shared-memory peers) and the one-host references (c10d floor, memcpy).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dummy_collectives import namespaced_hosts
from dummy_collectives.bench import host_targets
from dummy_collectives.bench.host_report import AcrossHosts
from dummy_collectives.bench.machine import machine_info
from dummy_collectives.bench.peers import Outcome
from dummy_collectives.bench.plan import HostsPlan, WorldSpec
from dummy_collectives.bench.report import RunData, markdown, progress_line, write
from dummy_collectives.bench.results import Result, best_of_passes
from dummy_collectives.bench.spawn import collect
from dummy_collectives.namespaced_hosts import NamespacedHosts, rate_bits_per_second, wait_all

KNOB_PREFIX = "DUMMY_COLLECTIVES_"
# Inside the hosts' own network namespaces nothing else listens; each launch takes the next port
# so that a previous layout's sockets in TIME_WAIT never meet the next rendezvous.
FIRST_PORT = 29500
SKIPPED = (
    "multi-host mode: DeepSpeed and Open MPI (one-host shared-memory peers), the c10d floor and "
    "memcpy (one-host references) are not measured"
)
_READ_POLL_S = 0.05
_JOIN_S = 30.0  # for ranks that said they are done to exit
_FAILED_JOIN_S = 3.0  # for the others of a failed rank, which wait_all stops, to be gone
_TAIL_LINES = 3


def _say(text: str) -> None:
    print(text, flush=True)


def _emit(result: Result) -> None:
    _say(progress_line(result))


def rank_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The backend's knobs (DUMMY_COLLECTIVES_*) of ``environ`` (default: this process's),
    given to every rank explicitly: the report lists exactly what the ranks got."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if k.startswith(KNOB_PREFIX)}


class _Rank:
    """A rank process as :func:`.spawn.dead_ranks` sees it (``exitcode``, None while alive)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()


class _MessageFile:
    """The ranks' JSON-lines file (:class:`.host_rank.JsonLines`), read like the one-host mode's
    queue: ``get`` returns the next message or raises ``queue.Empty`` after ``timeout``."""

    def __init__(self, path: Path, processes: list[subprocess.Popen[str]]) -> None:
        self._file = path.open("rb")
        self._partial = b""  # a line still being written
        self._pending: list[Any] = []
        self._processes = processes
        self.errors = 0  # "error" messages read: a rank said why it failed

    def get(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while not self._pending:
            # Looked at before reading: a rank that wrote and then exited is read this round.
            all_exited_cleanly = all(p.poll() == 0 for p in self._processes)
            self._read()
            if self._pending:
                break
            if all_exited_cleanly:
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


def _exits(ws: int, processes: list[subprocess.Popen[str]], killed: list[int]) -> str:
    """How each rank of a failed layout ended: the rank that failed first is the one that did
    not end by SIGTERM (wait_all's, once another had failed) nor by our SIGKILL."""
    parts = []
    for rank, process in enumerate(processes):
        code = process.returncode
        if rank in killed:
            parts.append(f"rank {rank} killed by the bench")
        elif code is not None and code < 0:
            parts.append(f"rank {rank} {signal.Signals(-code).name}")
        else:
            parts.append(f"rank {rank} exit {code}")
    legend = any(p.returncode == -signal.SIGTERM for p in processes)
    return (
        f"ws={ws}: "
        + ", ".join(parts)
        + (" (SIGTERM: stopped once another rank had failed)" if legend else "")
    )


def _tails(ws: int, outputs: list[tuple[int, str]], hostname_of: list[str]) -> list[str]:
    """Notes with the last lines of the ranks that failed on their own (not those stopped
    because of them, nor by us), else of rank 0: where a traceback or a fatal message is."""
    stopped = (-signal.SIGTERM, -signal.SIGKILL)  # wait_all's fail_fast, or _run_layout
    failed = [r for r, (code, _) in enumerate(outputs) if code and code not in stopped]
    notes = []
    for rank in failed or [0]:
        code, text = outputs[rank]
        last = [line.strip() for line in text.splitlines() if line.strip()][-_TAIL_LINES:]
        if last:
            notes.append(
                f"ws={ws}: rank {rank} ({hostname_of[rank]}, exit {code}) output ends: "
                + " | ".join(last)
            )
    return notes


def _run_layout(
    hosts: NamespacedHosts, hplan: HostsPlan, per_host: int, port: int, folder: Path
) -> Outcome:
    """Measures the plan once on ``per_host`` ranks per host; the ranks are gone on return."""
    ws = hplan.hosts * per_host
    spec = WorldSpec(hplan.plan, ws, port)
    path = folder / f"messages-ws{ws}-port{port}.jsonl"
    path.touch()
    ranks_by_host = [list(range(h * per_host, (h + 1) * per_host)) for h in range(hplan.hosts)]
    hostname_of = [hosts.hosts[r // per_host].name for r in range(ws)]
    argv = ["-m", "dummy_collectives.bench.host_rank", "--plan", hplan.plan.to_json()]
    argv += ["--messages", str(path)]
    processes = hosts.launch_ranks(argv, ranks_by_host, env=rank_environment(), master_port=port)
    outputs: list[tuple[int, str]] = []
    # wait_all drains the ranks' output (a full pipe would block them) and, once one fails,
    # stops the others, which would otherwise wait for it in a collective for 30 minutes.
    watcher = threading.Thread(
        target=lambda: outputs.extend(wait_all(processes, None, fail_fast=True)), daemon=True
    )
    watcher.start()
    messages = _MessageFile(path, processes)
    outcome = Outcome()
    finished = False
    try:
        finished = collect(spec, messages, [_Rank(p) for p in processes], _emit, outcome)
    finally:
        messages.close()
        # Ranks that are done exit by themselves; after a failure wait_all stops the others.
        watcher.join(_JOIN_S if finished else _FAILED_JOIN_S)
        killed = [rank for rank, p in enumerate(processes) if p.poll() is None]
        for rank in killed:  # nsenter execs the rank: this is the rank itself
            processes[rank].kill()
        watcher.join(_JOIN_S)
    if finished and killed:
        outcome.notes.append(f"ws={ws}: ranks {killed} still ran {_JOIN_S:g} s after the end")
    if not finished:
        outcome.notes.append(_exits(ws, processes, killed))
        if not messages.errors and outputs:
            # Died or hung without a word: what the ranks printed last is all there is.
            outcome.notes += _tails(ws, outputs, hostname_of)
    return outcome


def _measure(hosts: NamespacedHosts, hplan: HostsPlan, data: RunData, across: AcrossHosts) -> None:
    """Every layout, in every pass; each point keeps its best pass."""
    port = FIRST_PORT
    with tempfile.TemporaryDirectory(prefix="dummy_bench_hosts_") as folder:
        for index in range(hplan.plan.passes):
            if hplan.plan.passes > 1:
                _say(f"[pass {index + 1} of {hplan.plan.passes}]")
            for per_host in hplan.ranks_per_host:
                ws = hplan.hosts * per_host
                _say(
                    f"[ws={ws}] starting {per_host} rank processes on each of {hplan.hosts} "
                    f"hosts ({', '.join(hplan.plan.backends)})"
                )
                outcome = _run_layout(hosts, hplan, per_host, port, Path(folder))
                port += 1
                for note in outcome.notes:
                    _say(f"[ws={ws}] note: {note}")
                across.results += outcome.results
                data.notes += outcome.notes
    if hplan.plan.passes > 1:
        across.results = best_of_passes(across.results)


def run(hplan: HostsPlan, out: Path, plot_png: bool = True) -> int:
    """Measures ``hplan`` across namespaced hosts, prints progress and the report, writes it
    into ``out``; 1 (and the reason) where namespaces cannot be made here."""
    ok, why = namespaced_hosts.available()
    if not ok:
        print(f"--hosts: cannot make namespaced hosts here: {why}", file=sys.stderr, flush=True)
        return 1
    start = time.monotonic()
    plan = hplan.plan
    rate = rate_bits_per_second(hplan.link_rate) if hplan.link_rate else None
    across = AcrossHosts(
        hplan.hosts,
        hplan.ranks_per_host,
        hplan.link_rate,
        rate,
        plan.collectives,
        plan.sizes,
        environment=rank_environment(),
    )
    data = RunData(machine_info(plan.device), plan, [], notes=[SKIPPED], across=across)
    m = data.machine
    link = f"links shaped to {hplan.link_rate}" if hplan.link_rate else "links unshaped"
    _say(
        f"dummy_collectives bench across hosts: {m['cpu_model']}, {m['usable_cores']} cores, "
        f"torch {m['torch']}; {hplan.hosts} namespaced hosts, {link}"
    )
    with NamespacedHosts(hplan.hosts, rate=hplan.link_rate, own_cpus=hplan.own_cpus) as hosts:
        across.host_cpus = [list(host.cpus) for host in hosts.hosts]
        _measure(hosts, hplan, data, across)
    across.verdicts = host_targets.evaluate(across.results, hplan.hosts, rate)
    across.elapsed_s = time.monotonic() - start
    if hasattr(os, "getloadavg"):
        m["load_average_end"] = list(os.getloadavg())
    md_path, json_path = write(data, out)
    _say("\n" + markdown(data))
    if plot_png:
        _say("PNG: not drawn in the multi-host mode (the report has the numbers)")
    _say(f"written: {md_path}, {json_path}")
    return 0
