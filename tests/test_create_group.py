"""dummy_collectives.create_backend / create_process_group: groups made from a store outside
init_process_group (what torchft and other frameworks build), on one host and across
(simulated) hosts, compared with exact results."""

from __future__ import annotations

import datetime
import os
import time
from typing import Any

import harness
import pytest
import support
import torch
import torch.distributed as dist

pytestmark = [support.requires_dummy, support.requires_backend_module]


def _store(prefix: str) -> dist.Store:
    """A TCPStore of the test's own (rank 0 serves it), under ``prefix``."""
    port = [harness.free_port() if dist.get_rank() == 0 else 0]
    dist.broadcast_object_list(port, src=0, group=harness.reference_group())
    store = dist.TCPStore(
        "127.0.0.1", port[0], dist.get_world_size(), dist.get_rank() == 0,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip
    return dist.PrefixStore(prefix, store)


def collectives_on_a_made_group(hosts: int, wrap: bool) -> dict[str, Any]:
    """Runs in every rank: a group made by the public API, its host given by ``hosts``."""
    import dummy_collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    variable = "DUMMY_COLLECTIVES_HOST_ID"
    before = os.environ.get(variable)
    os.environ[variable] = f"made-group-host{rank * hosts // size}"
    try:
        store = _store(f"made-{hosts}-{wrap}/")
        timeout = datetime.timedelta(seconds=60)
        if wrap:
            group: Any = dummy_collectives.create_process_group(store, rank, size, timeout)
        else:
            group = dummy_collectives.create_backend(store, rank, size, timeout)
    finally:
        if before is None:
            del os.environ[variable]
        else:
            os.environ[variable] = before
    summed = torch.arange(1000, dtype=torch.float32) * (rank + 1)
    group.allreduce([summed]).wait()
    root = torch.full((257,), float(rank + 10))
    group.broadcast([root]).wait()
    gathered = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
    group.allgather([gathered], [torch.full((3,), rank, dtype=torch.int64)]).wait()
    # The backend inside the ProcessGroup (a private accessor: fine in a test).
    backend = group._get_backend(torch.device("cpu")) if wrap else group
    result = {
        "type": type(group).__name__,
        "backend": type(backend).__name__,
        "hosts": [list(ranks) for ranks in backend.hosts],
        "size": group.size(),
        "rank": group.rank(),
        "sum": summed.tolist(),
        "broadcast": root.tolist(),
        "gathered": [t.tolist() for t in gathered],
    }
    # Every rank is past its last collective before one aborts: an abort fails the group on
    # every rank still inside one (through the store), as it should.
    store.add("finished", 1)
    while store.add("finished", 0) < size:
        time.sleep(0.01)
    store.add("seen", 1)
    while rank == 0 and store.add("seen", 0) < size:  # rank 0 serves the store: keep it up
        time.sleep(0.01)
    group.abort() if wrap else group.shutdown()
    return result


@pytest.mark.parametrize("wrap", [False, True], ids=["backend", "process_group"])
@pytest.mark.parametrize("hosts", [1, 2], ids=["one_host", "two_hosts"])
def test_made_group_computes_exact_results(pool: support.PoolFactory, hosts: int, wrap: bool):
    size = 4
    results = pool(size).run_ok(collectives_on_a_made_group, hosts, wrap)
    factor = sum(range(1, size + 1))
    for rank, result in enumerate(results):
        assert result["type"] == ("ProcessGroup" if wrap else "DummyBackend"), result["type"]
        assert result["backend"] == "DummyBackend", result["backend"]
        expected_hosts = [[0, 1, 2, 3]] if hosts == 1 else [[0, 1], [2, 3]]
        assert result["hosts"] == expected_hosts, result["hosts"]
        assert (result["rank"], result["size"]) == (rank, size)
        assert result["sum"] == [float(i * factor) for i in range(1000)]
        assert result["broadcast"] == [10.0] * 257
        assert result["gathered"] == [[r] * 3 for r in range(size)]


def test_made_group_refuses_bad_arguments() -> None:
    import dummy_collectives

    store = dist.HashStore()
    with pytest.raises(ValueError, match="rank 2 of a group of 2"):
        dummy_collectives.create_backend(store, 2, 2)
    with pytest.raises(TypeError, match="options must be dummy_collectives.Options"):
        dummy_collectives.create_backend(store, 0, 1, options={"mode": "zero"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1 global_ranks for a group of 2"):
        dummy_collectives.create_backend(store, 0, 2, global_ranks=[5])


def test_import_leaves_torchft_alone(tmp_path) -> None:
    """torchft is optional: importing the package must not import it (a stand-in torchft on
    the path, installed or not, tells whether anything did)."""
    (tmp_path / "torchft").mkdir()
    (tmp_path / "torchft" / "__init__.py").write_text("raise RuntimeError('torchft imported')\n")
    env = support.subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    code = "import sys, dummy_collectives; print('torchft' in sys.modules)"
    proc = support.run_subprocess([support.sys.executable, "-c", code], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False", proc.stdout
    code = "import dummy_collectives.torchft"
    proc = support.run_subprocess([support.sys.executable, "-c", code], env)
    assert "RuntimeError: torchft imported" in proc.stderr, proc.stderr
