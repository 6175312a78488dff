"""Functional collectives (``torch.distributed._functional_collectives``) on the dummy backend.

Run:  python examples/functional_collectives.py [--compile-backend B] [--world-size W]
  or: torchrun --nproc-per-node 2 examples/functional_collectives.py

Functional collectives return new tensors (``AsyncCollectiveTensor``, waited on first use)
instead of writing into their arguments; they are what DTensor and torch.compile use. They
reach the backend through the ``_c10d_functional`` ops: ``all_gather_single`` and
``reduce_scatter_single`` go through the backend's ``allgather_into_tensor_coalesced`` and
``reduce_scatter_tensor_coalesced`` (with one tensor), the ``*_coalesced`` variants through
the same entry points with several tensors, ``all_reduce_coalesced`` through
``allreduce_coalesced``, ``all_to_all_single`` (and ``permute_tensor``) through
``alltoall_base``. Every one of them runs here on the default group (dummy) and on a gloo
group in the same processes, and the results must be equal (exactly on 2 ranks; AVG within a
few ulps on more). Also checked: the four ways to name a group
(ProcessGroup, list of ranks, DeviceMesh, group name), autograd through
``all_gather_single`` / ``reduce_scatter_single`` / ``all_reduce``, the deprecated
``*_tensor`` aliases, and (``--compile-backend``, default ``aot_eager``;
``none`` to skip; ``inductor`` works too but compiles for ~20 s) the same collectives in a
function compiled with ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from _launch import launch
from torch.distributed.device_mesh import init_device_mesh

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

Result = dict[str, Any]
REDUCE_OPS = ("sum", "avg", "product", "min", "max")
BITWISE_OPS = ("band", "bor", "bxor")


def split_matrix(world: int) -> list[list[int]]:
    """rows[i][j]: how many rows rank i sends to rank j in the uneven all_to_all (0..2)."""
    return [[(2 * i + j) % 3 for j in range(world)] for i in range(world)]


def inputs(rank: int, world: int) -> dict[str, torch.Tensor]:
    base = torch.arange(4 * world * 3, dtype=torch.float32).reshape(4 * world, 3)
    return {
        # Halves of small integers: sums, products, min and max are exact.
        "x": (base % 7 - 3 + rank) / 2,
        "i": (torch.arange(5 * world, dtype=torch.int64) * (rank + 3)) % 11,
        "h": (torch.arange(2 * world, dtype=torch.float16) - rank) / 4,
        "u": torch.arange(sum(split_matrix(world)[rank]) * 2, dtype=torch.float64).reshape(-1, 2)
        + 100 * rank,
    }


def run_all(group: Any, rank: int, world: int) -> Result:
    """Every functional collective over ``group``; the results, waited."""
    t = inputs(rank, world)
    x, i, h, u = t["x"], t["i"], t["h"], t["u"]
    rows = split_matrix(world)
    out: Result = {}
    for op in REDUCE_OPS:
        out[f"all_reduce/{op}"] = funcol.all_reduce(x, op, group)
    for op in BITWISE_OPS:
        out[f"all_reduce/{op}"] = funcol.all_reduce(i, op, group)
    out["all_reduce/half"] = funcol.all_reduce(h, "sum", group)
    out["all_gather_single/dim0"] = funcol.all_gather_single(x, 0, group)
    out["all_gather_single/dim1"] = funcol.all_gather_single(x, 1, group)
    out["reduce_scatter_single/dim0"] = funcol.reduce_scatter_single(x, "sum", 0, group)
    out["reduce_scatter_single/avg"] = funcol.reduce_scatter_single(x, "avg", 0, group)
    out["reduce_scatter_single/dim1"] = funcol.reduce_scatter_single(
        x.repeat(1, world), "max", 1, group
    )
    out["all_to_all_single/even"] = funcol.all_to_all_single(x, None, None, group)
    out["all_to_all_single/uneven"] = funcol.all_to_all_single(
        u, [rows[j][rank] for j in range(world)], rows[rank], group
    )
    out["permute_tensor"] = funcol.permute_tensor(i, [(r + 1) % world for r in range(world)], group)
    out["broadcast"] = funcol.broadcast(x, world - 1, group)
    # One dtype per coalesced call: gloo's allreduce_coalesced and (so far) every coalesced
    # entry point of dummy reject a list of mixed dtypes.
    y = x[:, :2] * 3
    out["all_reduce_coalesced"] = funcol.all_reduce_coalesced([x, y], "sum", group)
    out["all_gather_single_coalesced"] = funcol.all_gather_single_coalesced([x, y], group)
    out["reduce_scatter_single_coalesced"] = funcol.reduce_scatter_single_coalesced(
        [x, y], "sum", [0, 0], group
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated *_tensor aliases
        out["all_gather_tensor"] = funcol.all_gather_tensor(x, 0, group)
        out["reduce_scatter_tensor"] = funcol.reduce_scatter_tensor(x, "sum", 0, group)
        out["all_gather_into_tensor_coalesced"] = funcol.all_gather_into_tensor_coalesced(
            [x, y], group
        )
        out["reduce_scatter_tensor_coalesced"] = funcol.reduce_scatter_tensor_coalesced(
            [x, y], "min", [0, 0], group
        )
    # Autograd: all_gather's gradient is a reduce-scatter and vice versa; all_reduce's
    # gradient is an all_reduce of the gradient.
    leaf = x.clone().requires_grad_()
    weights = torch.arange(1, 4 * world * world + 1, dtype=torch.float32).reshape(-1, 1)
    (funcol.all_gather_single(leaf, 0, group) * weights).sum().backward()
    out["grad/all_gather_single"] = leaf.grad
    leaf = x.clone().requires_grad_()
    (funcol.reduce_scatter_single(leaf, "sum", 0, group) * (rank + 1)).sum().backward()
    out["grad/reduce_scatter_single"] = leaf.grad
    leaf = x.clone().requires_grad_()
    (funcol.all_reduce(leaf, "sum", group) * (rank + 1)).sum().backward()
    out["grad/all_reduce"] = leaf.grad
    return {k: _waited(v) for k, v in out.items()}


def compiled_program(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """A function mixing functional collectives, for torch.compile."""
    a = funcol.all_reduce(x, "sum", group)
    b = funcol.all_gather_single(a * 2, 0, group)
    c = funcol.reduce_scatter_single(b, "max", 0, group)
    d = funcol.all_to_all_single(c + 1, None, None, group)
    e, f = funcol.all_reduce_coalesced([d, x], "min", group)
    g, h = funcol.all_gather_single_coalesced([e, f], group)
    return g.sum(0) + h.sum(0)


def _waited(value: Any) -> Any:
    if isinstance(value, list):
        return [_waited(v) for v in value]
    if isinstance(value, funcol.AsyncCollectiveTensor):
        return value.wait()
    return value


def _same(a: Any, b: Any, tolerant: bool) -> bool:
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y, tolerant) for x, y in zip(a, b, strict=True))
    if tolerant:
        return a.dtype == b.dtype and a.shape == b.shape and torch.allclose(a, b, rtol=1e-6)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def compare(
    reference: dist.ProcessGroup | None = None, compile_backend: str | None = "aot_eager"
) -> dict[str, Any]:
    """Run everything on dummy and gloo; returns ``failures`` (a list) and ``checked``."""
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = reference if reference is not None else dist.new_group(backend="gloo")
    failures: list[str] = []
    theirs = run_all(gloo, rank, world)
    ours = run_all(dist.group.WORLD, rank, world)
    for key, value in theirs.items():
        # More than two addends: gloo and dummy may round an average differently.
        tolerant = world > 2 and "avg" in key
        if not _same(ours[key], value, tolerant):
            failures.append(f"{key}: dummy {ours[key]} != gloo {value}")

    # The other ways to name the default group give the same results.
    mesh = init_device_mesh("cpu", (world,))
    world_group = dist.group.WORLD
    assert world_group is not None
    x = inputs(rank, world)["x"]
    expected = ours["all_reduce/max"]
    for name, group in (
        ("ranks", list(range(world))),
        ("mesh", mesh),
        ("group name", world_group.group_name),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # ranks as a group: deprecated
            got = funcol.all_reduce(x, "max", group).wait()
        if not torch.equal(got, expected):
            failures.append(f"all_reduce over {name}: {got} != {expected}")
        if dist.get_backend(mesh.get_group()) != dist.get_backend():
            failures.append("the device mesh does not use the default group's backend")

    checked = len(theirs)
    if compile_backend is not None:
        compiled = torch.compile(compiled_program, backend=compile_backend, fullgraph=True)
        want = compiled_program(x, gloo)
        got_dummy = compiled(x, world_group)
        got_gloo = compiled(x, gloo)
        if not torch.equal(got_dummy, want):
            failures.append(f"torch.compile({compile_backend}) on dummy: {got_dummy} != {want}")
        if not torch.equal(got_gloo, want):
            failures.append(f"torch.compile({compile_backend}) on gloo: {got_gloo} != {want}")
        checked += 1
    if reference is None:
        dist.destroy_process_group(gloo)
    return {"failures": failures, "checked": checked}


def main(compile_backend: str | None) -> None:
    dist.init_process_group("dummy")
    rank = dist.get_rank()
    result = compare(compile_backend=compile_backend)
    for failure in result["failures"]:
        print(f"rank {rank}: {failure}")
    if rank == 0:
        print(
            f"functional collectives: {result['checked']} results compared with gloo, "
            f"{len(result['failures'])} differ"
            + (f" (torch.compile backend {compile_backend})" if compile_backend else "")
        )
    dist.destroy_process_group()
    if result["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-backend", default="aot_eager", help="or inductor, none")
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    backend = None if cli.compile_backend == "none" else cli.compile_backend
    launch(main, cli.world_size, backend)
