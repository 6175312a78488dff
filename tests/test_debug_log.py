"""The debug log (DUMMY_COLLECTIVES_DEBUG, as NCCL_DEBUG), read from real ranks' output.

The level is read once, when the library loads, so every case is a job of fresh ranks
(faultjob) started with the variable set: INFO (the group's lines at creation, one host and two
simulated hosts, written to DUMMY_COLLECTIVES_DEBUG_FILE), TRACE (a line per operation, on
stderr) and the default (no INFO or TRACE line at all).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import faultjob
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module]

# The log writes the host name as NCCL does: up to the first dot.
HOST = socket.gethostname().split(".")[0]


def prefix(pid: int, rank: int, level: str) -> str:
    """NCCL's `host:pid:tid [cudaDev] NCCL INFO`, with the group rank in the brackets."""
    return rf"^{re.escape(HOST)}:{pid}:\d+ \[rank {rank}\] DUMMY {level} "


def lines_of(log: str, level: str) -> list[str]:
    return [line for line in log.splitlines() if f" DUMMY {level} " in line]


def require_line(log: str, pattern: str, what: str) -> str:
    """The first line of `log` matching `pattern` (re.search, multi-line), or a failure."""
    match = re.search(pattern, log, re.MULTILINE)
    assert match, f"no {what} line matching {pattern!r} in:\n{log}"
    return match.group(0)


# --------------------------------------------------------------------------- inside the ranks


def one_host_then_two_hosts() -> int:
    """An allreduce on the default group (one host), then a group whose ranks are on two
    simulated hosts (DUMMY_COLLECTIVES_HOST_ID is read when a group is made)."""
    import dummy_collectives._C as C

    assert C.debug_level() == "INFO", C.debug_level()
    t = torch.ones(4)
    dist.all_reduce(t)
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"simhost{faultjob.rank()}"
    group = dist.new_group(backend="dummy")
    dist.all_reduce(t, group=group)
    assert t.tolist() == [4.0] * 4
    dist.destroy_process_group()
    return os.getpid()


def traced_operations() -> tuple[int, list[tuple[str, int]], str]:
    """A few collectives (inside the call and through the engine) and a send/recv pair on the
    default group, then two allreduces on a group over two simulated hosts; returns the pid,
    the default group's collectives as (kind, sequence number) as the backend counts them, and
    the second group's name."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    done: list[tuple[str, int]] = []

    def issued(kind: str) -> None:
        done.append((kind, backend._get_sequence_number_for_group()))

    small = torch.ones(4)
    dist.all_reduce(small)
    issued("allreduce")
    large = torch.ones(1 << 17)  # 512 KiB: past one_shot_max_bytes
    dist.all_reduce(large)
    issued("allreduce")
    dist.all_reduce(small, async_op=True).wait()  # queued: the engine runs it
    issued("allreduce")
    dist.broadcast(small, src=0)
    issued("broadcast")
    dist.barrier()
    issued("barrier")
    if faultjob.rank() == 0:
        dist.send(small, dst=1)
    else:
        dist.recv(small, src=0)
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"simhost{faultjob.rank()}"
    group = dist.new_group(backend="dummy")
    dist.all_reduce(small, group=group)  # rides with the agreement
    dist.all_reduce(torch.ones(1 << 18), group=group)  # 1 MiB: pipelined on the rails
    dist.destroy_process_group()
    return os.getpid(), done, group.group_name


def chunked_on_two_hosts_of_two(min_chunk: int) -> str:
    """A group over 2 simulated hosts x 2 ranks (every rank has a rail: pipelines on the rails),
    its least chunk size `min_chunk` (-1: measured at creation), and a 1 MiB allreduce checked
    exactly; returns the group's name."""
    from dummy_collectives import Options

    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"simhost{faultjob.rank() // 2}"
    group = dist.new_group(
        backend="dummy", pg_options=Options(inter_host_min_chunk_bytes=min_chunk)
    )
    t = torch.arange(1 << 18, dtype=torch.float32) + faultjob.rank()
    dist.all_reduce(t, group=group)
    want = 4 * torch.arange(1 << 18, dtype=torch.float32) + 6
    assert torch.equal(t, want), "the pipelined allreduce is wrong"
    dist.destroy_process_group()
    return group.group_name


def default_level() -> str:
    import dummy_collectives._C as C

    t = torch.ones(4)
    dist.all_reduce(t)
    dist.barrier()
    return C.debug_level()


# --------------------------------------------------------------------------- the tests


@pytest.fixture
def log_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean slate for the ranks' environment, and whole rank logs back from faultjob."""
    for name in ("DUMMY_COLLECTIVES_DEBUG", "DUMMY_COLLECTIVES_DEBUG_FILE",
                 "DUMMY_COLLECTIVES_HOST_ID"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(faultjob, "LOG_TAIL_CHARS", 1 << 20)
    return monkeypatch


def test_info_describes_each_group_once_on_every_rank(
    log_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG", "info")  # case-insensitive
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG_FILE", str(tmp_path / "dc.%h.%p.log"))
    job = faultjob.run_job(2, one_host_then_two_hosts, timeout_s=60)
    assert all(r.returned for r in job.ranks), job.report()
    for r in range(2):
        pid = job[r].value
        path = tmp_path / f"dc.{HOST}.{pid}.log"
        assert path.exists(), f"no log file {path.name} in {os.listdir(tmp_path)}"
        log = path.read_text()
        assert "DUMMY INFO" not in job[r].log, "INFO lines went to stderr despite the file"
        assert not lines_of(log, "TRACE"), log
        # Every line names this process and this rank (its group rank, on every level).
        for line in log.splitlines():
            assert re.match(prefix(pid, r, "INFO"), line), f"bad prefix: {line!r}"

        # One host: the group, transport, thresholds, threads, cores, CUDA path; once each.
        group = require_line(
            log, prefix(pid, r, "INFO") + rf"group 0: rank {r} of 2, all on one host", "group"
        )
        assert log.count(group) == 1, log
        require_line(log, r"transport: shared memory, a segment of [\d.]+ [KMG]iB, 2 slots of "
                     r"buffer_bytes 1 MiB per rank$", "transport")  # fmt: skip
        require_line(log, r"allreduce one-shot up to one_shot_max_bytes 64 KiB, peer access "
                     r"from 128 KiB to 32 MiB", "thresholds")  # fmt: skip
        require_line(log, r"threads per rank \d+( \(auto\))?, spin auto", "threads")
        require_line(log, r"ranks share cores: (yes|no) \(ranks on this machine 2, CPUs in their "
                     r"affinities \d+\)", "core sharing")  # fmt: skip
        require_line(log, r"CUDA tensors: (none \(CPU-only build\)|CUDA IPC|staged)", "CUDA")

        # Two simulated hosts: the group, its hosts, the engine; the host level as its part.
        require_line(log, rf"\] DUMMY INFO group \S+: rank {r} of 2 on 2 hosts, mode real; this "
                     rf"rank is local rank 0 of 1 on host {r}$", "multi-host group")  # fmt: skip
        require_line(log, r"DUMMY INFO host 0 of 2: simhost0( \(\S+\))?, rank 0$", "host 0")
        require_line(log, r"DUMMY INFO host 1 of 2: simhost1( \(\S+\))?, rank 1$", "host 1")
        require_line(log, r"cross-host engine gloo \(inter_host auto\) over rails \(ranks per "
                     r"host 1; this rank's rail: ranks 0, 1\)", "engine")  # fmt: skip
        # Two hosts of one rank: the plan raises what rides with the agreement and says why.
        require_line(log, r"cross-host plan: up to 256 KiB \(inter_host_inline_bytes 16 KiB, "
                     r"raised: 2 hosts of one rank.*\) ride with the agreement \(one exchange\); "
                     r"larger messages cross hosts whole, in one engine operation",
                     "cross-host plan")  # fmt: skip
        require_line(log, r"cross-host records: links of the hosts' leaders, driven by the "
                     r"waiting thread: UCX \(inter_host auto\); this rank's: UCX ",
                     "leader links")  # fmt: skip
        require_line(log, r"cross-host plan: broadcasts send the root's host's record one way "
                     r".* with up to 1 MiB of data, larger data after the check",
                     "one-way broadcasts")  # fmt: skip
        require_line(log, rf"DUMMY INFO host level: local rank 0 of 1 \(the group's ranks on "
                     rf"this host: {r}\)$", "host level")  # fmt: skip
        require_line(log, r"DUMMY INFO host level: transport: shared memory", "host transport")
        # The host level is not a group of its own.
        assert len(re.findall(r"DUMMY INFO group ", log)) == 2, log


def test_trace_writes_a_line_per_operation(log_env: pytest.MonkeyPatch) -> None:
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG", "TRACE")
    job = faultjob.run_job(2, traced_operations, timeout_s=60)
    assert all(r.returned for r in job.ranks), job.report()
    for r in range(2):
        pid, done, hosts_group = job[r].value
        log = job[r].log
        assert lines_of(log, "INFO"), log  # TRACE includes INFO
        traced = lines_of(log, "TRACE")
        for line in traced:
            assert re.match(prefix(pid, r, "TRACE"), line), f"bad prefix: {line!r}"
        seqs = [seq for _, seq in done]
        assert seqs == sorted(set(seqs)), f"sequence numbers {seqs}"
        for kind, seq in done:
            matching = [
                line
                for line in traced
                if f"DUMMY TRACE {kind} #{seq} " in line and " group 0: " in line
            ]
            assert len(matching) == 1, f"{kind} #{seq}: {matching} in:\n{log}"
            assert re.search(r" in group 0: (.*; )?done in [\d.]+ us$", matching[0]), matching[0]
        # What each collective did, as far as it is cheap to know.
        first, large = (f"allreduce #{seqs[i]} of " for i in (0, 1))
        require_line(log, re.escape(first) + r"4 Float elements with SUM \(16 B\) in group 0: "
                     r"one-shot; done", "one-shot allreduce")  # fmt: skip
        require_line(log, re.escape(large) + r"131072 Float elements with SUM \(512 KiB\) in "
                     r"group 0: (peer access|reduce-scatter \+ all-gather, slot chunks 1), "
                     r"threads \d+; done", "large allreduce")  # fmt: skip
        if r == 0:
            require_line(log, r"DUMMY TRACE send #1 to rank 1 of 4 Float elements \(16 B\) in "
                         r"group 0: done in", "send")  # fmt: skip
        else:
            require_line(log, r"DUMMY TRACE recv #1 from rank 0 of 4 Float elements \(16 B\) in "
                         r"group 0: done in", "recv")  # fmt: skip
        # Two hosts: the group's own collectives, not its host level's steps.
        group = re.escape(hosts_group)
        require_line(log, rf"DUMMY TRACE allreduce #1 of 4 Float elements with SUM \(16 B\) in "
                     rf"group {group}: inline with the agreement; done", "inline")  # fmt: skip
        # One rank per host: no pipeline; two hosts reduce in segments on the leaders' links.
        require_line(log, rf"DUMMY TRACE allreduce #2 of 262144 Float elements with SUM \(1 MiB\) "
                     rf"in group {group}: one rank per host, in segments on the links; done",
                     "segments on the links")  # fmt: skip
        assert len(traced) == len(done) + 1 + 2, "\n".join(traced)


@pytest.mark.parametrize(
    ("min_chunk", "chunks"), [(-1, None), (512 << 10, 2), (1 << 20, 1)], ids=["auto", "512K", "1M"]
)
def test_the_least_chunk_size_is_measured_or_set_and_the_same_on_every_rank(
    log_env: pytest.MonkeyPatch, min_chunk: int, chunks: int | None
) -> None:
    """inter_host_min_chunk_bytes: auto (-1) measures the link at creation, and every rank must
    cut alike (else their pipelines' steps would pair wrongly): all name the same size and rate,
    and a 1 MiB allreduce goes in as many chunks; set, it is the size used."""
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG", "TRACE")
    job = faultjob.run_job(4, chunked_on_two_hosts_of_two, min_chunk, timeout_s=120)
    assert all(r.returned for r in job.ranks), job.report()
    plans = set()
    for r in range(4):
        log = job[r].log
        plan = require_line(log, r"are pipelined in at least 8 chunks of (\S+ [KM]iB) to "
                            r"inter_host_chunk_bytes 1 MiB \((.*)\), each chunk's cross-host "
                            r"stage on this rail's links, driven by the waiting thread$",
                            "pipeline plan")  # fmt: skip
        plans.add(plan)
        done = require_line(log, rf"DUMMY TRACE allreduce #1 of 262144 Float elements with SUM "
                            rf"\(1 MiB\) in group {re.escape(job[r].value)}: on the rails, "
                            r"pipelined, chunks (\d+)", "pipelined allreduce")  # fmt: skip
        counted = int(re.search(r"chunks (\d+)", done).group(1))
        if chunks is not None:
            assert counted == chunks, done
        else:
            least = re.search(r"chunks of (\S+ [KM]iB)", plan).group(1)
            assert (least, counted) in {("256 KiB", 4), ("1 MiB", 1)}, (least, counted)
    assert len(plans) == 1, f"the ranks cut differently: {plans}"
    (plan,) = plans
    if min_chunk == -1:
        assert re.search(r"the link between hosts measured [\d.]+ Gbit/s at creation", plan), plan
    else:
        assert "(inter_host_min_chunk_bytes)" in plan, plan


def test_default_level_writes_no_info_or_trace(log_env: pytest.MonkeyPatch) -> None:
    job = faultjob.run_job(2, default_level, timeout_s=60)
    assert all(r.returned for r in job.ranks), job.report()
    for r in range(2):
        assert job[r].value == "WARN"
        assert " DUMMY " not in job[r].log, job[r].log


def test_an_unknown_level_warns_once_and_means_warn() -> None:
    env = dict(os.environ, DUMMY_COLLECTIVES_DEBUG="verbose")
    env.pop("DUMMY_COLLECTIVES_DEBUG_FILE", None)
    done = subprocess.run(
        [sys.executable, "-c", "import dummy_collectives._C as C; print(C.debug_level())"],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "WARN"
    warnings = lines_of(done.stderr, "WARN")
    assert len(warnings) == 1, done.stderr
    assert re.match(
        rf"^{re.escape(HOST)}:\d+:\d+ DUMMY WARN DUMMY_COLLECTIVES_DEBUG='verbose' is not WARN, "
        r"INFO or TRACE; using WARN$",
        warnings[0],
    ), warnings[0]


def test_info_names_the_ucx_library_and_transports_the_links_run_on(
    log_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import dummy_collectives

    loaded = dummy_collectives.ucx_library()
    if not loaded["loaded"]:
        pytest.skip(f"UCX does not load here: {loaded['why']}")
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG", "info")
    log_env.setenv("DUMMY_COLLECTIVES_DEBUG_FILE", str(tmp_path / "dc.%h.%p.log"))
    log_env.setenv("DUMMY_COLLECTIVES_INTER_HOST", "ucx")
    job = faultjob.run_job(2, one_host_then_two_hosts, timeout_s=60)
    assert all(r.returned for r in job.ranks), job.report()
    for r in range(2):
        log = (tmp_path / f"dc.{HOST}.{job[r].value}.log").read_text()
        # What loaded, from where and why, and the transport UCX chose to the peer.
        require_line(log, rf"cross-host records: links of the hosts' leaders, driven by the "
                     rf"waiting thread: UCX \(inter_host ucx\); this rank's: UCX "
                     rf"{re.escape(loaded['version'])} \({re.escape(loaded['why'])}: "
                     rf"{re.escape(loaded['path'])}\), \w+/\S+", "UCX links")  # fmt: skip
