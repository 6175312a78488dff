"""Backend registration, init methods and launchers (each in fresh processes)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist
from harness import PoolCache

BACKEND = harness.backend_under_test()
needs_module = support.requires_backend_module


def describe_rank() -> dict[str, Any]:
    """Runs in every rank: what the default group looks like; an allreduce."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    t = torch.full((7,), float(rank + 1))
    dist.all_reduce(t)
    return {
        "initialized": dist.is_initialized(),
        "backend": str(dist.get_backend()),
        "rank": rank,
        "world_size": ws,
        "sum": t.tolist(),
    }


@needs_module
@pytest.mark.needs("all_reduce:SUM")
@pytest.mark.parametrize("init_method", ["env", "tcp", "file"])
def test_init_methods(pool_cache: PoolCache, init_method: harness.InitMethod) -> None:
    with pool_cache.fresh(2, backend=BACKEND, init_method=init_method) as pool:
        infos = pool.run_ok(describe_rank)
    for r, info in enumerate(infos):
        assert info["initialized"]
        assert info["backend"] == BACKEND
        assert (info["rank"], info["world_size"]) == (r, 2)
        assert info["sum"] == [3.0] * 7


def describe_registration() -> dict[str, Any]:
    import dummy_collectives

    return {
        "in_backend_list": "dummy" in dist.Backend.backend_list,
        "attr": getattr(dist.Backend, "DUMMY", None),
        "normalized": str(dist.Backend("dummy")),
        "upper_normalized": str(dist.Backend("DUMMY")),
        "available": dist.is_backend_available("dummy"),
        "name_constant": getattr(dummy_collectives, "BACKEND_NAME", "dummy"),
        "default_backend": str(dist.get_backend()),
    }


@support.requires_dummy
@needs_module
def test_backend_is_registered(pool: support.PoolFactory) -> None:
    (info,) = pool(1).run_ok(describe_registration)
    assert info == {
        "in_backend_list": True,
        "attr": "dummy",
        "normalized": "dummy",
        "upper_normalized": "dummy",
        "available": True,
        "name_constant": "dummy",
        "default_backend": "dummy",
    }


def describe_mixed() -> dict[str, Any]:
    rank = dist.get_rank()
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)  # CPU tensor: goes to gloo
    config = str(dist.get_backend_config()) if hasattr(dist, "get_backend_config") else ""
    return {"backend": str(dist.get_backend()), "config": config, "sum": t.tolist()}


@pytest.mark.skipif(
    not harness.backend_module_importable("dummy_collectives"),
    reason="dummy_collectives is not importable",
)
def test_mixed_backend_string_cpu_gloo_cuda_dummy(pool_cache: PoolCache) -> None:
    with pool_cache.fresh(
        2, backend="cpu:gloo,cuda:dummy", backend_module="dummy_collectives"
    ) as pool:
        infos = pool.run_ok(describe_mixed)
    for info in infos:
        assert info["sum"] == [3.0] * 5
        assert "cuda:dummy" in info["backend"] and "cpu:gloo" in info["backend"], info
        if info["config"]:
            assert "cuda:dummy" in info["config"], info


IMPORT_CHECK = textwrap.dedent(
    """
    import torch.distributed as dist
    assert "dummy" not in dist.Backend.backend_list, "registered before import"
    import dummy_collectives
    assert "dummy" in dist.Backend.backend_list
    import importlib
    importlib.reload(dummy_collectives)  # registering twice must be harmless
    print("ok", dist.Backend.DUMMY)
    """
)


@pytest.mark.skipif(
    not harness.backend_module_importable("dummy_collectives"),
    reason="dummy_collectives is not importable",
)
def test_import_registers_backend_in_fresh_interpreter() -> None:
    proc = support.run_subprocess(
        [support.sys.executable, "-c", IMPORT_CHECK], support.subprocess_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ok", "dummy"], proc.stdout


TORCHRUN_SCRIPT = textwrap.dedent(
    """
    import importlib
    import os
    import sys

    import torch
    import torch.distributed as dist

    backend, module = sys.argv[1], sys.argv[2]
    if module:
        importlib.import_module(module)
    dist.init_process_group(backend)  # rank, world size, store: from torchrun's env
    rank, ws = dist.get_rank(), dist.get_world_size()
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    outs = [torch.zeros(2) for _ in range(ws)]
    dist.all_gather(outs, torch.full((2,), float(rank)))
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=ws - 1)
    dist.barrier()
    line = (f"rank {rank}/{ws} {dist.get_backend()} sum={t.tolist()} "
            f"gather={[o.tolist() for o in outs]} bcast={b.tolist()}\\n")
    os.write(1, line.encode())  # one write: lines of the two ranks cannot interleave
    dist.destroy_process_group()
    """
)


@needs_module
@pytest.mark.slow
@pytest.mark.needs("all_reduce:SUM", "all_gather", "broadcast", "barrier")
def test_torchrun_two_ranks(tmp_path: Path) -> None:
    script = tmp_path / "tiny_job.py"
    script.write_text(TORCHRUN_SCRIPT)
    module = harness.backend_module_for(BACKEND) or ""
    proc = support.run_subprocess(
        support.torchrun_command(2, script, BACKEND, module), support.subprocess_env()
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert lines == [
        f"rank {r}/2 {BACKEND} sum=[3.0, 3.0, 3.0, 3.0] "
        "gather=[[0.0, 0.0], [1.0, 1.0]] bcast=[1.0, 1.0, 1.0]"
        for r in range(2)
    ], proc.stdout
