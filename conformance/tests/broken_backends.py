"""Deliberately broken c10d backends, for the kit's own tests: importing this module registers
``broken_sum``, ``broken_hang`` and ``broken_timeout``.

Each one is a Python ``ProcessGroup`` (torch's trampoline for Python process groups forwards
all_reduce, all_gather, broadcast and barrier, among others) that wraps a gloo backend and gets
one thing wrong:

- ``broken_sum``: every SUM all_reduce comes back with 1 added to its first element;
- ``broken_hang``: all_gather never returns;
- ``broken_timeout``: the group's timeout is ignored (its gloo waits an hour).
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import torch.distributed as dist

CAPABILITIES = ("all_reduce", "all_gather", "broadcast", "barrier")


class WrappedGloo(dist.ProcessGroup):
    flaw = ""

    def __init__(self, store: Any, rank: int, size: int, timeout: datetime.timedelta) -> None:
        super().__init__(rank, size)
        if self.flaw == "timeout":
            timeout = datetime.timedelta(hours=1)
        self.inner = dist.ProcessGroupGloo(store, rank, size, timeout)

    def getBackendName(self) -> str:  # noqa: N802 (c10d's name)
        return f"broken_{self.flaw}"

    def allreduce(self, tensors: list[Any], opts: Any) -> Any:
        work = self.inner.allreduce(tensors, opts)
        if self.flaw == "sum" and opts.reduceOp == dist.ReduceOp.SUM:
            work.wait()
            tensors[0].view(-1)[0] += 1
        return work

    def allgather(self, outputs: list[list[Any]], inputs: list[Any], opts: Any) -> Any:
        if self.flaw == "hang":
            while True:
                time.sleep(1.0)
        return self.inner.allgather(outputs, inputs, opts)

    def broadcast(self, tensors: list[Any], opts: Any) -> Any:
        return self.inner.broadcast(tensors, opts)

    def barrier(self, opts: Any) -> Any:
        return self.inner.barrier(opts)


def _register(flaw: str) -> None:
    name = f"broken_{flaw}"
    if hasattr(dist.Backend, name.upper()):
        return
    cls = type(f"Broken{flaw.title()}", (WrappedGloo,), {"flaw": flaw})
    dist.Backend.register_backend(name, cls, devices=["cpu"])


for _flaw in ("sum", "hang", "timeout"):
    _register(_flaw)
