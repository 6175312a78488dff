"""Jobs across hosts: the backend under test on hosts made of Linux namespaces.

Two hosts (``tools.namespaced_hosts``: each its own network namespace, tmpfs on
/dev/shm and hostname, on one bridge) run jobs of ``multihost_job.py`` started as a user starts
them, with ``torchrun --nnodes 2`` (or one process per rank where a host's ranks are not
numbered contiguously). A dummy group that spans the hosts runs its two-level collectives:
shared memory inside each host, gloo between them. Every job must leave each host's /dev/shm
empty. The random program and DDP also run against gloo (DC_TEST_BACKEND=gloo); what only dummy
promises (mismatches caught across hosts, a dead rank named on every host within 2 s) does not.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import support
import torch
from multihost_runner import check_ran_everywhere, check_slow_rank_named, next_port, run_job

from tools import namespaced_hosts

AVAILABLE, WHY = namespaced_hosts.available()
pytestmark = [
    pytest.mark.skipif(not AVAILABLE, reason=f"hosts cannot be made here: {WHY}"),
    pytest.mark.slow,
]

DETECT_WITHIN_S = 2.0


@pytest.fixture(scope="module")
def hosts() -> Iterator[namespaced_hosts.NamespacedHosts]:
    with namespaced_hosts.NamespacedHosts(2) as made:
        yield made


@support.compares_with_gloo
def test_random_program_matches_gloo_on_2_hosts_of_2(hosts) -> None:
    job = run_job(hosts, "random_program", "5", "300", env={"DUMMY_COLLECTIVES_DEBUG": "INFO"})
    check_ran_everywhere(job, 4)
    assert job.returncodes == [0, 0], job.report()
    names = {r: res["hostname"] for r, res in job.results.items()}
    assert names[0] == names[1] != names[2] == names[3], names
    if support.IS_DUMMY:
        assert job.results[0]["hosts"] == [[0, 1], [2, 3]]
        # A host level whose ranks share cores (a core per host where the machine has fewer
        # than 4) sleeps where a one-host group would yield: its waits are often on the link.
        decided = re.findall(r"host level: ranks share cores: (yes|no) .*; a wait spins \d+ us "
                             r"before it (sleeps|yields)", job.output)  # fmt: skip
        assert len(decided) >= 4, job.report()  # every rank's default group, at least
        assert all((how == "sleeps") == (shared == "yes") for shared, how in decided), decided
    support.assert_no_failures([job.results[r]["failures"] for r in range(4)])
    assert all(job.results[r]["compared"] > 100 for r in range(4)), job.results


# The leaders' own links (on UCX, the default); and the records and data through gloo.
LINKS = {"links": None, "gloo": {"DUMMY_COLLECTIVES_INTER_HOST": "gloo"}}


@support.compares_with_gloo
@pytest.mark.parametrize("records", list(LINKS))
def test_random_program_matches_gloo_on_2_hosts_of_1(hosts, records) -> None:
    # One rank per host: up to 256 KiB ride with the agreement, larger messages cross hosts
    # whole, in one operation (no pipeline: nothing in-host to overlap), on the leaders' links
    # or through gloo.
    job = run_job(hosts, "random_program", "8", "300", nproc=(1, 1), env=LINKS[records])
    check_ran_everywhere(job, 2)
    assert job.returncodes == [0, 0], job.report()
    if support.IS_DUMMY:
        assert job.results[0]["hosts"] == [[0], [1]]
    support.assert_no_failures([job.results[r]["failures"] for r in range(2)])
    assert all(job.results[r]["compared"] > 100 for r in range(2)), job.results


@support.compares_with_gloo
@pytest.mark.parametrize("rate", [None, "1gbit"], ids=["unshaped", "1gbit"])
def test_random_program_matches_gloo_on_3_hosts_of_1(rate: str | None) -> None:
    # Three hosts of one rank: allreduces beyond the records fold pieces of 2 MiB segments on
    # the leaders' links, each host one piece (odd lengths leave short or empty pieces). On a
    # link measured below 1.5 Gbit/s at creation, allreduces beyond 64 KiB ride no record and
    # run gloo's own ring where it computes what dummy's kernels do, else whole messages as an
    # all-to-all of padded pieces (the debug log says which).
    env = {"DUMMY_COLLECTIVES_DEBUG": "INFO"}
    with namespaced_hosts.NamespacedHosts(3, rate=rate) as three:
        job = run_job(three, "random_program", "9", "200", nproc=(1, 1, 1), env=env)
    check_ran_everywhere(job, 3)
    assert job.returncodes == [0, 0, 0], job.report()
    if support.IS_DUMMY:
        assert job.results[0]["hosts"] == [[0], [1], [2]]
        slow = "Gbit/s, allreduces beyond 64 KiB ride no record and run gloo's own allreduce"
        fast = "Gbit/s, allreduce records as large as the others"
        said = [
            line for line in job.output.splitlines() if "the link between hosts measured" in line
        ]
        assert len(said) >= 3, job.report()  # every rank's group, at least the default one
        assert all((slow if rate else fast) in line for line in said), "\n".join(said)
        # Every rank's default group (subgroups of two hosts fold halves in 4 MiB segments).
        slow_plan, fast_plan = "allreduce as gloo's own on this slow link", "in 2 MiB segments"
        plan, not_plan = (slow_plan, fast_plan) if rate else (fast_plan, slow_plan)
        planned = [line for line in job.output.splitlines() if "on the leaders' links (" in line]
        assert sum(plan in line for line in planned) >= 3, "\n".join(planned)
        assert not any(not_plan in line for line in planned), "\n".join(planned)
    support.assert_no_failures([job.results[r]["failures"] for r in range(3)])


@support.compares_with_gloo
def test_random_program_matches_gloo_on_uneven_hosts_not_numbered_in_order(hosts) -> None:
    # 3 ranks + 1, the first host's ranks not contiguous: the leaders carry the cross-host
    # stage, and the program's subgroup (ranks 0 and 2) spans both hosts.
    job = run_job(hosts, "random_program", "6", "250", ranks_by_host=[[0, 1, 3], [2]])
    check_ran_everywhere(job, 4)
    assert job.returncodes == [0, 0, 0, 0], job.report()
    if support.IS_DUMMY:
        assert job.results[0]["hosts"] == [[0, 1, 3], [2]]
    support.assert_no_failures([job.results[r]["failures"] for r in range(4)])


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU; run on the GPU machine"
)
def test_cuda_tensors_across_hosts_sharing_one_gpu_are_exact(hosts) -> None:
    # Each host's ranks share the GPU (the CUDA path inside the host); between hosts the
    # tensors stay in CUDA memory where both hosts' UCX moves it (allreduce:device, ...).
    job = run_job(hosts, "cuda")
    check_ran_everywhere(job, 4)
    assert job.returncodes == [0, 0], job.report()
    for rank, result in job.results.items():
        assert result["wrong"] == [], (rank, result["wrong"])
    if support.IS_DUMMY:
        paths = {result["cuda_path"] for result in job.results.values()}
        assert len(paths) == 1, paths  # every rank took the same path
        path = paths.pop()
        if "@device" not in path:
            pytest.skip(f"exact, but not in CUDA memory between hosts here: {path}")


def test_ddp_across_hosts_trains_exactly_as_gloo(hosts) -> None:
    job = run_job(hosts, "ddp", "4")
    check_ran_everywhere(job, 4)
    assert job.returncodes == [0, 0], job.report()
    for rank, result in job.results.items():
        assert result["differ"] == [], (rank, result)
        assert result["moved"] == list(range(result["parameters"])), (rank, result)
    if support.IS_DUMMY:
        # A slow rank on host 1 (not its leader) is named by wait_summary on both hosts, alike.
        check_slow_rank_named(job)


@support.requires_dummy
@pytest.mark.parametrize("victim", [3, 2], ids=["a-host-peer", "a-host-leader"])
def test_a_rank_killed_on_another_host_is_named_everywhere_within_2s(hosts, victim) -> None:
    # torchrun's agent stops the victim's host peers at its next check after the death; the
    # job's survivors ignore that SIGTERM, so what is timed is the backend's own detection
    # (within 2 s), whenever the check falls. Rank 2 is its host's leader, the rank that
    # watches the store for the host: its peer must learn of the failure without it, or from
    # UCX's own error handling on the leaders' links.
    env = {"DC_JOB_TIMEOUT_S": "60"}
    job = run_job(hosts, "kill", str(victim), env=env)
    survivors = [r for r in range(4) if r != victim]
    assert sorted(job.results) == survivors, job.report()
    for rank in survivors:
        result = job.results[rank]
        assert result["iterations"] > 0, result
        assert result["error"] is not None, result
        assert f"rank {victim}" in result["error"], (rank, result["error"])
        assert "died" in result["error"] or "has died" in result["error"], (rank, result)
        assert result["after_kill_s"] is not None and result["after_kill_s"] < DETECT_WITHIN_S, (
            rank,
            result,
        )
    assert not job.leftover_shm, job.leftover_shm


def check_mismatch_results(result: dict[str, Any], usable: bool = True) -> None:
    """What every rank of the "mismatch" scenario must report, whatever the layout: the sizes
    that differ across hosts named, both calls leaving the tensors untouched, the group usable
    (or, ``usable=False``, failed with that mismatch as the reason)."""
    across = result["across_hosts"]
    assert across is not None and "ranks called different collectives" in across, result
    assert "allreduce #1 of 4 Float" in across and "allreduce #1 of 5 Float" in across, across
    assert result["across_hosts_untouched"], result
    assert result["within_host_untouched"], result
    if usable:
        assert result["usable_after"] and result["usable_after_error"] is None, result
    else:
        after = result["usable_after_error"]
        assert after is not None and "the group failed earlier" in after, result
        assert "broadcast #2" in after and "allreduce #2" in after, after


@support.requires_dummy
def test_mismatches_across_hosts_fail_every_rank_and_leave_the_group_usable(hosts) -> None:
    job = run_job(hosts, "mismatch")
    check_ran_everywhere(job, 4)
    assert job.returncodes == [0, 0], job.report()
    for result in job.results.values():
        check_mismatch_results(result)
        within = result["within_host"]
        assert within is not None and "called different collectives" in within, result
    # The host whose ranks disagreed names each rank's call; the other host names the host.
    assert "broadcast #2" in job.results[3]["within_host"], job.results[3]
    assert "ranks 2, 3 called different collectives" in job.results[0]["within_host"]


@support.requires_dummy
@pytest.mark.parametrize("records", list(LINKS))
def test_mismatches_between_hosts_of_one_rank_fail_both(hosts, records) -> None:
    # Each rank sends its record at its own size into whole-record slots: 4 and 5 floats never
    # overrun a receive (gloo would abort), and the group stays usable. A 1.2 MB allreduce met
    # by a broadcast (the root's one-way record): on the leaders' links the allreduce's leader
    # reads the broadcast's record and fails the group; through gloo they meet nobody, and both
    # compare their calls in the store. Either way every rank raises it, and the group stays
    # failed.
    job = run_job(hosts, "mismatch", nproc=(1, 1), env=LINKS[records])
    check_ran_everywhere(job, 2)
    assert job.returncodes == [0, 0], job.report()
    for result in job.results.values():
        check_mismatch_results(result, usable=False)
        other = result["within_host"]
        assert other is not None and "broadcast #2" in other and "allreduce #2" in other, result


@support.requires_dummy
@pytest.mark.parametrize(
    ("layout", "records"),
    [("2x1", "links"), ("3x1", "links"), ("2x1", "gloo"), ("2x2", "links")],
)
def test_alltoall_across_hosts_checks_split_sizes_and_moves_uneven_parts(
    layout: str, records: str
) -> None:
    # One rank per host numbered in host order: the sizes ride with the agreement and the parts
    # cross on the leaders' links; 2x2 and gloo's records: gloo's own all-to-all.
    count, per_host = int(layout[0]), int(layout[2])
    with namespaced_hosts.NamespacedHosts(count) as made:
        job = run_job(made, "alltoall", nproc=(per_host,) * count, env=LINKS[records])
    check_ran_everywhere(job, count * per_host)
    assert job.returncodes == [0] * count, job.report()
    for r, result in job.results.items():
        mismatch = result["mismatch"]
        assert mismatch is not None and "split sizes do not match across ranks" in mismatch, r
        assert "rank 0 sends 12 bytes to rank 1, which expects 8" in mismatch, (r, mismatch)
        assert result["mismatch_untouched"], (r, result)
        assert result["uneven"] is None and result["uneven_exact"], (r, result)
        assert result["usable_after_error"] is None and result["usable_after"], (r, result)


@support.compares_with_gloo
@pytest.mark.parametrize("count", [3, 4], ids=["3x1", "4x1"])
def test_broadcasts_along_the_chain_of_hosts_are_exact_and_relayed_as_they_land(
    count: int,
) -> None:
    # Three or more hosts of one rank pass a broadcast beyond the root's record along a chain
    # from the root's host; every host but the root's and the last sends each piece on to the
    # next as it lands. Four hosts: two relays in a row. Every root, so every host relays.
    env = {"DUMMY_COLLECTIVES_DEBUG": "TRACE"}
    with namespaced_hosts.NamespacedHosts(count) as made:
        job = run_job(made, "chain_broadcast", nproc=(1,) * count, env=env)
    check_ran_everywhere(job, count)
    assert job.returncodes == [0] * count, job.report()
    for r, result in job.results.items():
        assert result["wrong"] == [] and result["usable_after"], (r, result)
    if support.IS_DUMMY:
        traced = [line for line in job.output.splitlines()
                  if "DUMMY TRACE broadcast" in line]  # fmt: skip
        chained = [line for line in traced if "along a chain of the hosts" in line]
        relayed = [line for line in chained if re.search(r"relayed as its \d+ pieces land", line)]
        # 3 sizes x `count` roots, each broadcast relayed by count - 2 hosts.
        assert len(chained) == 3 * count * count, "\n".join(traced)
        assert len(relayed) == 3 * count * (count - 2), "\n".join(chained)


# Every path a broadcast takes (in the in-host records, shared from the root's record, after
# it) on hosts of one rank, uniform hosts and uneven ones; not the pairs that repeat a path
# (on hosts of one rank "mid" rides in the record as "sizes" does; 1+3's two roots meet
# nobody as 2x2's do). ~10 s a job.
ONE_WAY_MISMATCHES = [
    *[("2x1", (1, 1), v) for v in ("sizes", "large", "roots", "overlong")],
    *[("2x2", (2, 2), v) for v in ("sizes", "mid", "large", "roots")],
    *[("1+3", (1, 3), v) for v in ("sizes", "mid", "large")],
]


@support.requires_dummy
@pytest.mark.parametrize(
    "nproc, variant",
    [(nproc, variant) for _, nproc, variant in ONE_WAY_MISMATCHES],
    ids=[f"{variant}-{layout}" for layout, _, variant in ONE_WAY_MISMATCHES],
)
def test_broadcasts_that_differ_between_hosts_fail_every_rank(hosts, variant, nproc) -> None:
    # A broadcast's root's host sends its record one way: a host whose call differs raises at
    # the call and the root's host (done already) at its next one. Hosts that each think
    # themselves the root's each send and are done (nobody received anything): the leaders find
    # each other's record at the next collective, where every rank raises. All within seconds,
    # though the group's timeout is two minutes.
    job = run_job(hosts, "one_way_mismatch", variant, nproc=nproc)
    world = sum(nproc)
    check_ran_everywhere(job, world)
    assert job.returncodes == [0, 0], job.report()
    roots = {result["src"] for result in job.results.values()}
    for rank, result in job.results.items():
        errors = [e for e in (result["error"], result["next_error"]) if e is not None]
        assert errors and all("ranks called different collectives" in e for e in errors), result
        assert result["next_error"] is not None, result
        if variant == "roots":
            # Each rank got what it asked for: its host's first rank's data.
            assert result["error"] is None and result["untouched"] == (rank in roots), result
            named = [root for root in roots if f"from root {root}" in result["next_error"]]
            assert named and "allreduce #2" in result["next_error"], (roots, result)
        elif rank >= nproc[0]:  # not on the root's host
            assert result["error"] is not None and result["untouched"], result
        assert result["seconds"] < 10, result


@support.requires_dummy
def test_broadcasts_with_different_roots_through_gloo_fail_at_the_call(hosts) -> None:
    # With the records on gloo (inter_host gloo), each root's leader waits in gloo's
    # broadcast for receivers that never come: the leaders compare their calls in the store and
    # every rank raises at the broadcast, naming both roots.
    job = run_job(hosts, "one_way_mismatch", "roots", nproc=(1, 1),
                  env={"DUMMY_COLLECTIVES_INTER_HOST": "gloo"})  # fmt: skip
    check_ran_everywhere(job, 2)
    assert job.returncodes == [0, 0], job.report()
    roots = {result["src"] for result in job.results.values()}
    for result in job.results.values():
        assert result["error"] is not None, result
        assert all(f"from root {root}" in result["error"] for root in roots), (roots, result)
        assert result["next_error"] is not None, result
        assert result["seconds"] < 10, result


@support.requires_dummy
@pytest.mark.parametrize("nproc", [(2, 2), (3, 1)], ids=["2x2", "3+1"])
def test_a_broadcast_the_roots_host_disagrees_on_fails_every_rank_and_leaves_the_group_usable(
    hosts, nproc
) -> None:
    # The root's host knows before anything crosses hosts, and says so in its one-way record.
    job = run_job(hosts, "one_way_mismatch", "root_host", nproc=nproc)
    world = sum(nproc)
    check_ran_everywhere(job, world)
    assert job.returncodes == [0, 0], job.report()
    for result in job.results.values():
        assert result["error"] is not None, result
        assert "called different collectives" in result["error"], result
        assert result["untouched"], result
        assert result["next_error"] is None and result["next_sum"] == [world] * 3, result


@support.requires_dummy
def test_a_skipped_collective_times_out_on_every_host_naming_who_did_not_come(hosts) -> None:
    job = run_job(hosts, "skip", "3", env={"DC_JOB_TIMEOUT_S": "2"}, analyse_dumps=True)
    survivors = [0, 1, 2]
    for rank in survivors:
        result = job.results[rank]
        assert result["error"] is not None and "timed out" in result["error"], (rank, result)
        assert "waiting for ranks 3 to arrive" in result["error"], (rank, result)
        assert result["seconds"] < 2 + DETECT_WITHIN_S, (rank, result)
    # The flight recorder sees the whole group (not its per-host or rail levels), with the
    # same sequence numbers on every host, and torchfrtrace names the rank that did not come.
    frs = {rank: result["fr"] for rank, result in job.results.items()}
    assert {fr["ranks"] for fr in frs.values()} == {"[0, 1, 2, 3]"}, frs
    seq = len(frs[3]["entries"]) + 1  # the victim recorded everything before the skipped one
    for rank in survivors:
        assert frs[rank]["entries"][-1] == ["nccl:all_reduce", seq, "started"], frs
    assert "missing ranks: {3}" in job.fr_trace, job.fr_trace
    assert "collective: nccl:all_reduce" in job.fr_trace, job.fr_trace
    assert not job.leftover_shm, job.leftover_shm


@support.requires_dummy
def test_recovery_example_across_hosts_as_its_docstring_launches_it(hosts) -> None:
    """examples/recover_after_a_dead_rank.py on 2 hosts of 2 ranks, one launcher per host as
    its docstring says (host 0's hosts the store); rank 3 is SIGKILLed mid step. The 3
    survivors shrink to hosts of 2 and 1 ranks, finish with the replay's weights, and neither
    host's /dev/shm keeps anything."""
    example = support.REPO_ROOT / "examples" / "recover_after_a_dead_rank.py"
    port = next_port()
    procs = [
        hosts.popen(
            host.index,
            [support.sys.executable, str(example), "--nnodes", "2", "--node-rank",
             str(host.index), "--nproc-per-node", "2", "--master-addr", hosts.hosts[0].ip,
             "--master-port", str(port)],
            env={"GLOO_SOCKET_IFNAME": host.ifname, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for host in hosts.hosts
    ]  # fmt: skip
    waited = namespaced_hosts.wait_all(procs, 240)
    output = "".join(f"---- host {i} (exit {code}) ----\n{text}" for i, (code, text)
                     in enumerate(waited))  # fmt: skip
    assert [code for code, _ in waited] == [0, 0], output
    results = {}
    for line in output.splitlines():
        if ": RESULT " in line:
            result = json.loads(line.split(": RESULT ", 1)[1])
            results[result["rank"]] = result
    assert sorted(results) == [0, 1, 2], output
    for rank, result in results.items():
        assert result["lost"] == [3] and result["new_rank"] == rank, result
        assert result["steps"] == 10 and result["max_difference_from_replay"] <= 1e-12, result
    assert not any(hosts.shm_entries(h.index) for h in hosts.hosts), output
