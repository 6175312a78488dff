"""Every named cross-host algorithm, forced with ``DUMMY_COLLECTIVES_ALGO`` (``Options.algo``) on
every layout it applies to, with each engine between hosts (the leaders' links on UCX, gloo
alone), exact against a reference computed on each rank; the table a group
reports; rules that do not apply are skipped; bad selections are refused.

Groups span simulated hosts (``DUMMY_COLLECTIVES_HOST_ID``, as in test_across_hosts.py), so the
two-level path runs with its leaders' links on loopback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist

import dummy_collectives

pytestmark = [support.requires_dummy, support.requires_backend_module]

LAYOUTS = {"2x1": [0, 1], "3x1": [0, 1, 2], "2x2": [0, 0, 1, 1], "3+1": [0, 0, 0, 1],
           "1+3": [0, 1, 1, 1]}  # fmt: skip

# The engines between hosts (inter_host): UCX under the leaders' links (the default where it
# loads), or gloo for everything.
ENGINES = ["ucx", "gloo"]
# Algorithms that need the leaders' links.
NEED_LINKS = {"allreduce:segments", "broadcast:chain", "allreduce:device", "broadcast:device",
              "allgather:device"}  # fmt: skip

# Where each algorithm applies (csrc/hierarchy/algorithm_table.cpp, whyNot).
ONE_RANK_PER_HOST = {"2x1", "3x1"}
UNIFORM_SEVERAL = {"2x2"}
SEVERAL = {"2x2", "3+1", "1+3"}
APPLIES = {
    "allreduce:records": set(LAYOUTS),
    "allreduce:segments": ONE_RANK_PER_HOST,
    "allreduce:pieces": ONE_RANK_PER_HOST,
    "allreduce:ring": ONE_RANK_PER_HOST,
    "allreduce:rails": UNIFORM_SEVERAL,
    "allreduce:leaders": SEVERAL,
    "broadcast:record": set(LAYOUTS),
    "broadcast:chain": ONE_RANK_PER_HOST,
    "broadcast:engine": ONE_RANK_PER_HOST,
    "broadcast:pipeline": SEVERAL,
    "allgather:records": set(LAYOUTS),
    "allgather:swap": ONE_RANK_PER_HOST,
    "allgather:rails": UNIFORM_SEVERAL,
    "allgather:leaders": SEVERAL,
    # The path of CUDA tensors (in CUDA memory, folded on the device), forced on host tensors:
    # the same steps, testable without a GPU.
    "allreduce:device": set(LAYOUTS),
    "broadcast:device": set(LAYOUTS),
    "allgather:device": set(LAYOUTS),
}
CASES = [(name, layout, engine) for name, layouts in APPLIES.items() for layout in LAYOUTS
         for engine in ENGINES
         if layout in layouts and (engine != "gloo" or name not in NEED_LINKS)]  # fmt: skip

# Bytes a record carries by default (inter_host_inline_bytes); the cases stay within it for the
# record algorithms, and go well past it (pipelined chunks, segments, short last pieces) for the
# others.
RECORD_SIZES = [0, 4, 1000, 16 << 10]
# A broadcast's one-way record carries up to 1 MiB (kOneWayBytes): at that size the record is
# one message longer than a data piece of the links.
ONE_WAY_RECORD_SIZES = [*RECORD_SIZES, (1 << 20) - 1, 1 << 20]
DATA_SIZES = [4, 4 * 300_001, (5 << 20) + 12]


@contextlib.contextmanager
def spanning_group(
    hosts_of: Sequence[int], algo: str, engine: str = "ucx"
) -> Iterator[dist.ProcessGroup]:
    """A dummy group of every rank of the pool, rank r on simulated host ``hosts_of[r]``,
    running the algorithms ``algo`` selects between hosts on ``engine`` (inter_host)."""
    before = os.environ.get("DUMMY_COLLECTIVES_HOST_ID")
    os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"span{hosts_of[harness.rank()]}"
    options = dummy_collectives.Options(algo=algo, inter_host=engine)
    try:
        group = dist.new_group(backend="dummy", pg_options=options)
    finally:
        if before is None:
            del os.environ["DUMMY_COLLECTIVES_HOST_ID"]
        else:
            os.environ["DUMMY_COLLECTIVES_HOST_ID"] = before
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


def table_of(group: dist.ProcessGroup) -> list[str]:
    return list(group._get_backend(torch.device("cpu")).algorithms)


def check_allreduce(group: dist.ProcessGroup, world: int, nbytes: int) -> list[str]:
    """SUM of float32 (integer values: exact in any order) and MAX of int64."""
    rank = harness.rank()
    failures = []
    numel = nbytes // 4
    base = torch.arange(numel, dtype=torch.float32) % 1000
    got = base * (rank + 1)
    dist.all_reduce(got, group=group)
    expected = base * (world * (world + 1) // 2)
    if not torch.equal(got, expected):
        failures.append(f"float32 SUM of {nbytes} bytes: wrong at "
                        f"{(got != expected).nonzero().flatten()[:4].tolist()}")  # fmt: skip
    ints = (torch.arange(numel // 2, dtype=torch.int64) * 7919 + rank * 104729) % 1000003
    expected_max = torch.stack([(torch.arange(numel // 2, dtype=torch.int64) * 7919 + r * 104729)
                                % 1000003 for r in range(world)]).amax(dim=0)  # fmt: skip
    dist.all_reduce(ints, op=dist.ReduceOp.MAX, group=group)
    if not torch.equal(ints, expected_max):
        failures.append(f"int64 MAX of {nbytes} bytes: wrong")
    return failures


def check_broadcast(group: dist.ProcessGroup, world: int, nbytes: int) -> list[str]:
    rank = harness.rank()
    failures = []
    for root in range(world):
        expected = (torch.arange(nbytes, dtype=torch.int32) * 7 + root).to(torch.uint8)
        got = expected.clone() if rank == root else torch.full_like(expected, 255)
        dist.broadcast(got, src=root, group=group)
        if not torch.equal(got, expected):
            failures.append(f"broadcast of {nbytes} bytes from root {root}: wrong")
    return failures


def check_allgather(group: dist.ProcessGroup, world: int, nbytes: int) -> list[str]:
    """``nbytes``: the output's; each rank's input is its share."""
    rank = harness.rank()
    each = nbytes // world

    def input_of(r: int) -> torch.Tensor:
        return (torch.arange(each, dtype=torch.int32) * 13 + r * 101).to(torch.uint8)

    out = torch.full((world * each,), 255, dtype=torch.uint8)
    dist.all_gather_into_tensor(out, input_of(rank), group=group)
    failures = []
    if not torch.equal(out, torch.cat([input_of(r) for r in range(world)])):
        failures.append(f"all_gather_into_tensor of {nbytes} bytes: wrong")
    outs = [torch.full((each,), 255, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(outs, input_of(rank), group=group)
    if any(not torch.equal(outs[r], input_of(r)) for r in range(world)):
        failures.append(f"all_gather of {nbytes} bytes: wrong")
    return failures


CHECKS = {"allreduce": check_allreduce, "broadcast": check_broadcast,
          "allgather": check_allgather}  # fmt: skip


def forced(hosts_of: list[int], name: str, sizes: list[int], engine: str) -> dict[str, Any]:
    """Runs ``name`` forced at every size, returns the group's table and what was wrong."""
    collective, algorithm = name.split(":")
    world = len(hosts_of)
    with spanning_group(hosts_of, f"{collective}:@{algorithm}", engine) as group:
        failures: list[str] = []
        for nbytes in sizes:
            failures += CHECKS[collective](group, world, nbytes)
        return {"table": table_of(group), "failures": failures}


@pytest.mark.parametrize(("name", "layout", "engine"), CASES, ids=["-".join(c) for c in CASES])
def test_every_algorithm_on_every_layout_it_applies_to_is_exact(
    pool: support.PoolFactory, name: str, layout: str, engine: str
) -> None:
    hosts_of = LAYOUTS[layout]
    collective, algorithm = name.split(":")
    sizes = (ONE_WAY_RECORD_SIZES if name == "broadcast:record"
             else RECORD_SIZES if algorithm.startswith("record") else DATA_SIZES)  # fmt: skip
    results = pool(len(hosts_of)).run_ok(forced, hosts_of, name, sizes, engine)
    failures = [f"rank {r}: {f}" for r, result in enumerate(results) for f in result["failures"]]
    assert not failures, "\n".join(failures)
    for rank, result in enumerate(results):
        line = next(line for line in result["table"] if line.startswith(collective + ":"))
        # Forced everywhere it can carry: records up to their capacity, the rest at every size.
        assert f"@{algorithm} (DUMMY_COLLECTIVES_ALGO)" in line, (rank, line)
        if not algorithm.startswith("record"):
            assert line.count("@") == 1, (rank, line)


def default_tables(hosts_of: list[int], algo: str, engine: str = "ucx") -> list[str]:
    with spanning_group(hosts_of, algo, engine) as group:
        return table_of(group)


def test_without_links_the_algorithms_that_need_them_are_skipped(
    pool: support.PoolFactory,
) -> None:
    tables = pool(3).run_ok(default_tables, LAYOUTS["3x1"], "allreduce:@segments#broadcast:@chain",
                            "gloo")  # fmt: skip
    for line in tables[0]:
        assert "@segments" not in line and "@chain" not in line, line
    # The defaults without links: pieces below gloo's ring, the engine's broadcast.
    allreduce = next(line for line in tables[0] if line.startswith("allreduce:"))
    assert "@pieces" in allreduce and "@ring" in allreduce, allreduce
    assert "@engine" in next(line for line in tables[0] if line.startswith("broadcast:"))


def test_a_rule_that_does_not_apply_is_skipped_and_the_defaults_stay(
    pool: support.PoolFactory,
) -> None:
    hosts_of = LAYOUTS["2x2"]
    defaults = pool(4).run_ok(default_tables, hosts_of, "")
    skipped = pool(4).run_ok(default_tables, hosts_of, "allreduce:@segments#broadcast:@chain")
    assert skipped == defaults, (skipped, defaults)
    # The defaults: small messages with the agreement, the rest on the rails.
    allreduce = next(line for line in defaults[0] if line.startswith("allreduce:"))
    assert "@records" in allreduce and "@rails" in allreduce, allreduce


def test_a_later_rule_wins_where_rules_overlap(pool: support.PoolFactory) -> None:
    tables = pool(2).run_ok(default_tables, LAYOUTS["2x1"],
                            "allreduce:@pieces#allreduce:1m-inf:@ring")  # fmt: skip
    allreduce = next(line for line in tables[0] if line.startswith("allreduce:"))
    assert allreduce == ("allreduce: [0, 1M) @pieces (DUMMY_COLLECTIVES_ALGO); "
                         "[1M, inf] @ring (DUMMY_COLLECTIVES_ALGO)"), allreduce  # fmt: skip


@pytest.mark.parametrize(
    ("selection", "wrong"),
    [
        ("allreduce", "no algorithm"),
        ("allreduce:@bogus", "'bogus' is no allreduce algorithm"),
        ("reduce:@ring", "'reduce' is no collective"),
        ("allreduce:4k-1k:@ring", "'4k-1k' is no size range"),
        ("allreduce:@ring#", "an empty field"),
    ],
)
def test_a_bad_selection_is_refused_naming_the_rule(
    selection: str, wrong: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="algo must be .*DUMMY_COLLECTIVES_ALGO") as raised:
        dummy_collectives.Options(algo=selection)
    assert wrong in str(raised.value), raised.value
    monkeypatch.setenv("DUMMY_COLLECTIVES_ALGO", selection)
    with pytest.raises(ValueError, match="from the environment"):
        dummy_collectives.Options()
