"""The perftest a user runs (``python -m dummy_collectives.perf``) measures every point on both
backends and checks every result; tiny sizes and rounds, so it shows the command works, not how
fast anything is."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import support

from dummy_collectives import perf

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def perf_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "dummy_collectives.perf", *args]


@support.requires_dummy
def test_every_collective_and_size_is_timed_on_both_backends_and_checked(tmp_path: Path) -> None:
    rows_file = tmp_path / "rows.json"
    plot = ["--plot", str(tmp_path / "perf.png")] if HAS_MATPLOTLIB else []
    command = perf_command("--world-sizes", "2", "--collectives", ",".join(perf.COLLECTIVES),
                           "--sizes", "4,4K", "--rounds", "2", "--warmup", "1",
                           "--round-ms", "1", "--json", str(rows_file), *plot)  # fmt: skip
    done = support.run_subprocess(command, support.subprocess_env(), timeout_s=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(rows_file.read_text())
    points = {(row["collective"], row["size"], row["world_size"]) for row in rows}
    sized = {(name, size, 2) for name in perf.COLLECTIVES for size in (4, 4096)}
    expected = {p for p in sized if p[0] != "barrier"} | {("barrier", 0, 2)}
    assert points == expected and len(rows) == len(expected), rows
    for row in rows:
        assert row["correct"] and row["dummy"]["correct"] and row["gloo"]["correct"], row
        for backend in ("dummy", "gloo"):
            timing = row[backend]
            assert 0 < timing["min_us"] <= timing["median_us"] <= timing["max_us"], row
        assert row["ratio"] > 0 and row["iterations"] >= 1, row
    table_lines = [line for line in done.stdout.splitlines() if line.endswith(" ok")]
    assert len(table_lines) == len(expected), done.stdout
    assert "WRONG" not in done.stdout, done.stdout
    if HAS_MATPLOTLIB:
        assert (tmp_path / "perf.png").stat().st_size > 0


@pytest.mark.skipif(HAS_MATPLOTLIB, reason="checks the message where matplotlib is missing")
def test_plot_without_matplotlib_stops_before_measuring_and_says_what_to_install() -> None:
    done = support.run_subprocess(
        perf_command("--plot", "perf.png"), support.subprocess_env(), timeout_s=120
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--plot needs matplotlib: pip install matplotlib" in done.stderr, done.stderr
    assert "measuring" not in done.stdout, done.stdout


def test_sizes_take_binary_suffixes_and_refuse_anything_else() -> None:
    parse = perf.comma_list(perf.parse_size)
    assert parse("4,64K,1M,2MiB,1G") == (4, 65536, 1 << 20, 2 << 20, 1 << 30)
    for text in ("0", "4X", "K", "-1", "1.5M"):
        with pytest.raises(Exception, match="not a size"):
            perf.parse_size(text)


def test_split_inputs_round_up_to_whole_chunks() -> None:
    assert perf.element_count("allreduce", 5, 3) == 2  # whole float32 elements
    assert perf.element_count("reduce_scatter", 4, 3) == 3
    assert perf.element_count("alltoall", 40, 4) == 12
