"""The benchmark command runs end to end and writes its report (a smoke test, not a timing).

Speed targets live in the benchmark's own report (python -m benchmarks.bench), never in
a timed test: this only checks that the command works and reports what it measured.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
from pathlib import Path

import pytest
import support

from benchmarks.bench import host_launch, host_plans, host_targets, hosts, targets
from benchmarks.bench.cli import build_hosts_plan, build_plan, parser
from benchmarks.bench.host_layouts import HostLayout, parse_layout, parse_layouts, uniform
from benchmarks.bench.host_passes import summarize
from benchmarks.bench.plan import DIRECT, TORCHRUN, HostsPlan
from benchmarks.bench.rank_floor import rank_floor
from benchmarks.bench.results import Result, best_of_passes, measured, not_measured
from benchmarks.bench.timing import Timing, TimingConfig
from tools import namespaced_hosts


@support.requires_dummy
def test_bench_quick_writes_report(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "benchmarks.bench",
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
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=support.REPO_ROOT
    )
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
    command = [sys.executable, "-m", "benchmarks.bench", *args, "--out", str(tmp_path)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        cwd=support.REPO_ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


TINY = ("--quick", "--rounds", "1", "--no-plot")
HOSTS_QUICK = ("--hosts", "2", "--ranks-per-host", "2", *TINY)
HOSTS_LIMITS = ("--init-timeout", "120", "--timeout", "120")  # a broken run fails, never hangs


def _numbers(table: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``table``, as cells."""
    lines = table.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    rows = []
    for line in lines[first + 2 :]:  # after the head and the |---| line
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@support.requires_dummy
@needs_namespaces
def test_bench_across_hosts_reports_dummy_and_gloo(tmp_path: Path) -> None:
    """--hosts 2 --ranks-per-host 2 (the layout 2x2), ranks started directly: the report has
    the Across-hosts section (and not the one-host one) with medians for dummy and gloo at
    every size, and a verdict each."""
    _bench(tmp_path, *HOSTS_QUICK, *HOSTS_LIMITS, "--sizes", "4,64K", "--launch", "direct")
    report = (tmp_path / "report.md").read_text()
    assert "## Across hosts" in report and "### Layout 2x2 (2 hosts:" in report, report
    assert "## Results" not in report and "- launch: direct" in report, report
    across = json.loads((tmp_path / "results.json").read_text())["across_hosts"]
    assert across["launch"] == DIRECT and across["passes"] == 1, across
    (layout,) = across["layouts"]
    assert layout["layout"] == "2x2" and layout["ranks_per_host"] == [2, 2], layout
    points = layout["points"]
    assert [p["size"] for p in points] == [4, 64 << 10], points
    for point in points:
        assert point["world_size"] == 4 and point["passes"] == 1, point
        assert point["dummy_median_s"] > 0 and point["gloo_median_s"] > 0, point
        ratio = point["gloo_median_s"] / point["dummy_median_s"]
        assert point["ratio_median"] == point["ratio_min"] == pytest.approx(ratio), point
        assert point["dummy_busbw"] == pytest.approx(point["size"] / point["dummy_median_s"])
    assert [v["verdict"] for v in across["targets"]] != [], across["targets"]
    assert all(v["verdict"] in ("PASS", "FAIL") for v in across["targets"]), across["targets"]


@support.requires_dummy
@needs_namespaces
def test_bench_across_layouts_under_torchrun_reports_a_table_per_layout(tmp_path: Path) -> None:
    """The issue's run, tiny: two layouts (one uneven), each on hosts of its own, ranks started
    by torchrun, 2 passes. Each layout gets its table with both medians, the median ratio and
    its spread over the 2 passes, and verdicts naming the layout."""
    out = _bench(
        tmp_path,
        *("--layouts", "2x1,1+2", "--launch", "torchrun", "--collectives", "allreduce"),
        *("--sizes", "4", "--passes", "2", "--round-time", "0.02", *TINY, *HOSTS_LIMITS),
    )
    assert "[2x1] pass 2 of 2" in out and "[1+2] pass 2 of 2" in out, out[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "- launch: torchrun" in report, report
    tables = {}
    for label in ("2x1", "1+2"):
        title = f"### Layout {label} (2 hosts:"
        assert title in report, report
        tables[label] = _numbers(report[report.index(title) :])
    assert "host1 2 ranks (1-2)" in report, report
    for label, rows in tables.items():
        (row,) = [r for r in rows if r[0] == "allreduce"]
        collective, size, dummy, gloo, ratio, spread = row[:6]
        assert size == "4B" and dummy.endswith("s") and gloo.endswith("s"), (label, row)
        assert ratio.endswith("x") and float(ratio[:-1]) > 0, (label, row)
        low, high = (float(x) for x in spread.removesuffix("x").split("-"))
        assert low <= float(ratio[:-1]) <= high, (label, row)
        verdict, need, plan = row[-3:]
        assert verdict in ("PASS", "FAIL") and need.endswith("x"), (label, row)
        assert plan == "inline with the agreement", (label, row)  # the probe's TRACE line
    across = json.loads((tmp_path / "results.json").read_text())["across_hosts"]
    assert [r["layout"] for r in across["layouts"]] == ["2x1", "1+2"], across
    for layout in across["layouts"]:
        assert layout["passes_run"] == 2 and not layout["notes"], layout
        (point,) = layout["points"]
        assert point["passes"] == 2 and len(point["pass_ratios"]) == 2, point
    assert [(v["layout"], v["collective"], v["size"]) for v in across["targets"]] == [
        ("2x1", "allreduce", 4),
        ("1+2", "allreduce", 4),
    ]


@support.requires_dummy
@needs_namespaces
def test_bench_across_hosts_turns_failing_ranks_into_a_note(tmp_path: Path) -> None:
    """A knob passed on to the ranks that makes every dummy rank raise at group creation,
    under torchrun: the layout ends (no hang, no second pass) and the report says why."""
    env = {"DUMMY_COLLECTIVES_INTER_HOST": "nccl"}  # refused across hosts (_hierarchy.py)
    _bench(tmp_path, *HOSTS_QUICK, *HOSTS_LIMITS, "--sizes", "4", "--passes", "2", env=env)
    report = (tmp_path / "report.md").read_text()
    assert "DUMMY_COLLECTIVES_INTER_HOST=nccl" in report, report
    assert "failed" in report and "inter_host='nccl' is not available" in report, report
    assert "2x2: the layout ended with pass 1: 1 not run" in report, report
    assert "Nothing was measured (see the notes)." in report, report


def test_bench_across_hosts_fails_with_the_reason_where_namespaces_cannot_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(namespaced_hosts, "available", lambda: (False, "needs root (test)"))
    plan = build_plan(parser().parse_args(["--quick"]))
    assert hosts.run(HostsPlan(plan, (uniform(2, 1),)), tmp_path) == 1
    assert "needs root (test)" in capsys.readouterr().err
    assert not (tmp_path / "report.md").exists()


def _hosts_plan(*argv: str) -> HostsPlan | None:
    args = parser().parse_args(list(argv))
    return build_hosts_plan(args, build_plan(args))


def test_hosts_arguments_map_world_sizes_to_ranks_per_host() -> None:
    assert _hosts_plan("--quick") is None
    two = _hosts_plan("--hosts", "2", "--ranks-per-host", "2", "--link-rate", "1gbit")
    assert two is not None and two.plan.world_sizes == (4,), two
    assert two.layouts == (HostLayout((2, 2), "2x2"),) and two.launch == TORCHRUN
    assert two.link_rate == "1gbit" and two.plan.peers == ()
    assert two.plan.timeout_s == 300 and two.plan.init_timeout_s == 120
    # A slow link: 64 MiB at 10 Mbit/s is 54 s a call; a point must not be taken for a hang.
    slow = _hosts_plan("--hosts", "2", "--sizes", "64M", "--link-rate", "10mbit")
    assert slow is not None and slow.plan.timeout_s > 8 * 54 * 2, slow.plan
    by_world = _hosts_plan("--hosts", "2", "--world-sizes", "2,6", "--launch", "direct")
    assert by_world is not None and [x.label for x in by_world.layouts] == ["2x1", "2x3"]
    assert by_world.launch == DIRECT
    for bad in (
        ("--hosts", "3"),  # the default world size 2 is no multiple of 3
        ("--hosts", "1"),
        ("--link-rate", "1gbit"),  # without --hosts
        ("--launch", "direct"),  # without --hosts or --layouts
        ("--hosts", "2", "--link-rate", "fast"),
        ("--hosts", "2", "--ranks-per-host", "2", "--world-sizes", "2"),
        ("--hosts", "2", "--backends", "gloo"),
        ("--layouts", "2x2", "--hosts", "2"),
        ("--layouts", "2x2", "--world-sizes", "4"),
        ("--layouts", "2x2,3"),
    ):
        with pytest.raises(ValueError):
            _hosts_plan(*bad)


def test_layouts_argument_gives_each_layout_its_world_size() -> None:
    plan = _hosts_plan("--layouts", "2x1,3x1,2x2,3+1,1+3", "--link-rate", "10mbit")
    assert plan is not None
    assert [x.label for x in plan.layouts] == ["2x1", "3x1", "2x2", "3+1", "1+3"]
    assert [x.counts for x in plan.layouts][-2:] == [(3, 1), (1, 3)]
    assert plan.plan.world_sizes == (2, 3, 4), plan.plan  # 2x2, 3+1 and 1+3 are all 4 ranks
    # The slowest link bound is the layout with the most hosts: 2(H-1)/H grows with H.
    three = host_targets.link_bound_s(max(plan.plan.sizes), 3, 10e6)
    assert plan.plan.timeout_s >= 4 * three * (plan.plan.timing.rounds + 3), plan.plan


def test_layout_parser_reads_uniform_and_per_host_layouts() -> None:
    assert parse_layout("2x2") == HostLayout((2, 2), "2x2")
    assert parse_layout(" 3X1 ") == HostLayout((1, 1, 1), "3x1")
    three_one = parse_layout("3+1")
    assert three_one == HostLayout((3, 1), "3+1") and three_one.world_size == 4
    assert three_one.ranks_by_host() == [[0, 1, 2], [3]]  # contiguous, as torchrun numbers
    assert parse_layout("1+3").ranks_by_host() == [[0], [1, 2, 3]]
    assert parse_layout("1+2+1").ranks_by_host() == [[0], [1, 2], [3]]
    assert three_one.describe() == "2 hosts: host0 3 ranks (0-2), host1 1 rank (3)"
    assert three_one.min_per_host == 1 and parse_layout("2+2").min_per_host == 2
    assert [x.label for x in parse_layouts("2x1, 3+1,,1+3")] == ["2x1", "3+1", "1+3"]
    assert uniform(2, 3) == HostLayout((3, 3), "2x3")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2x0", "gives no rank to host(s) [0, 1]"),
        ("3+0", "gives no rank to host(s) [1]"),
        ("1x4", "has 1 host; it needs >= 2 hosts"),
        ("0x2", "has 0 hosts"),
        ("4", "is a single host"),
        ("2*2", "neither HxL"),
        ("2x", "neither HxL"),
        ("3+", "neither HxL"),
        ("+1", "neither HxL"),
        ("2x2x2", "neither HxL"),
        ("a+b", "neither HxL"),
        ("300x1", "at most 253"),
    ],
)
def test_layout_parser_names_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=r"layout '.*'") as error:
        parse_layout(text)
    assert says in str(error.value), str(error.value)


def test_layouts_parser_refuses_an_empty_list_and_repeats() -> None:
    with pytest.raises(ValueError, match="no layout given"):
        parse_layouts(" , ")
    with pytest.raises(ValueError, match="layout '2\\+2' repeats '2x2'"):
        parse_layouts("2x2,2+2")


def _timed(backend: str, size: int, time_s: float, collective: str = "allreduce") -> Result:
    return measured(backend, collective, 4, size, size, Timing(time_s, time_s, (time_s,), 1))


def test_passes_give_medians_and_the_spread_of_the_per_pass_ratio() -> None:
    """Each backend's median over the passes, and the median of gloo/dummy taken within each
    pass (not the ratio of the medians), with its min and max."""
    times = [(1e-3, 3e-3), (2e-3, 3e-3), (1.5e-3, 6e-3), (4e-3, 2e-3), (1e-3, 1e-3)]
    passes = [[_timed("dummy", 4, d), _timed("gloo", 4, g)] for d, g in times]
    (point,) = summarize(passes)
    assert point.median_s("dummy") == pytest.approx(1.5e-3)
    assert point.median_s("gloo") == pytest.approx(3e-3)
    assert point.ratios == pytest.approx([3.0, 1.5, 4.0, 0.5, 1.0])
    assert point.ratio == pytest.approx(1.5) and point.passes == 5
    assert (point.ratio_min, point.ratio_max) == (pytest.approx(0.5), pytest.approx(4.0))
    data = point.to_dict()
    assert data["ratio_median"] == pytest.approx(1.5) and data["pass_ratios"] == point.ratios


def test_passes_keep_what_failed_passes_measured_and_say_how_many() -> None:
    failed = not_measured("gloo", "allreduce", 4, 4, "error", "rank 1 died")
    passes = [
        [_timed("dummy", 4, 1e-3), _timed("gloo", 4, 2e-3), _timed("dummy", 1024, 1e-3)],
        [_timed("dummy", 4, 3e-3), failed],  # gloo failed: no ratio from this pass
        [_timed("dummy", 4, 2e-3), _timed("gloo", 4, 3e-3)],
    ]
    small, big = summarize(passes)
    assert (small.size, big.size) == (4, 1024)
    assert small.median_s("dummy") == pytest.approx(2e-3) and small.passes == 2
    assert small.ratios == pytest.approx([2.0, 1.5]) and small.missing == {}
    assert big.median_s("gloo") is None and big.ratio is None and big.passes == 1
    (never,) = summarize([[failed], [failed]])
    assert never.median_s("gloo") is None and never.missing == {"gloo": "error: rank 1 died"}


def _verdict(
    layout: str,
    dummy_times: list[float],
    gloo_times: list[float],
    *,
    size: int = 4,
    collective: str = "allreduce",
    rate: float | None = None,
    plan: str | None = None,
) -> host_targets.LayoutVerdict:
    """The verdict on one point of ``layout`` measured in one pass per pair of times, dummy's
    debug log having noted ``plan`` there (None: not probed)."""
    passes = [
        [_timed("dummy", size, d, collective), _timed("gloo", size, g, collective)]
        for d, g in zip(dummy_times, gloo_times, strict=True)
    ]
    plans = {} if plan is None else {(collective, size): plan}
    (verdict,) = host_targets.evaluate(parse_layout(layout), summarize(passes), rate, plans)
    return verdict


def test_targets_per_layout_hold_parity_everywhere_and_1_5x_where_hosts_share() -> None:
    """One rank per host anywhere: parity with gloo; every host >= 2 ranks: 1.5x, on the
    median ratio. The verdict names the layout, collective and size, the median and spread."""
    ahead = _verdict("2x1", [1e-3, 1e-3, 1e-3], [1.2e-3, 0.9e-3, 1.1e-3])  # 1.1x
    assert ahead.verdict == targets.PASS, ahead.parts
    assert (ahead.layout, ahead.collective, ahead.size) == ("2x1", "allreduce", 4)
    assert ahead.ratio_median == pytest.approx(1.1) and ahead.spread() == "0.90-1.20x"
    assert "median 1.10x gloo's speed over 3 passes, spread 0.90-1.20x" in ahead.parts[0]
    assert "need >= 1x: a host holds 1 rank" in ahead.parts[0], ahead.parts
    behind = _verdict("3+1", [1e-3, 1e-3, 1e-3], [0.9e-3, 0.95e-3, 1.5e-3])  # 0.95x
    assert behind.verdict == targets.FAIL, behind.parts
    shared = _verdict("2x2", [1e-3] * 3, [1.4e-3, 1.45e-3, 2e-3], collective="allgather")
    assert shared.verdict == targets.FAIL and shared.collective == "allgather", shared.parts
    assert "need >= 1.5x: every host holds >= 2 ranks" in shared.parts[0], shared.parts
    assert _verdict("2+3", [1e-3] * 3, [1.5e-3, 1.6e-3, 1.2e-3]).verdict == targets.PASS
    no_dummy = host_targets.evaluate(
        parse_layout("2x1"),
        summarize([[not_measured("dummy", "allreduce", 2, 4, "error", "x")]]),
        None,
    )
    assert no_dummy[0].verdict == targets.FAIL and "dummy not measured" in no_dummy[0].parts[0]


def test_targets_per_layout_on_shaped_links_need_85_percent_of_the_link_bound() -> None:
    """1 Gbit/s, allreduce from 1 MiB up: dummy's median time within bound / 0.85, besides
    the ratio target; smaller sizes and other collectives have the ratio target only."""
    rate, size = 1e9, 16 << 20
    bound = host_targets.link_bound_s(size, 2, rate)  # 2(H-1)/H = 1 for 2 hosts
    assert bound == pytest.approx(size * 8 / rate)
    gloo = [bound / 0.6] * 3
    fast = _verdict("2x1", [bound / 0.9, bound / 0.88, bound / 0.7], gloo, size=size, rate=rate)
    assert fast.verdict == targets.PASS, fast.parts
    assert "88.0% of the link bound" in fast.parts[1] and "need >= 85%" in fast.parts[1]
    slow = _verdict("2x1", [bound / 0.84] * 3, gloo, size=size, rate=rate)
    assert slow.verdict == targets.FAIL and "84.0% of the link bound" in slow.parts[1]
    # Three hosts must each send 2(3-1)/3 = 4/3 of the message.
    three = _verdict("3x1", [bound * 4 / 3 / 0.86] * 3, gloo, size=size, rate=rate)
    assert "86.0% of the link bound" in three.parts[1], three.parts
    small = _verdict("2x1", [1e-3] * 3, [2e-3] * 3, size=64 << 10, rate=rate)
    assert small.verdict == targets.PASS and len(small.parts) == 1, small.parts
    other = _verdict(
        "2x1", [bound] * 3, [2 * bound] * 3, size=size, rate=rate, collective="broadcast"
    )
    assert other.verdict == targets.PASS and len(other.parts) == 1, other.parts


def test_targets_allow_0_95x_only_where_dummy_runs_gloos_own_call() -> None:
    """The issue's allowance: one rank per host, dummy's debug log saying it ran gloo's own
    call, 0.95x; any other plan, or hosts that share, keep their target."""
    own = "one rank per host, whole message, gloo's own allreduce"
    dummy, gloo = [1e-3] * 3, [0.96e-3] * 3  # 0.96x
    assert _verdict("3x1", dummy, gloo).verdict == targets.FAIL
    allowed = _verdict("3x1", dummy, gloo, plan=own)
    assert allowed.verdict == targets.PASS and allowed.need == pytest.approx(0.95), allowed.parts
    assert f"dummy runs gloo's own call ({own})" in allowed.parts[0], allowed.parts
    assert allowed.plan == own
    assert _verdict("3x1", dummy, [0.94e-3] * 3, plan=own).verdict == targets.FAIL
    other = _verdict("3x1", dummy, gloo, plan="one rank per host, in segments on the links")
    assert other.verdict == targets.FAIL and other.need == pytest.approx(1.0), other.parts
    shared = _verdict("2x2", dummy, [1.45e-3] * 3, plan="gloo's own alltoall over every rank")
    assert shared.verdict == targets.FAIL and shared.need == pytest.approx(1.5), shared.parts


@pytest.mark.parametrize(
    ("layout", "collective", "ratio"),
    [
        ("2x1", "allreduce", 1.0),  # each host's link: N for gloo's ring and for any plan
        ("3x1", "allreduce", 1.0),
        ("2x2", "allreduce", 1.5),  # gloo's ring 2(4-1)/4 N = 1.5 N, two hosts N
        ("3+1", "allreduce", 1.5),
        ("2x1", "allgather", 1.0),
        ("3x1", "allgather", 1.0),  # a host receives 2 of 3 blocks either way
        ("2x2", "allgather", 1.5),  # gloo 3/4 of the output, a host's own half at least
        ("3+1", "allgather", 1.0),  # the 3-rank host sends its 3/4 either way
        ("2x1", "broadcast", 1.0),  # one rank receives across the link: N either way
        ("3+1", "broadcast", 1.0),  # the root's host holds three, the other one
        ("2x2", "broadcast", None),  # gloo's broadcast tree not modelled: its targets stand
        ("1+3", "broadcast", None),
        ("3x1", "broadcast", None),
    ],
)
def test_the_wires_ratio_is_gloos_link_bytes_over_the_least_a_plan_needs(
    layout: str, collective: str, ratio: float | None
) -> None:
    """gloo's ring's bytes over a host's link against the least any plan must move there."""
    got = host_targets.wire_ratio(collective, parse_layout(layout))
    assert got == (None if ratio is None else pytest.approx(ratio)), got


def test_shaped_links_cap_the_ratio_targets_at_0_95_of_the_wires_ratio() -> None:
    """From 1 MiB on a shaped link, where the wire's ratio is below a target, 0.95 of it is
    needed instead; below 1 MiB, unshaped, or not modelled, the targets stand."""
    rate, size = 1e9, 16 << 20
    dummy = [1e-2] * 3
    capped = _verdict("2x2", dummy, [1.45e-2] * 3, size=size, rate=rate)
    assert capped.verdict == targets.PASS and capped.need == pytest.approx(1.425), capped.parts
    assert "the link decides" in capped.parts[0] and "1.5x at best" in capped.parts[0]
    assert _verdict("2x2", dummy, [1.40e-2] * 3, size=size, rate=rate).verdict == targets.FAIL
    tie = _verdict("2x1", dummy, [0.97e-2] * 3, size=size, rate=rate, collective="allgather")
    assert tie.verdict == targets.PASS and tie.need == pytest.approx(0.95), tie.parts
    small = _verdict("2x2", dummy, [1.45e-2] * 3, size=64 << 10, rate=rate)
    assert small.verdict == targets.FAIL and small.need == pytest.approx(1.5), small.parts
    unshaped = _verdict("2x1", dummy, [0.97e-2] * 3, size=size, collective="allgather")
    assert unshaped.verdict == targets.FAIL and unshaped.need == pytest.approx(1.0)
    broadcast = _verdict("2x2", dummy, [1.45e-2] * 3, size=size, rate=rate, collective="broadcast")
    assert broadcast.verdict == targets.FAIL and broadcast.need == pytest.approx(1.5)


def test_the_plan_probe_reads_rank_0s_trace_line_of_each_point() -> None:
    """Rank 0's TRACE lines give each (collective, size) its notes: the last line of the
    collective's operation over the point's input or output element count; other ranks'
    lines, other sizes and other collectives do not."""
    prefix = "[host0] host0:1:1 [rank 0] DUMMY TRACE"
    lines = [
        f"{prefix} allreduce #1 of 1 Float elements with SUM (4 B) in group 0: inline with the "
        "agreement; done in 435.5 us",
        f"{prefix} allreduce #4 of 1048576 Float elements with SUM (4 MiB) in group 0: one rank "
        "per host, whole message, gloo's own allreduce; done in 28744.8 us",
        "[host1] host1:2:2 [rank 1] DUMMY TRACE allreduce #4 of 1048576 Float elements with SUM "
        "(4 MiB) in group 0: something else; done in 1.0 us",
        f"{prefix} _allgather_base #6 of 349525 Float elements (1.3 MiB) in group 0: one rank "
        "per host, all-to-all of the input; done in 31974.7 us",
        f"{prefix} broadcast #7 of 1 Float elements from root 0 (4 B) in group 0: done in 9.0 us",
        f"{prefix} broadcast #8 of 1 Float elements from root 0 (4 B) in group 0: one way, in the "
        "root's record; failed after 9.0 us",
    ]
    plans = host_plans.plans_from_lines(
        lines, ["allreduce", "allgather", "broadcast"], [4, 4 << 20], world_size=3
    )
    assert plans == {
        ("allreduce", 4): "inline with the agreement",
        ("allreduce", 4 << 20): "one rank per host, whole message, gloo's own allreduce",
        ("allgather", 4 << 20): "one rank per host, all-to-all of the input",
        ("broadcast", 4): "one way, in the root's record",
    }, plans
    assert host_targets.runs_gloos_own_call(plans[("allreduce", 4 << 20)])
    assert not host_targets.runs_gloos_own_call(plans[("allreduce", 4)])
    assert host_plans.probe_plan(build_plan(parser().parse_args([]))).backends == ("dummy",)


class _Exited:
    """A process as MessageFile sees it: ``poll`` returns its exit status (None: running)."""

    def __init__(self, code: int | None) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code


def test_a_torchrun_exiting_before_rank_0_is_done_is_the_failure(tmp_path: Path) -> None:
    """One torchrun per host: any of them exiting, even with 0, before rank 0's "done" is a
    failure named by host; a message already written is read first."""
    path = tmp_path / "messages.jsonl"
    path.write_text('["ready", []]\n')
    labels = ["torchrun on host0 (rank 0)", "torchrun on host1 (ranks 1-2)"]
    started = host_launch.Started([_Exited(None), _Exited(0)], labels, TORCHRUN)  # type: ignore[list-item]
    messages = host_launch.MessageFile(path, started)
    try:
        assert messages.get(timeout=1.0) == ["ready", []]
        kind, _, why = messages.get(timeout=1.0)
        assert kind == "error" and why == (
            "torchrun on host1 (ranks 1-2) exit 0 before rank 0 said it was done"
        )
        assert messages.errors == 0  # not a rank's own word: the notes add the output's tail
    finally:
        messages.close()
    # Ranks started directly: one that exited cleanly is just done; the others may go on.
    direct = host_launch.Started([_Exited(None), _Exited(0)], ["rank 0", "rank 1"], DIRECT)  # type: ignore[list-item]
    messages = host_launch.MessageFile(path, direct)
    try:
        assert messages.get(timeout=1.0) == ["ready", []]
        with pytest.raises(queue.Empty):
            messages.get(timeout=0.2)
    finally:
        messages.close()


def test_a_torchruns_output_gives_its_workers_lines_and_the_first_failure() -> None:
    output = "\n".join(
        [
            "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
            "rank 2 measuring",
            "E1126 19:52:27.446000 7429 site-packages/torch/distributed/elastic/multiprocessing/"
            "api.py:1002] failed (exitcode: -11) local_rank: 0 (pid: 7434) of binary: python",
            "Traceback (most recent call last):",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
            "Root Cause (first observed failure):",
            "[0]:",
            "  rank      : 2 (local_rank: 0)",
            "  exitcode  : -11 (pid: 7434)  (SIGSEGV)",
            "  error_file: <N/A>",
            "  traceback : Signal 11 (SIGSEGV) received by PID 7434",
        ]
    )
    workers, cause = host_launch._torchrun_parts(output)
    assert workers == "rank 2 measuring", workers
    assert (
        cause
        == " (first failure it saw: rank 2 (local_rank: 0), exitcode -11 (pid: 7434) (SIGSEGV))"
    )
