"""Jobs of ``multihost_job.py`` on namespaced hosts, started as a user starts them (torchrun per
host, or one process per rank), for the test modules that run across hosts."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import support

from tools import namespaced_hosts

JOB = str(Path(__file__).resolve().parent / "multihost_job.py")
_ports = itertools.count(29600)  # a fresh store port per job: the last one may linger


def next_port() -> int:
    """A store port no job of this test session used yet."""
    return next(_ports)


@dataclass
class Job:
    results: dict[int, dict[str, Any]]
    returncodes: list[int]
    output: str
    leftover_shm: dict[int, list[str]] = field(default_factory=dict)
    # torchfrtrace's report on the flight recorder dumps the ranks wrote (none: "").
    fr_trace: str = ""

    def report(self) -> str:
        return f"returncodes {self.returncodes}\n{self.output[-6000:]}"


def run_job(
    hosts: namespaced_hosts.NamespacedHosts,
    scenario: str,
    *args: str,
    nproc: Sequence[int] = (2, 2),
    ranks_by_host: Sequence[Sequence[int]] | None = None,
    timeout_s: float = 300,
    env: dict[str, str] | None = None,
    torchrun_args: Sequence[str] = (),
    analyse_dumps: bool = False,
    during: Callable[[Path], None] | None = None,
    master_port: int | None = None,
) -> Job:
    """Runs ``scenario`` on the hosts; ``analyse_dumps``: run torchfrtrace on the flight
    recorder dumps the job left (every rank's must be there: a killed rank writes none).
    ``during(out_dir)`` runs once the job started, before it is waited for (what a test does to
    the hosts meanwhile); the job's processes are stopped if it raises. ``master_port``: the
    store's port (default: a fresh one)."""
    with tempfile.TemporaryDirectory(prefix="multihost-") as out:
        argv = [JOB, scenario, out, *args]
        port = master_port or next_port()
        if ranks_by_host is None:
            procs = hosts.torchrun(argv, list(nproc), env=env, master_port=port,
                                   extra_args=torchrun_args)  # fmt: skip
        else:
            procs = hosts.launch_ranks(argv, ranks_by_host, env=env,
                                       master_port=port)  # fmt: skip
        try:
            if during is not None:
                during(Path(out))
        finally:
            waited = namespaced_hosts.wait_all(procs, timeout_s)
        results = {
            int(path.stem.removeprefix("rank")): json.loads(path.read_text())
            for path in Path(out).glob("rank*.json")
        }
        fr_trace = ""
        if analyse_dumps:
            fr_trace = support.torchfrtrace(Path(out), "fr_rank_")
    output = "".join(f"---- process {i} (exit {code}) ----\n{text}" for i, (code, text)
                     in enumerate(waited))  # fmt: skip
    leftover = {h.index: hosts.shm_entries(h.index) for h in hosts.hosts}
    return Job(results, [code for code, _ in waited], output,
               {h: names for h, names in leftover.items() if names}, fr_trace)  # fmt: skip


def _without_cpp_frames(traceback: str) -> str:
    """A crash's Python traceback and message, less the C++ frames that would hide them."""
    return "\n".join(line for line in traceback.splitlines()
                     if not line.startswith(("frame #", "Exception raised from")))  # fmt: skip


def check_ran_everywhere(job: Job, world: int) -> None:
    assert sorted(job.results) == list(range(world)), job.report()
    crashed = {r: _without_cpp_frames(res["crashed"]) for r, res in job.results.items()
               if "crashed" in res}  # fmt: skip
    assert not crashed, "\n".join(f"rank {r}: {text}" for r, text in crashed.items())
    if support.IS_DUMMY:
        assert {res["backend"] for res in job.results.values()} == {"two_level"}
    assert not job.leftover_shm, job.leftover_shm


def check_slow_rank_named(job: Job) -> None:
    """The ``slow_rank`` part of a job (multihost_job._slow_rank_waits): every rank's
    wait_summary is the same and names the slow rank as the one the others waited for."""
    waits = [job.results[r]["waits"] for r in sorted(job.results)]
    assert all(w == waits[0] for w in waits), waits
    slow = waits[0]["slow_rank"]
    assert waits[0]["most_waited_for"] == slow, waits[0]["printed"]
    assert waits[0]["times_last"][slow] >= waits[0]["rounds"] - 1, waits[0]["printed"]
    least = 0.5 * waits[0]["others_must_wait_us"]
    assert waits[0]["others_waited_us"][slow] >= least, waits[0]["printed"]
