"""The benchmark command runs end to end and writes its report (a smoke test, not a timing).

Speed targets live in the benchmark's own report (python -m dummy_collectives.bench), never in
a timed test: this only checks that the command works and reports what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import support

from dummy_collectives import namespaced_hosts
from dummy_collectives.bench import host_targets, hosts, targets
from dummy_collectives.bench.cli import build_hosts_plan, build_plan, parser
from dummy_collectives.bench.plan import HostsPlan
from dummy_collectives.bench.rank_floor import rank_floor
from dummy_collectives.bench.results import Result, best_of_passes, measured, not_measured
from dummy_collectives.bench.timing import Timing, TimingConfig


@support.requires_dummy
def test_bench_quick_writes_report(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "dummy_collectives.bench",
        "--quick",
        "--world-sizes",
        "2",
        "--sizes",
        "4,64K",
        "--rounds",
        "1",
        "--passes",
        "2",
        "--peers",
        "none",
        "--no-plot",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[pass 2 of 2]" in done.stdout, done.stdout[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "### allreduce, 2 ranks" in report, report
    assert "in each of 2 passes" in report, report
    results = json.loads((tmp_path / "results.json").read_text())
    measured = json.dumps(results)
    assert '"dummy"' in measured and '"gloo"' in measured, measured[:2000]
    # One result per point, holding the round of each pass.
    points = [
        (r["backend"], r["size"]) for r in results["results"] if r["collective"] == "allreduce"
    ]
    assert sorted(points) == sorted(set(points)) and len(points) == 4, points
    assert all(len(r["rounds_s"]) == 2 for r in results["results"]), results["results"]


def test_best_of_passes_keeps_each_points_fastest_pass() -> None:
    def timed(backend: str, size: int, rounds: list[float]) -> Result:
        timing = Timing(best_s=min(rounds), median_s=rounds[0], rounds_s=rounds, iters=10)
        return measured(backend, "allreduce", 2, size, size, timing)

    failed = not_measured("gloo", "allreduce", 2, 4, "error", "rank 1 died")
    first = [timed("dummy", 4, [5e-6, 6e-6]), failed, timed("dummy", 1024, [9e-6])]
    second = [
        timed("dummy", 4, [4e-6, 7e-6]),
        timed("gloo", 4, [2e-4]),
        timed("dummy", 1024, [8e-6]),
    ]
    merged = best_of_passes(first + second)
    assert [(r.backend, r.size) for r in merged] == [("dummy", 4), ("gloo", 4), ("dummy", 1024)]
    dummy4, gloo4, dummy1k = merged
    assert dummy4.time_s == 4e-6 and dummy4.rounds_s == [5e-6, 6e-6, 4e-6, 7e-6]
    assert dummy4.median_s == pytest.approx(5.5e-6)
    assert dummy4.busbw == pytest.approx(4 / 4e-6)  # bandwidth of the pass kept
    assert gloo4.ok and gloo4.time_s == 2e-4  # a failed pass gives way to a measured one
    assert dummy1k.time_s == 8e-6
    only_failed = best_of_passes([failed, failed])
    assert len(only_failed) == 1 and only_failed[0].note == "rank 1 died"


def _point(backend: str, time_s: float) -> Result:
    return Result(backend, "allreduce", 2, 4, nbytes=4, time_s=time_s)


def test_small_message_target_holds_the_time_above_the_c10d_floor_against_the_peers() -> None:
    """ANCHORS.md: the c10d call path alone is slower than Open MPI's whole allreduce, so the
    part of dummy's time above the floor (measured in the same run) is compared with it."""
    results = [_point("dummy", 5.5e-6), _point("gloo", 200e-6), _point("openmpi", 1.6e-6)]
    floor = Result("c10d-floor", "allreduce", 1, 4, nbytes=4, time_s=4.0e-6)
    (passing,) = targets.evaluate(results, "cpu", floor)
    assert passing.verdict == targets.PASS, passing.parts
    assert "1.50 us above the c10d floor" in passing.parts[1]
    slower = [_point("dummy", 5.8e-6), _point("gloo", 200e-6), _point("openmpi", 1.4e-6)]
    (failing,) = targets.evaluate(slower, "cpu", floor)
    assert failing.verdict == targets.FAIL, failing.parts
    # Without a floor the absolute times are compared.
    (absolute,) = targets.evaluate(results, "cpu", None)
    assert absolute.verdict == targets.FAIL, absolute.parts


def test_small_message_target_uses_the_floor_measured_at_the_world_size() -> None:
    """Where a floor was measured at the world size the time above it is held against the
    peers; the verdict also shows the time above the one-process floor. World sizes without
    one keep the one-process floor."""

    def point(backend: str, ws: int, time_s: float) -> Result:
        return Result(backend, "allreduce", ws, 4, nbytes=4, time_s=time_s)

    floor = Result("c10d-floor", "allreduce", 1, 4, nbytes=4, time_s=4.0e-6)
    four_ranks = Result("c10d-floor", "allreduce", 4, 4, nbytes=4, time_s=16.0e-6)
    four = [point("dummy", 4, 20e-6), point("gloo", 4, 900e-6), point("openmpi", 4, 7e-6)]
    (verdict,) = targets.evaluate(four, "cpu", floor, [four_ranks])
    assert verdict.verdict == targets.PASS, verdict.parts
    assert "4.00 us above the 4-rank c10d floor" in verdict.parts[1], verdict.parts
    assert "16.00 us above the one-process floor" in verdict.parts[2], verdict.parts
    (held_to_one,) = targets.evaluate(four, "cpu", floor)
    assert held_to_one.verdict == targets.FAIL, held_to_one.parts
    two = [point("dummy", 2, 5e-6), point("gloo", 2, 200e-6), point("openmpi", 2, 1.5e-6)]
    (other_size,) = targets.evaluate(two, "cpu", floor, [four_ranks])
    assert "1.00 us above the c10d floor" in other_size.parts[1], other_size.parts
    two_ranks = Result("c10d-floor", "allreduce", 2, 4, nbytes=4, time_s=4.5e-6)
    (own_size,) = targets.evaluate(two, "cpu", floor, [four_ranks, two_ranks])
    assert "0.50 us above the 2-rank c10d floor" in own_size.parts[1], own_size.parts
    assert "1.00 us above the one-process floor" in own_size.parts[2], own_size.parts


def test_small_message_target_says_when_the_floor_puts_20x_gloo_out_of_reach() -> None:
    """Where gloo is less than 20x slower than the floor at that world size, no c10d backend
    can pass; the verdict says so and still fails. Elsewhere it says nothing of the kind."""

    def point(backend: str, time_s: float) -> Result:
        return Result(backend, "allreduce", 8, 4, nbytes=4, time_s=time_s)

    floor = Result("c10d-floor", "allreduce", 1, 4, nbytes=4, time_s=5.0e-6)
    eight_ranks = Result("c10d-floor", "allreduce", 8, 4, nbytes=4, time_s=160e-6)
    slow_gloo = [point("dummy", 170e-6), point("gloo", 2.4e-3), point("openmpi", 50e-6)]
    (verdict,) = targets.evaluate(slow_gloo, "cpu", floor, [eight_ranks])
    assert verdict.verdict == targets.FAIL, verdict.parts
    assert (
        "out of reach through c10d: the 8-rank c10d floor alone is only 15.0x faster than gloo"
        in verdict.parts[-1]
    ), verdict.parts
    slower_gloo = [point("dummy", 170e-6), point("gloo", 3.6e-3), point("openmpi", 50e-6)]
    (reachable,) = targets.evaluate(slower_gloo, "cpu", floor, [eight_ranks])
    assert reachable.verdict == targets.PASS, reachable.parts
    assert not any("out of reach" in part for part in reachable.parts), reachable.parts


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="the rank floor pins ranks to cores"
)
@pytest.mark.parametrize("world_size", [2, 3])
def test_rank_floor_is_measured_in_rank_processes_of_its_own(world_size: int) -> None:
    """FakeProcessGroup ranks (two: a core each on the 2-core machine; three: more than its
    cores) run the timing protocol together; the result is a time per call (one call a turn)."""
    config = TimingConfig(rounds=2, round_time=0.02, warmup=2)
    result = rank_floor(world_size, config)
    assert result.ok, result.note
    assert result.world_size == world_size and result.backend == "c10d-floor"
    # A time per call, not per round (0.02 s): ~0.05-1 ms here, more while the machine is busy.
    assert 0 < result.time_s < config.round_time / 2, result
    assert result.iters >= 1 and len(result.rounds_s) == config.rounds, result


def test_cuda_targets_hold_busbw_against_gloo_and_one_rank_against_nccl() -> None:
    """The CUDA issue's targets: >= 100x gloo's busbw at 64 MiB with 2+ ranks on one GPU, and
    no slower than NCCL with 1 rank; smaller messages with 2+ ranks have no target."""
    big = 64 << 20

    def point(backend: str, ws: int, size: int, time_s: float) -> Result:
        return measured(backend, "allreduce", ws, size, size, Timing(time_s, time_s, (time_s,), 1))

    fast = [point("dummy", 2, big, 150e-6), point("gloo", 2, big, 30e-3)]
    slow = [point("dummy", 2, big, 600e-6), point("gloo", 2, big, 30e-3)]
    small = [point("dummy", 2, 4, 20e-6), point("gloo", 2, 4, 300e-6)]
    single = [point("dummy", 1, 4, 6e-6), point("nccl", 1, 4, 16e-6)]
    verdicts = [targets.evaluate(r, "cuda")[0].verdict for r in (fast, slow, small, single)]
    assert verdicts == [targets.PASS, targets.FAIL, targets.NA, targets.PASS], verdicts
    # With the device copy measured, 2 ranks must also come within 1.3x of two copies' time.
    copy = [point("memcpy", 1, big, 45e-6)]
    (near,) = targets.evaluate(fast[:1] + [point("gloo", 2, big, 30e-3)], "cuda", copies=copy)
    assert near.verdict == targets.FAIL, near
    assert "1.67x the copy bound of 90 us (need <= 1.3x)" in near.parts[1], near.parts
    within = [point("dummy", 2, big, 110e-6), point("gloo", 2, big, 30e-3)]
    assert targets.evaluate(within, "cuda", copies=copy)[0].verdict == targets.PASS


def test_large_message_target_needs_twice_the_faster_peer() -> None:
    """Issue 24: from 1 MiB up, >= 3x gloo's busbw and >= 2x the faster of DeepSpeed and Open
    MPI; the slower peer is shown, not held."""
    size = 16 << 20

    def point(backend: str, time_s: float) -> Result:
        return measured(backend, "allreduce", 8, size, size, Timing(time_s, time_s, (time_s,), 1))

    gloo, slow_peer = point("gloo", 12e-3), point("deepspeed", 20e-3)
    passing = [point("dummy", 4e-3), gloo, point("openmpi", 8.2e-3), slow_peer]
    (verdict,) = targets.evaluate(passing, "cpu")
    assert verdict.verdict == targets.PASS, verdict
    assert "2.05x Open MPI's busbw, the faster peer (need >= 2x)" in verdict.parts, verdict.parts
    assert "5.00x DeepSpeed's busbw" in verdict.parts, verdict.parts
    ahead_only = [point("dummy", 4e-3), gloo, point("openmpi", 6e-3)]
    assert targets.evaluate(ahead_only, "cpu")[0].verdict == targets.FAIL


# --- the multi-host mode ------------------------------------------------------------------

NAMESPACES, NO_NAMESPACES = namespaced_hosts.available()
needs_namespaces = pytest.mark.skipif(not NAMESPACES, reason=NO_NAMESPACES)


def _bench(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    command = [sys.executable, "-m", "dummy_collectives.bench", *args, "--out", str(tmp_path)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


HOSTS_QUICK = ("--hosts", "2", "--ranks-per-host", "2", "--quick", "--rounds", "1", "--no-plot")
HOSTS_LIMITS = ("--init-timeout", "120", "--timeout", "120")  # a broken run fails, never hangs


@support.requires_dummy
@needs_namespaces
def test_bench_across_hosts_reports_dummy_and_gloo(tmp_path: Path) -> None:
    """2 namespaced hosts x 2 ranks: the report has the Across-hosts section (and not the
    one-host one) with a time for dummy and gloo at every size, and a verdict each."""
    _bench(tmp_path, *HOSTS_QUICK, *HOSTS_LIMITS, "--sizes", "4,64K")
    report = (tmp_path / "report.md").read_text()
    assert "## Across hosts" in report and "### allreduce, 2 hosts x 2 ranks" in report, report
    assert "## Results" not in report, report
    across = json.loads((tmp_path / "results.json").read_text())["across_hosts"]
    assert across["hosts"] == 2 and across["ranks_per_host"] == [2], across
    points = across["points"]
    assert [p["size"] for p in points] == [4, 64 << 10], points
    for point in points:
        assert point["world_size"] == 4 and point["dummy_s"] > 0 and point["gloo_s"] > 0, point
        assert point["speedup_vs_gloo"] == pytest.approx(point["gloo_s"] / point["dummy_s"])
        assert point["dummy_cross_host_busbw"] == pytest.approx(point["size"] / point["dummy_s"])
    assert [v["verdict"] for v in across["targets"]] != [], across["targets"]
    assert all(v["verdict"] in ("PASS", "FAIL") for v in across["targets"]), across["targets"]


@support.requires_dummy
@needs_namespaces
def test_bench_across_hosts_turns_failing_ranks_into_a_note(tmp_path: Path) -> None:
    """A knob passed on to the ranks that makes every dummy rank raise at group creation:
    the run ends (no hang) and the report says why."""
    env = {"DUMMY_COLLECTIVES_INTER_HOST": "nccl"}  # refused across hosts (_hierarchy.py)
    _bench(tmp_path, *HOSTS_QUICK, *HOSTS_LIMITS, "--sizes", "4", env=env)
    report = (tmp_path / "report.md").read_text()
    assert "DUMMY_COLLECTIVES_INTER_HOST=nccl" in report, report
    assert "failed" in report and "inter_host='nccl' is not available" in report, report


def test_bench_across_hosts_fails_with_the_reason_where_namespaces_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(namespaced_hosts, "available", lambda: (False, "needs root (test)"))
    plan = build_plan(parser().parse_args(["--quick"]))
    assert hosts.run(HostsPlan(plan, 2, (1,)), tmp_path) == 1
    assert "needs root (test)" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def _hosts_plan(*argv: str) -> HostsPlan | None:
    args = parser().parse_args(list(argv))
    return build_hosts_plan(args, build_plan(args))


def test_hosts_arguments_map_world_sizes_to_ranks_per_host() -> None:
    assert _hosts_plan("--quick") is None
    two = _hosts_plan("--hosts", "2", "--ranks-per-host", "2", "--link-rate", "1gbit")
    assert two is not None and two.plan.world_sizes == (4,) and two.ranks_per_host == (2,)
    assert two.link_rate == "1gbit" and two.plan.peers == ()
    assert two.plan.timeout_s == 300 and two.plan.init_timeout_s == 120
    # A slow link: 64 MiB at 10 Mbit/s is 54 s a call; a point must not be taken for a hang.
    slow = _hosts_plan("--hosts", "2", "--sizes", "64M", "--link-rate", "10mbit")
    assert slow is not None and slow.plan.timeout_s > 8 * 54 * 2, slow.plan
    by_world = _hosts_plan("--hosts", "2", "--world-sizes", "2,6")
    assert by_world is not None and by_world.ranks_per_host == (1, 3)
    for bad in (
        ("--hosts", "3"),  # the default world size 2 is no multiple of 3
        ("--hosts", "1"),
        ("--link-rate", "1gbit"),  # without --hosts
        ("--hosts", "2", "--link-rate", "fast"),
        ("--hosts", "2", "--ranks-per-host", "2", "--world-sizes", "2"),
        ("--hosts", "2", "--backends", "gloo"),
    ):
        with pytest.raises(ValueError):
            _hosts_plan(*bad)


def _across(backend: str, size: int, time_s: float) -> Result:
    timing = Timing(time_s, time_s, (time_s,), 1)
    return measured(backend, "allreduce", 4, size, size, timing)


def test_across_hosts_unshaped_target_needs_dummy_1_5x_faster_than_gloo() -> None:
    results = [_across("dummy", 4, 100e-6), _across("gloo", 4, 160e-6)]  # 1.6x: pass
    results += [_across("dummy", 1 << 20, 2e-3), _across("gloo", 1 << 20, 2.8e-3)]  # 1.4x
    results += [_across("dummy", 128 << 20, 1.0), _across("gloo", 128 << 20, 1.1)]  # no target
    passing, failing, beyond = host_targets.evaluate(results, hosts=2, rate_bits_per_s=None)
    assert passing.verdict == targets.PASS, passing.parts
    assert "1.60x faster than gloo (need >= 1.5x)" in passing.parts[0], passing.parts
    assert failing.verdict == targets.FAIL and "1.40x" in failing.parts[0], failing.parts
    assert beyond.verdict == targets.NA, beyond.parts


def test_across_hosts_shaped_target_needs_80_percent_of_the_link_bound_and_to_beat_gloo() -> None:
    """1 Gbit/s, 2 hosts: 16 MiB must cross each link once (2(H-1)/H = 1), 134 ms at best."""
    rate, size = 1e9, 16 << 20
    bound = host_targets.link_bound_s(size, 2, rate)
    assert bound == pytest.approx(size * 8 / rate)
    fast = [_across("dummy", size, bound / 0.9), _across("gloo", size, bound / 0.6)]
    slow = [_across("dummy", size, bound / 0.7), _across("gloo", size, bound / 0.6)]
    behind = [_across("dummy", size, bound / 0.85), _across("gloo", size, bound / 0.86)]
    small = [_across("dummy", 64 << 10, 1e-3), _across("gloo", 64 << 10, 2e-3)]
    verdicts = [host_targets.evaluate(r, 2, rate)[0] for r in (fast, slow, behind, small)]
    assert [v.verdict for v in verdicts] == [targets.PASS, targets.FAIL, targets.FAIL, targets.NA]
    assert "90.0% of the link bound" in verdicts[0].parts[0], verdicts[0].parts
    assert "70.0% of the link bound" in verdicts[1].parts[0], verdicts[1].parts
    assert "0.99x gloo's speed (need > 1x)" in verdicts[2].parts[1], verdicts[2].parts
