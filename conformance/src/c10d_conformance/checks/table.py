"""The table of checks: one row of the matrix each (name, section, what it uses, the function)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from c10d_conformance.checks.async_work import (
    check_async_future,
    check_async_many,
    check_async_wait,
)
from c10d_conformance.checks.collectives import (
    check_all_gather,
    check_all_gather_into_tensor,
    check_all_reduce,
    check_all_to_all,
    check_all_to_all_single,
    check_barrier,
    check_broadcast,
    check_gather,
    check_reduce,
    check_reduce_scatter,
    check_scatter,
)
from c10d_conformance.checks.common import REDUCE_OPS
from c10d_conformance.checks.failures import (
    check_dead_peer,
    check_group_timeout,
    check_mismatched_collectives,
    check_mismatched_sizes,
    check_wait_timeout,
)
from c10d_conformance.checks.groups import check_registration, check_subgroups
from c10d_conformance.checks.objects import (
    check_all_gather_object,
    check_broadcast_object_list,
    check_gather_object,
    check_scatter_object_list,
)
from c10d_conformance.checks.p2p import (
    check_batch_isend_irecv,
    check_isend_irecv,
    check_recv_any_source,
    check_send_recv,
)
from c10d_conformance.checks.training import check_ddp, check_dtensor, check_fsdp2


@dataclasses.dataclass(frozen=True)
class Check:
    """One row: ``fn(ctx, **kwargs)`` in every rank."""

    name: str
    section: str
    needs: tuple[str, ...]  # what it uses, named as CAPABILITIES names calls
    fn: Callable[..., str]
    kwargs: tuple[tuple[str, Any], ...] = ()
    quick: bool = True  # part of --quick
    deadline_s: float = 60.0
    breaks_group: bool = False  # leaves a group broken: the next check gets new ranks
    kills_last_rank: bool = False
    min_world: int = 1


def _table() -> list[Check]:
    rows = [Check("init_process_group", "collectives", (), check_registration)]
    rows += [
        Check(f"all_reduce:{op}", "reductions", (f"all_reduce:{op}",), check_all_reduce,
              (("op", op),))
        for op in REDUCE_OPS
    ]  # fmt: skip
    rows += [
        Check(f"reduce:{op}", "reductions", (f"reduce:{op}",), check_reduce, (("op", op),))
        for op in ("SUM", "MAX")
    ]
    for name, fn in (
        ("broadcast", check_broadcast),
        ("all_gather", check_all_gather),
        ("all_gather_into_tensor", check_all_gather_into_tensor),
        ("gather", check_gather),
        ("scatter", check_scatter),
        ("all_to_all", check_all_to_all),
        ("all_to_all_single", check_all_to_all_single),
        ("barrier", check_barrier),
    ):
        rows.append(Check(name, "collectives", (name,), fn))
        if name == "scatter":  # after it, as c10d lists them
            rows += [
                Check(call, "collectives", (call,), check_reduce_scatter, (("flat", flat),))
                for call, flat in (("reduce_scatter", False), ("reduce_scatter_tensor", True))
            ]
    p2p = ("send", "recv")
    rows += [
        Check("send/recv", "point-to-point", p2p, check_send_recv, min_world=2),
        Check("isend/irecv", "point-to-point", p2p, check_isend_irecv, min_world=2),
        Check("batch_isend_irecv", "point-to-point", p2p, check_batch_isend_irecv, min_world=2),
        Check("recv (any source)", "point-to-point", p2p, check_recv_any_source, min_world=2),
        Check("Work.wait", "async", ("all_reduce:SUM",), check_async_wait),
        Check("Work.get_future", "async", ("all_reduce:SUM",), check_async_future),
        Check("16 works in flight", "async", ("all_reduce:SUM",), check_async_many),
        Check("broadcast_object_list", "objects", ("broadcast",), check_broadcast_object_list),
        Check("all_gather_object", "objects", ("all_gather",), check_all_gather_object),
        Check("gather_object", "objects", ("all_gather", "gather"), check_gather_object),
        Check("scatter_object_list", "objects", ("broadcast", "scatter"),
              check_scatter_object_list),
        Check("new_group (even / odd ranks)", "subgroups", ("all_reduce:SUM", "broadcast"),
              check_subgroups),
        Check("group timeout", "timeouts", ("all_reduce:SUM",), check_group_timeout,
              deadline_s=40, breaks_group=True),
        Check("Work.wait(timeout)", "timeouts", ("all_reduce:SUM",), check_wait_timeout,
              deadline_s=40, breaks_group=True, min_world=2),
        Check("mismatched collectives", "failures", ("all_reduce:SUM", "broadcast"),
              check_mismatched_collectives, quick=False, deadline_s=40, breaks_group=True,
              min_world=2),
        Check("mismatched sizes", "failures", ("all_reduce:SUM",), check_mismatched_sizes,
              quick=False, deadline_s=40, breaks_group=True, min_world=2),
        Check("dead peer", "failures", ("all_reduce:SUM",), check_dead_peer, quick=False,
              deadline_s=60, breaks_group=True, kills_last_rank=True, min_world=2),
        Check("DDP", "training", ("all_reduce:SUM", "broadcast", "all_gather"), check_ddp),
        Check("FSDP2", "training",
              ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce:SUM"), check_fsdp2,
              quick=False),
        Check("DTensor", "training", ("all_gather_into_tensor", "all_reduce:SUM"), check_dtensor,
              quick=False),
    ]  # fmt: skip
    return rows


CHECKS: list[Check] = _table()
