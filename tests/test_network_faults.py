"""Network faults between hosts: partitions, a one-way loss, clocks that differ, strangers.

Two namespaced hosts (``tools.namespaced_hosts``) of two ranks each, started with
torchrun per host as a user starts them; the store lives on host 0 (torchrun's rendezvous), so
a partition isolates exactly the side without it, as it usually does on a real cluster. The
test breaks the network under a job of checked collectives (``train_through_faults``):

- a partition longer than the group's timeout: every rank of both hosts raises within its
  timeout + 1 s of its last success, naming the ranks it could not reach and never claiming a
  process ended; once the network is whole again the failed group stays failed, a new group
  works, and nothing stays in /dev/shm;
- a partition shorter than the timeout: ridden out, every result exact;
- a one-way loss (one host's packets never arrive, the other direction flows): as a partition;
- a host whose wall clock runs a second ahead of the other's: nothing changes (no clock of one
  host is compared with another's);
- strangers that connect to every port either host listens on while the group is made and
  while it trains, with garbage, a fake hello of UCX's TCP transport, or silence: nothing
  changes either.

gloo (DC_TEST_BACKEND=gloo) keeps the same deadlines; what the messages say is dummy's.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import support
from multihost_job import FAKETIME_LIBRARY
from multihost_runner import (
    Job,
    check_ran_everywhere,
    check_slow_rank_named,
    next_port,
    run_job,
)

from tools import namespaced_hosts

AVAILABLE, WHY = namespaced_hosts.available()
pytestmark = [
    pytest.mark.skipif(not AVAILABLE, reason=f"hosts cannot be made here: {WHY}"),
    pytest.mark.slow,
]

TIMEOUT_S = 5.0
# What a rank may take beyond its timeout to raise (the bound), from its last success.
LATE_BY_AT_MOST_S = 1.0
WORLD = 4
HOST_OF = {0: 0, 1: 0, 2: 1, 3: 1}


@pytest.fixture(scope="module")
def hosts() -> Iterator[namespaced_hosts.NamespacedHosts]:
    with namespaced_hosts.NamespacedHosts(2) as made:
        yield made


def await_files(paths: list[Path], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while not all(path.exists() for path in paths):
        if time.monotonic() > deadline:
            missing = [path.name for path in paths if not path.exists()]
            raise AssertionError(f"the job never wrote {missing} (it did not start training)")
        time.sleep(0.05)


def fault_while_training(
    hosts: namespaced_hosts.NamespacedHosts,
    breaks: Callable[[], None],
    mends: Callable[[], None],
    broken_s: float,
    timeout_s: float = TIMEOUT_S,
) -> Job:
    """``train_through_faults`` on 2 hosts of 2 ranks; once every rank trains, ``breaks`` the
    network for ``broken_s``, ``mends`` it, tells the ranks (``healed``) and, a few rounds
    later, stops the ranks that still train."""

    def during(out: Path) -> None:
        await_files([out / f"ready{r}" for r in range(WORLD)], 120)
        try:
            breaks()
            time.sleep(broken_s)
        finally:
            mends()
        (out / "healed").write_text("")
        time.sleep(2)
        (out / "stop").write_text("")

    return run_job(hosts, "train_through_faults", env={"DC_JOB_TIMEOUT_S": str(timeout_s)},
                   during=during, timeout_s=240)  # fmt: skip


def check_failed_in_time_and_recovered(job: Job, timeout_s: float = TIMEOUT_S) -> None:
    """Every rank raised within its timeout + 1 s of its last success with exact results before;
    after the network healed, the failed group raises again and a new group is exact."""
    check_ran_everywhere(job, WORLD)
    assert job.returncodes == [0, 0], job.report()
    for rank, result in job.results.items():
        assert result["wrong"] == [], (rank, result)
        assert result["error"] is not None, (rank, result)
        assert result["failed_after_s"] <= timeout_s + LATE_BY_AT_MOST_S, (rank, result)
        again = result["failed_group_again"]
        assert again is not None, (rank, result)
        assert result["new_group_error"] is None and result["new_group_exact"], (rank, result)


def check_names_the_unreachable(job: Job) -> None:
    """dummy's messages name the collective, the other host and its ranks, and claim no death:
    nobody saw a process end."""
    for rank, result in job.results.items():
        error = result["error"]
        assert "dummy " in error and f"on rank {rank}" in error, (rank, error)
        other = 1 - HOST_OF[rank]
        ranks = [r for r in range(WORLD) if HOST_OF[r] == other]
        # A leader and the ranks of its rail each hear from their own peer on the other host.
        assert re.search(rf"heard nothing from rank ({ranks[0]}|{ranks[1]}) ", error), (rank, error)
        named = f"host{other} (10.77.0.{other + 1}), ranks {ranks[0]}, {ranks[1]})"
        assert named in error, (rank, error)
        for claim in ("has ended", "died", "whose process"):
            assert claim not in error, (rank, error)
        assert "the group failed earlier" in result["failed_group_again"], (rank, result)
    # Once the network is back, the failed group gives every rank the same reason: the one that
    # won in the store.
    reasons = {rank: failed_earlier_reason(result["failed_group_later"])
               for rank, result in job.results.items()}  # fmt: skip
    assert len(set(reasons.values())) == 1, reasons


def failed_earlier_reason(error: str) -> str:
    marker = "the group failed earlier ("
    assert marker in error, error
    return error[error.index(marker) + len(marker) :]


def test_a_partition_longer_than_the_timeout_fails_both_hosts_in_time(hosts) -> None:
    job = fault_while_training(
        hosts,
        breaks=lambda: hosts.set_link(1, up=False),
        mends=lambda: hosts.set_link(1, up=True),
        broken_s=2 * TIMEOUT_S + 3,
    )
    check_failed_in_time_and_recovered(job)
    if support.IS_DUMMY:
        check_names_the_unreachable(job)
        # Each side says what it knows of the store: host 0 reached it, host 1 did not.
        for rank in (0, 1):
            assert "the group's store answered" in job.results[rank]["error"], job.results[rank]
        for rank in (2, 3):
            error = job.results[rank]["error"]
            assert "the group's store did not answer either" in error, error


@pytest.mark.skipif(shutil.which("iptables") is None, reason="iptables (Debian's) is not installed")
def test_a_one_way_loss_longer_than_the_timeout_fails_both_hosts_in_time(hosts) -> None:
    # Host 1's packets never reach host 0 (the store's host); host 0's reach host 1.
    job = fault_while_training(
        hosts,
        breaks=lambda: hosts.drop_arriving(0, sender=1),
        mends=lambda: hosts.drop_arriving(0, sender=None),
        broken_s=2 * TIMEOUT_S + 3,
    )
    check_failed_in_time_and_recovered(job)
    if support.IS_DUMMY:
        check_names_the_unreachable(job)


def test_a_partition_shorter_than_the_timeout_is_ridden_out_exactly(hosts) -> None:
    job = fault_while_training(
        hosts,
        breaks=lambda: hosts.set_link(1, up=False),
        mends=lambda: hosts.set_link(1, up=True),
        broken_s=2.0,
        timeout_s=20.0,
    )
    check_ran_everywhere(job, WORLD)
    assert job.returncodes == [0, 0], job.report()
    for rank, result in job.results.items():
        assert result["error"] is None and result["wrong"] == [], (rank, result)
        # It did wait out the partition (it was training across it).
        assert result["longest_step_s"] >= 1.5, (rank, result)


@support.requires_dummy
@pytest.mark.skipif(not FAKETIME_LIBRARY, reason="libfaketime (Debian's) is not installed")
def test_a_host_whose_clock_runs_a_second_ahead_changes_nothing(hosts) -> None:
    # Host 0's ranks run with their wall clock 1 s ahead. Who made whom wait must still name the
    # slow rank (on host 1) on every rank, and every result is exact.
    job = run_job(hosts, "slow_rank", env={"DC_JOB_FAKETIME": "host0:+1s"})
    check_ran_everywhere(job, WORLD)
    assert job.returncodes == [0, 0], job.report()
    clocks = {r: job.results[r]["clock"] for r in range(WORLD)}
    assert min(clocks[0], clocks[1]) - max(clocks[2], clocks[3]) > 0.5, clocks  # it was ahead
    assert all(job.results[r]["exact"] for r in range(WORLD)), job.results
    check_slow_rank_named(job)


# Groups the strangers' job makes; host 1's ranks come to each one's cross-host part late, so
# host 0's listeners (UCX's, under the leaders' links) wait for them, and the stranger knocks
# first.
GROUPS_MADE = 3
LATE_S = 0.5


def test_strangers_on_every_listening_port_change_nothing(hosts) -> None:
    # A stranger on each host connects to every port that host listens on (but the store's)
    # as it opens; every group is made and exact all the same.
    port = next_port()
    strangers = []
    with tempfile.TemporaryDirectory(prefix="strangers-") as scratch:
        stop = Path(scratch, "stop")
        for host in hosts.hosts:
            report = Path(scratch, f"stranger{host.index}.json")
            strangers.append((report, hosts.popen(host.index, [
                sys.executable, str(Path(__file__).with_name("stranger.py")), str(report),
                str(stop), str(port)])))  # fmt: skip
        time.sleep(1)  # each has read its host's ports before the job opens any
        try:
            job = run_job(hosts, "make_groups", str(GROUPS_MADE), master_port=port,
                          env={"DC_JOB_LATE": f"host1:{LATE_S}"})  # fmt: skip
        finally:
            stop.write_text("")
            for _, process in strangers:
                process.wait(timeout=30)
        visited = [json.loads(report.read_text())["visited"] for report, _ in strangers]
    check_ran_everywhere(job, WORLD)
    assert job.returncodes == [0, 0], job.report()
    for rank, result in job.results.items():
        assert result["wrong"] == [], (rank, result)
    for host, ports in enumerate(visited):
        hellos = [p for p, done in ports.items() if "fake hello" in done]
        assert hellos, (host, ports)  # it did reach listeners, with its whole visit
