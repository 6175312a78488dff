"""A random program of mixed collectives gives the same results on dummy as on gloo.

Every rank builds the same program from the same seed (``make_program``): hundreds of
collectives of every kind (c10d and functional, coalesced, rooted, point-to-point, batched
p2p, object collectives, barriers), over random dtypes, sizes (0, 1, a few, multi-KiB and a
few MiB), roots, ReduceOps, shapes, split sizes, on the whole world or on a subgroup that
leaves rank 1 out; some of them asynchronous on dummy, waited later in a random order. Each
op runs first on gloo (the harness's reference group, or a gloo subgroup) and then on dummy
with the same inputs, in the same processes, and the results must be equal: bitwise, except
AVG over more than two ranks (gloo and dummy may round the division differently), within
a few ulps.

Inputs are small integers (halves for floating types) so every SUM, PRODUCT, MIN, MAX and
PREMUL_SUM (with a power-of-two factor) is exact in every dtype, whatever the order of the
additions. Combinations gloo cannot run are left out or replaced: PREMUL_SUM runs on gloo as
a SUM of pre-multiplied inputs; AVG on integer types is not generated (gloo raises); complex
tensors only go through SUM and data movement (gloo has no complex reduce / gather); the
uneven list form of all_to_all (gloo wants equal sizes) is checked against the inputs each
rank can recompute.
"""

from __future__ import annotations

import dataclasses
import random
import time
import warnings
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed import ReduceOp

pytestmark = support.compares_with_gloo

WORLD_SIZE = 3
N_OPS = 800  # per seed
SUBGROUP = (0, 2)


def subgroup(world: int) -> tuple[int, ...]:
    """SUBGROUP, or the first and last rank of a world too small for it (two ranks)."""
    return SUBGROUP if world > max(SUBGROUP) else (0, world - 1)


FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)
DTYPES = (*FLOATS, *INTS, torch.bool, torch.complex64)
FLOAT_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM")
INT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
FUNCOL_OPS = {"SUM": "sum", "AVG": "avg", "PRODUCT": "product", "MIN": "min", "MAX": "max"}
FUNCOL_OPS.update(BAND="band", BOR="bor", BXOR="bxor")
PREMUL_FACTORS = (0.5, 2.0, 0.25)
# Whether point-to-point ops may receive from any source: not where the group spans hosts
# (DC_TEST_HOSTS here; test_multihost.py turns it off in its ranks).
ANY_SOURCE = not support.SIMULATED_HOSTS

# kind -> relative frequency
KINDS: dict[str, int] = {
    "all_reduce": 12,
    "all_reduce_coalesced": 4,
    "reduce": 5,
    "broadcast": 6,
    "all_gather": 5,
    "all_gather_into_tensor": 5,
    "all_gather_coalesced": 3,
    "gather": 4,
    "scatter": 4,
    "reduce_scatter": 4,
    "reduce_scatter_tensor": 5,
    "all_to_all_single": 6,
    "all_to_all": 4,
    "barrier": 2,
    "p2p": 8,
    "batch_p2p": 3,
    "funcol_all_reduce": 4,
    "funcol_all_gather": 3,
    "funcol_reduce_scatter": 3,
    "funcol_all_to_all": 3,
    "funcol_coalesced": 3,
    "objects": 2,
}
REDUCING = {
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "funcol_all_reduce",
    "funcol_reduce_scatter",
    "funcol_coalesced",
}
WORLD_ONLY = {"p2p", "batch_p2p", "objects"}
ASYNC_KINDS = {
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "all_to_all",
    "barrier",
    "p2p",
}


@dataclasses.dataclass
class Op:
    index: int
    kind: str
    dtype: torch.dtype
    numel: int  # elements per rank and "part" (meaning depends on the kind)
    cols: int  # > 1: 2-d tensors of shape (numel, cols)
    group: str  # "world" or "sub"
    op: str = "SUM"
    factor: float = 1.0
    root: int = 0  # a global rank
    uneven: bool = False
    splits: list[list[int]] = dataclasses.field(default_factory=list)  # [sender][receiver]
    pairs: list[tuple[int, int, int, bool]] = dataclasses.field(default_factory=list)
    count: int = 1  # tensors in coalesced calls
    asynchronous: bool = False


def _size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.08:
        return 0
    if roll < 0.2:
        return 1
    if roll < 0.6:
        return rng.randint(2, 64)
    if roll < 0.92:
        return rng.randint(65, 6000)  # up to tens of KiB
    if roll < 0.985:
        return rng.randint(6001, 40000)
    return rng.randint(300_000, 700_000)  # MiBs: streams through the 1 MiB slots


def make_program(seed: int, world: int, n_ops: int) -> list[Op]:
    """The same list on every rank (it depends only on the seed and world size)."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    weights = [KINDS[k] for k in kinds]
    program = []
    for index in range(n_ops):
        kind = rng.choices(kinds, weights)[0]
        group = "sub" if kind not in WORLD_ONLY and rng.random() < 0.2 else "world"
        members = list(subgroup(world)) if group == "sub" else list(range(world))
        n = len(members)
        if kind in REDUCING:
            dtype = rng.choice(DTYPES)
            if dtype == torch.complex64 and kind not in ("all_reduce", "all_reduce_coalesced"):
                dtype = torch.float32
        elif kind == "gather" or kind.startswith("funcol"):
            # Gloo's gather has no complex; nor do the functional collectives on gloo
            # (c10d's Python functions view complex tensors as real, the functional ones don't).
            dtype = rng.choice([d for d in DTYPES if d != torch.complex64])
        else:
            dtype = rng.choice(DTYPES)
        numel = _size(rng)
        if numel > 40000 and kind in ("all_to_all", "objects", "all_gather_coalesced"):
            numel = rng.randint(1000, 9000)
        cols = rng.choice((1, 1, 1, 3)) if numel < 40000 else 1
        op = Op(index, kind, dtype, numel, cols, group)
        if kind in REDUCING:
            if dtype == torch.complex64:
                op.op = "SUM"
            elif dtype in FLOATS:
                choices = FLOAT_OPS if not kind.startswith("funcol") else FLOAT_OPS[:-1]
                op.op = rng.choice(choices)
            else:
                op.op = rng.choice(INT_OPS)
            op.factor = rng.choice(PREMUL_FACTORS)
        op.root = rng.choice(members)
        if kind in ("all_to_all_single", "all_to_all", "funcol_all_to_all"):
            op.uneven = rng.random() < 0.5
            base = max(1, min(numel, 3000) // n)
            if op.uneven:
                op.splits = [[rng.randint(0, base) for _ in range(n)] for _ in range(n)]
            else:
                op.splits = [[base] * n for _ in range(n)]
        if kind in ("all_reduce_coalesced", "all_gather_coalesced", "funcol_coalesced"):
            op.count = rng.randint(1, 4)
        if kind == "p2p":
            src, dst = rng.sample(range(world), 2)
            # Any-source receive 30% of the time; gloo's recv_anysource fails on 0 elements
            # (enforce "offset < this->size" in gloo's unbound_buffer.cc).
            # Groups spanning hosts take no receive from any source (README).
            any_source = rng.random() < 0.3 and numel > 0 and ANY_SOURCE
            op.pairs = [(src, dst, rng.randint(0, 5), any_source)]
        if kind == "batch_p2p":
            shift = rng.randint(1, world - 1)
            op.pairs = [(r, (r + shift) % world, 0, False) for r in range(world)]
        op.asynchronous = kind in ASYNC_KINDS and rng.random() < 0.3
        program.append(op)
    return program


def make_input(
    seed: int, op: Op, rank: int, part: int = 0, rows: int | None = None
) -> torch.Tensor:
    """Rank ``rank``'s input number ``part`` of ``op`` (any rank can recompute it)."""
    n = op.numel if rows is None else rows
    shape: tuple[int, ...] = (n, op.cols) if op.cols > 1 else (n,)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + op.index * 131 + part * 17 + rank)
    if op.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).to(torch.bool)
    if op.dtype == torch.uint8:
        return torch.randint(0, 3, shape, generator=gen).to(torch.uint8)
    base = torch.randint(-2, 3, shape, generator=gen)
    if op.dtype == torch.complex64:
        imag = torch.randint(-2, 3, shape, generator=gen)
        return torch.complex(base.float() / 2, imag.float() / 2)
    if op.dtype.is_floating_point:
        return (base.to(torch.float64) / 2).to(op.dtype)
    return base.to(op.dtype)


def reduce_op(op: Op, gloo: bool) -> Any:
    if op.op == "PREMUL_SUM":
        return ReduceOp.SUM if gloo else dist._make_nccl_premul_sum(op.factor)
    return getattr(ReduceOp, op.op)


def prepared(op: Op, t: torch.Tensor, gloo: bool) -> torch.Tensor:
    """Gloo has no PREMUL_SUM: it gets the inputs pre-multiplied (exact: power-of-two)."""
    return t * op.factor if gloo and op.op == "PREMUL_SUM" else t


def empty_like_rows(t: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.zeros((rows, *t.shape[1:]), dtype=t.dtype)


class Runner:
    """Executes programs; one instance per rank and call."""

    def __init__(self, seed: int, world_gloo: Any, sub_dummy: Any, sub_gloo: Any) -> None:
        self.seed = seed
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.groups = {
            ("world", False): None,
            ("world", True): world_gloo,
            ("sub", False): sub_dummy,
            ("sub", True): sub_gloo,
        }
        self.failures: list[str] = []
        self.pending: list[tuple[Op, Any, list[torch.Tensor], list[torch.Tensor]]] = []
        self.counts: dict[str, int] = {}
        self.compared = 0  # result tensors compared
        self.elements = 0  # their elements
        self.sabotage = False  # corrupt dummy's results (to test the test)

    # ---------------------------------------------------------------- helpers

    def members(self, op: Op) -> list[int]:
        return list(subgroup(self.world)) if op.group == "sub" else list(range(self.world))

    def inp(self, op: Op, rank: int | None = None, part: int = 0, rows: int | None = None):
        return make_input(self.seed, op, self.rank if rank is None else rank, part, rows)

    def compare(self, op: Op, got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
        what = f"op {op.index} {op.kind} {op.op} {op.dtype} numel={op.numel} group={op.group}"
        if self.sabotage and got and got[0].numel() > 0:
            got = [got[0].clone().reshape(-1).flip(0).reshape(got[0].shape), *got[1:]]
            if got[0].dtype == torch.bool:
                got[0] = ~got[0]
            else:
                got[0] = got[0] + 1
        self.compared += len(got)
        self.elements += sum(t.numel() for t in got)
        if len(got) != len(want):
            self.failures.append(f"{what}: {len(got)} results, gloo gave {len(want)}")
            return
        tolerant = op.op == "AVG" and len(self.members(op)) > 2
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            check = support.check_close if tolerant else support.check_equal
            check(self.failures, f"{what} [{i}]", a, b)

    def flush(self, rng: random.Random) -> None:
        """Wait for the pending asynchronous dummy ops, in a random order."""
        order = list(range(len(self.pending)))
        rng.shuffle(order)
        for i in order:
            op, work, got, want = self.pending[i]
            if work is not None:
                work.wait()
            self.compare(op, got, want)
        self.pending.clear()

    # ---------------------------------------------------------------- one op

    def execute(self, op: Op, gloo: bool) -> tuple[Any, list[torch.Tensor]]:
        """Issue ``op`` on gloo or dummy; returns (work or None, result tensors)."""
        group = self.groups[(op.group, gloo)]
        members = self.members(op)
        n = len(members)
        me = members.index(self.rank)
        asyn = op.asynchronous and not gloo
        kind = op.kind
        x = self.inp(op)

        if kind == "all_reduce":
            t = prepared(op, x, gloo).clone()
            work = dist.all_reduce(t, op=reduce_op(op, gloo), group=group, async_op=asyn)
            return work, [t]
        if kind == "all_reduce_coalesced":
            ts = [prepared(op, self.inp(op, part=p), gloo).clone() for p in range(op.count)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dist.all_reduce_coalesced(ts, op=reduce_op(op, gloo), group=group)
            return None, ts
        if kind == "reduce":
            t = prepared(op, x, gloo).clone()
            work = dist.reduce(t, op.root, op=reduce_op(op, gloo), group=group, async_op=asyn)
            return work, [t] if self.rank == op.root else []
        if kind == "broadcast":
            t = x.clone()
            work = dist.broadcast(t, op.root, group=group, async_op=asyn)
            return work, [t]
        if kind == "all_gather":
            outs = [torch.zeros_like(x) for _ in range(n)]
            work = dist.all_gather(outs, x, group=group, async_op=asyn)
            return work, outs
        if kind == "all_gather_into_tensor":
            out = empty_like_rows(x, x.shape[0] * n)
            if op.index % 2:  # in place, as FSDP calls it: the input is our part of the output
                rows = x.shape[0]
                x = out.narrow(0, dist.get_rank(group) * rows, rows).copy_(x)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                work = dist.all_gather_into_tensor(out, x, group=group, async_op=asyn)
            return work, [out]
        if kind == "all_gather_coalesced":
            ins = [self.inp(op, part=p, rows=op.numel + p) for p in range(op.count)]
            outs = [[torch.zeros_like(t) for t in ins] for _ in range(n)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                dist.all_gather_coalesced(outs, ins, group=group)
            return None, [t for lst in outs for t in lst]
        if kind == "gather":
            outs = [torch.zeros_like(x) for _ in range(n)] if self.rank == op.root else None
            work = dist.gather(x, outs, op.root, group=group, async_op=asyn)
            return work, outs or []
        if kind == "scatter":
            ins = [self.inp(op, part=r) for r in range(n)] if self.rank == op.root else None
            out = torch.zeros_like(x)
            work = dist.scatter(out, ins, op.root, group=group, async_op=asyn)
            return work, [out]
        if kind == "reduce_scatter":
            ins = [prepared(op, self.inp(op, part=r), gloo) for r in range(n)]
            out = torch.zeros_like(x)
            work = dist.reduce_scatter(out, ins, op=reduce_op(op, gloo), group=group, async_op=asyn)
            return work, [out]
        if kind == "reduce_scatter_tensor":
            big = prepared(op, self.inp(op, rows=op.numel * n), gloo)
            out = empty_like_rows(big, op.numel)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                work = dist.reduce_scatter_tensor(
                    out, big, op=reduce_op(op, gloo), group=group, async_op=asyn
                )
            return work, [out]
        if kind == "all_to_all_single":
            send = op.splits[me]
            recv = [op.splits[j][me] for j in range(n)]
            t = self.inp(op, rows=sum(send))
            out = empty_like_rows(t, sum(recv))
            work = dist.all_to_all_single(
                out,
                t,
                recv if op.uneven else None,
                send if op.uneven else None,
                group=group,
                async_op=asyn,
            )
            return work, [out]
        if kind == "all_to_all":
            ins = [self.inp(op, part=j, rows=op.splits[me][j]) for j in range(n)]
            outs = [empty_like_rows(x, op.splits[j][me]) for j in range(n)]
            if gloo and op.uneven:
                # Gloo wants equal sizes: the expected result from the senders' inputs.
                want = [
                    make_input(self.seed, op, members[j], part=me, rows=op.splits[j][me])
                    for j in range(n)
                ]
                return None, want
            work = dist.all_to_all(outs, ins, group=group, async_op=asyn)
            return work, outs
        if kind == "barrier":
            return dist.barrier(group=group, async_op=asyn), []
        if kind == "p2p":
            (src, dst, tag, any_source) = op.pairs[0]
            if self.rank == src:
                if asyn:
                    return dist.isend(x, dst, group=group, tag=tag), []
                dist.send(x, dst, group=group, tag=tag)
                return None, []
            if self.rank == dst:
                t = torch.zeros_like(x)
                source = None if any_source else src
                if asyn:
                    return dist.irecv(t, source, group=group, tag=tag), [t]
                dist.recv(t, source, group=group, tag=tag)
                return None, [t]
            return None, []
        if kind == "batch_p2p":
            # Everybody sends its input to rank + shift and receives from rank - shift.
            (_, dst, _, _) = op.pairs[self.rank]
            src = next(s for (s, d, _, _) in op.pairs if d == self.rank)
            t = torch.zeros_like(x)
            ops = [dist.P2POp(dist.isend, x, dst, group), dist.P2POp(dist.irecv, t, src, group)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return None, [t]
        if kind.startswith("funcol"):
            g = group if group is not None else dist.group.WORLD
            name = FUNCOL_OPS.get(op.op, "sum")
            if kind == "funcol_all_reduce":
                return None, [funcol.all_reduce(x, name, g).wait()]
            if kind == "funcol_all_gather":
                return None, [funcol.all_gather_single(x, 0, g).wait()]
            if kind == "funcol_reduce_scatter":
                big = self.inp(op, rows=op.numel * n)
                return None, [funcol.reduce_scatter_single(big, name, 0, g).wait()]
            if kind == "funcol_all_to_all":
                send = op.splits[me]
                recv = [op.splits[j][me] for j in range(n)]
                t = self.inp(op, rows=sum(send))
                return None, [funcol.all_to_all_single(t, recv, send, g).wait()]
            if kind == "funcol_coalesced":
                ts = [self.inp(op, part=p, rows=(op.numel + p) * n) for p in range(op.count)]
                reduced = funcol.all_reduce_coalesced(ts, name, g)
                gathered = funcol.all_gather_single_coalesced(ts, g)
                scattered = funcol.reduce_scatter_single_coalesced(ts, name, [0] * len(ts), g)
                return None, [r.wait() for r in (*reduced, *gathered, *scattered)]
        if kind == "objects":
            obj = {"rank": self.rank, "op": op.index, "data": x.tolist()[: op.numel % 50]}
            gathered: list[Any] = [None] * self.world
            dist.all_gather_object(gathered, obj, group=group)
            box: list[Any] = [obj if self.rank == op.root else None]
            dist.broadcast_object_list(box, src=op.root, group=group)
            text = repr((gathered, box)).encode()
            return None, [torch.frombuffer(bytearray(text), dtype=torch.uint8)]
        raise AssertionError(kind)

    def run(self, program: list[Op]) -> None:
        rng = random.Random(self.seed + 1)
        for op in program:
            if self.rank not in self.members(op):
                continue
            self.counts[op.kind] = self.counts.get(op.kind, 0) + 1
            try:
                _, want = self.execute(op, gloo=True)
            except Exception as exc:
                raise RuntimeError(f"gloo failed to run {op}: {exc}") from exc
            try:
                work, got = self.execute(op, gloo=False)
            except Exception as exc:
                raise RuntimeError(f"dummy failed to run {op}: {exc}") from exc
            if op.asynchronous and work is not None:
                self.pending.append((op, work, got, want))
                self.counts["(asynchronous)"] = self.counts.get("(asynchronous)", 0) + 1
            else:
                self.compare(op, got, want)
            if self.pending and rng.random() < 0.25:
                self.flush(rng)
        self.flush(rng)


def run_random_program(seed: int, n_ops: int, sabotage: bool = False) -> dict[str, Any]:
    """Runs in every rank: the program of ``seed``; failures and what ran."""
    start = time.perf_counter()
    world = dist.get_world_size()
    sub_dummy = dist.new_group(list(subgroup(world)))
    sub_gloo = dist.new_group(list(subgroup(world)), backend="gloo")
    try:
        runner = Runner(seed, harness.reference_group(), sub_dummy, sub_gloo)
        runner.sabotage = sabotage
        runner.run(make_program(seed, world, n_ops))
        # Still in step afterwards.
        support.check_group_usable(runner.failures, "after the program")
    finally:
        for group in (sub_dummy, sub_gloo):
            if group != dist.GroupMember.NON_GROUP_MEMBER:
                dist.destroy_process_group(group)
    return {
        "failures": runner.failures,
        "counts": runner.counts,
        "compared": runner.compared,
        "elements": runner.elements,
        "seconds": time.perf_counter() - start,
    }


def test_program_is_the_same_on_every_rank() -> None:
    a = make_program(7, WORLD_SIZE, 200)
    b = make_program(7, WORLD_SIZE, 200)
    assert a == b
    kinds = {op.kind for op in a}
    assert kinds == set(KINDS), set(KINDS) - kinds


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_program_matches_gloo(pool: support.PoolFactory, seed: int) -> None:
    results = pool(WORLD_SIZE).run_ok(run_random_program, seed, N_OPS, timeout_s=240)
    support.assert_no_failures([r["failures"] for r in results])
    ran = sum(n for kind, n in results[0]["counts"].items() if kind in KINDS)
    assert ran > N_OPS // 2, results[0]["counts"]
    assert all(r["compared"] > N_OPS // 2 for r in results), [r["compared"] for r in results]
    print(
        f"seed {seed}: rank 0 ran {ran} ops in {results[0]['seconds']:.1f} s, compared "
        f"{results[0]['compared']} results ({results[0]['elements']} elements): "
        f"{dict(sorted(results[0]['counts'].items()))}"
    )


def test_random_program_detects_wrong_results(pool: support.PoolFactory) -> None:
    """The comparison is not vacuous: corrupting dummy's results makes it fail."""
    results = pool(WORLD_SIZE).run_ok(run_random_program, 11, 40, sabotage=True)
    assert all(len(r["failures"]) > 5 for r in results), [r["failures"] for r in results]
