"""The kit's own tests: deliberately broken backends (broken_backends.py) must fail the right
rows, with messages that say what went wrong; the rest checks the pieces without ranks.

Run: ``python -m pytest conformance/tests`` (about 2 minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from c10d_conformance import reference, report, runner, suite

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def kit(*args: str) -> tuple[int, dict[str, Any]]:
    """Runs ``python -m c10d_conformance ARGS --json`` with this folder importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "c10d_conformance", *args, "--distributed-test", "none", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout)


def rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["rows"]}


def test_a_wrong_sum_fails_the_sum_rows_only() -> None:
    code, result = kit(
        "--backend", "broken_sum", "--module", "broken_backends",
        "--only", "all_reduce:SUM,all_reduce:MAX,reduce:SUM,broadcast,DDP",
    )  # fmt: skip
    assert code == 0  # it ran: the matrix says the rest
    got = rows(result)
    sum_row = got["all_reduce:SUM"]
    assert (sum_row["cell"], sum_row["declared"]) == ("FAIL", True)
    # Which call, which dtype and size, which rank, what it got, what gloo gives, where.
    assert "all_reduce(SUM) float32 x1: rank 0 got [0.0]" in sum_row["message"]
    assert "gloo gives [-1.0]" in sum_row["message"]
    assert "first difference at index 0" in sum_row["message"]
    assert got["all_reduce:MAX"]["cell"] == "pass"
    assert got["broadcast"]["cell"] == "pass"
    assert got["DDP"]["cell"] == "FAIL"  # DDP sums gradients
    # reduce is not declared (CAPABILITIES) and the wrapper lacks it: "-", saying why.
    assert got["reduce:SUM"]["cell"] == "-"
    assert "reduce(SUM, dst=1)" in got["reduce:SUM"]["message"]
    assert "declared but fail: all_reduce:SUM, DDP" in result["summary"]


@pytest.mark.parametrize(
    ("backend", "row", "where", "scale"),
    [
        # A hang becomes a HUNG row saying where each rank was; the next row runs on new ranks.
        ("broken_hang", "all_gather", "torch.distributed.all_gather (from check_all_gather)", 0.25),
        # A lost timeout: the collective on a group with a 2 s timeout never returns.
        ("broken_timeout", "group timeout", "torch.distributed.all_reduce (from "
         "check_group_timeout)", 0.4),
    ],
)  # fmt: skip
def test_a_hang_becomes_a_hung_row_and_the_next_row_runs(
    backend: str, row: str, where: str, scale: float
) -> None:
    _, result = kit(
        "--backend", backend, "--module", "broken_backends",
        "--only", f"{row},barrier", "--deadline-scale", str(scale),
    )  # fmt: skip
    got = rows(result)
    assert got[row]["cell"] == "HUNG", got[row]
    assert f"rank 0 in {where}" in got[row]["message"]
    assert "did not finish within" in got[row]["message"]
    assert got["barrier"]["cell"] == "pass"


def test_gloo_passes_what_it_can_and_strict_exits_1_on_declared_failures() -> None:
    code, result = kit("--backend", "gloo", "--only", "all_reduce:AVG,all_reduce:PREMUL_SUM")
    assert code == 0
    got = rows(result)
    assert got["all_reduce:AVG"]["cell"] == "pass"
    assert got["all_reduce:PREMUL_SUM"]["cell"] == "FAIL"
    assert "Cannot use ReduceOp.PREMUL_SUM with Gloo" in got["all_reduce:PREMUL_SUM"]["message"]
    assert result["declared"] is None
    code, _ = kit("--backend", "gloo", "--only", "all_reduce:PREMUL_SUM", "--strict")
    assert code == 1


def test_a_module_that_does_not_import_is_a_usage_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "c10d_conformance", "--backend", "x", "--module", "no_such_mod"],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--module no_such_mod: cannot import it" in proc.stderr


@pytest.mark.parametrize(
    ("caps", "need", "ok"),
    [
        (None, "reduce", True),
        (frozenset({"all_reduce:SUM"}), "all_reduce:SUM", True),
        (frozenset({"all_reduce:SUM"}), "all_reduce:MAX", False),
        (frozenset({"all_reduce"}), "all_reduce:MAX", True),
        (frozenset({"all_reduce:SUM"}), "all_reduce", True),
    ],
)
def test_supports(caps: frozenset[str] | None, need: str, ok: bool) -> None:
    assert suite.supports(caps, need) is ok


def test_cells_mark_declared_failures_and_undeclared_passes() -> None:
    def row(status: str, declared: bool) -> suite.Row:
        return suite.Row("x", "s", 2, declared, status, "why")

    assert report.cell(row(suite.FAIL, True)) == "FAIL"
    assert report.cell(row(suite.HUNG, True)) == "HUNG"
    assert report.cell(row(suite.PASS, False)) == "pass*"
    assert report.cell(row(suite.FAIL, False)) == "-"
    text = report.matrix([row(suite.FAIL, True), row(suite.PASS, False)], "header")
    assert "declared but fail: x" in text


def test_where_hung_reads_a_faulthandler_dump() -> None:
    dump = (
        "Thread 0x00007f (most recent call first):\n"
        '  File "/x/runner.py", line 90 in orphan_watch\n\n'
        "Current thread 0x00007e (most recent call first):\n"
        '  File "/t/broken_backends.py", line 50 in allgather\n'
        '  File "/t/distributed_c10d.py", line 4000 in _all_gather_impl\n'
        '  File "/t/distributed_c10d.py", line 3900 in all_gather\n'
        '  File "/k/checks.py", line 200 in run\n'
        '  File "/k/checks.py", line 180 in check_all_gather\n'
        '  File "/k/runner.py", line 120 in _rank_main\n'
    )
    assert runner.where_hung(dump) == "torch.distributed.all_gather (from check_all_gather)"
    assert runner.host_of(3, 4, 2) == 1 and runner.host_of(1, 4, 2) == 0


def test_compare_with_lists_the_rows_the_reference_passes_and_this_run_does_not(
    tmp_path: Path,
) -> None:
    ran = [("barrier", 2), ("all_reduce:SUM", 2), ("all_reduce:SUM", 3)]
    ran += [("all_reduce:PREMUL_SUM", 2), ("DDP", 2)]

    def result(backend: str, fails: dict[tuple[str, int], str], upto: int = 5) -> dict[str, Any]:
        def row(name: str, ws: int) -> dict[str, Any]:
            status = "fail" if (name, ws) in fails else "pass"
            message = fails.get((name, ws), "")
            return {"name": name, "world_size": ws, "status": status, "message": message}

        return {"backend": backend, "rows": [row(n, w) for n, w in ran[:upto]]}

    premul = "Cannot use ReduceOp.PREMUL_SUM with Gloo"
    gloo = result("gloo", {("all_reduce:PREMUL_SUM", 2): premul})
    mine = result("mine", {("all_reduce:SUM", 3): "rank 1: got [1.0], gloo gives [2.0]"}, upto=4)
    assert reference.behind(gloo, mine) == [
        "ws=3 all_reduce:SUM: gloo pass, mine fail: rank 1: got [1.0], gloo gives [2.0]",
        "ws=2 DDP: gloo pass, mine not run",
    ]
    assert reference.behind(gloo, gloo) == []
    assert reference.behind(mine, gloo) == [
        f"ws=2 all_reduce:PREMUL_SUM: mine pass, gloo fail: {premul}"
    ]
    path = tmp_path / "gloo.json"
    path.write_text(json.dumps(gloo))
    assert reference.load(str(path)) == gloo
    path.write_text("{}")
    with pytest.raises(ValueError, match="no 'rows'"):
        reference.load(str(path))


def test_compare_with_exits_1_when_a_row_the_reference_passes_fails(tmp_path: Path) -> None:
    ref = tmp_path / "gloo.json"
    row = {"name": "all_reduce:SUM", "world_size": 2, "status": "pass", "message": ""}
    ref.write_text(json.dumps({"backend": "gloo", "rows": [row]}))
    code, result = kit(
        "--backend", "broken_sum", "--module", "broken_backends",
        "--only", "all_reduce:SUM", "--compare-with", str(ref),
    )  # fmt: skip
    assert code == 1
    assert result["behind"][0].startswith("ws=2 all_reduce:SUM: gloo pass, broken_sum FAIL: rank")
    ref.write_text("not json")
    proc = subprocess.run(
        [sys.executable, "-m", "c10d_conformance", "--backend", "gloo", "--compare-with", str(ref)],
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--compare-with" in proc.stderr and "cannot read it" in proc.stderr


def test_a_hang_after_a_rank_raised_says_the_error_first() -> None:
    raised = runner.RankAnswer(0, False, error_type="CallFailed", message="recv(): ValueError: no")
    hung = "hung: rank 2 in torch.distributed.send (from run) did not finish within 60 s"
    status, message, _ = suite.summarize(runner.Outcome([raised], hung=hung))
    assert status == suite.HUNG
    assert message == f"rank 0: recv(): ValueError: no; then {hung}"
    assert suite.summarize(runner.Outcome([], hung=hung))[:2] == (suite.HUNG, hung)
