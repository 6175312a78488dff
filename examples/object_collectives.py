"""Object collectives and process subgroups on the dummy backend.

Run:  python examples/object_collectives.py [--world-size W]   (spawns W ranks, default 3)
  or: torchrun --nproc-per-node 3 examples/object_collectives.py

Object collectives pickle Python objects into uint8 tensors and move them with ordinary
collectives (sizes with all_gather, payloads with all_gather / broadcast / scatter / gather),
so they run on the dummy backend like any other caller. Checked here, on the default group
and on subgroups:

- ``all_gather_object``, ``broadcast_object_list``, ``scatter_object_list``,
  ``gather_object`` with objects of different sizes on every rank (up to a few MiB, so the
  payload streams through the shared-memory slots), tensors inside objects included;
- ``new_group``: a group that leaves ranks out, overlapping pairs of ranks, the ranks in
  reverse order (``sort_ranks=False``), ``use_local_synchronization=True``, many groups
  (every pair, many times over), each used for collectives and then destroyed;
- ``split_group``: torch 2.13 only splits a parent group whose default group is bound to an
  accelerator (``init_process_group(device_id=...)``) and whose backend reports
  ``supports_splitting``; on CPU it raises, which is reported (not treated as a failure).

Needs at least 3 ranks (overlapping groups).
"""

from __future__ import annotations

import argparse
import itertools
from typing import Any

import torch
import torch.distributed as dist
from _launch import launch

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)


def payload(rank: int, tag: str = "") -> dict[str, Any]:
    """A rank-specific object; any process can rebuild any rank's."""
    return {
        "rank": rank,
        "tag": tag,
        "text": f"rank {rank} " * (rank * 300),
        "tensor": torch.arange(rank + 2, dtype=torch.float64) * (rank + 1),
        "nested": [rank, (rank, str(rank)), {"k": [None] * rank}],
    }


def same(a: Any, b: Any) -> bool:
    """Equality that compares tensors by value."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def object_collectives(group: dist.ProcessGroup | None, failures: list[str], what: str) -> int:
    """The four object collectives over ``group``; returns how many were checked."""
    members = dist.get_process_group_ranks(group) if group is not None else None
    world = dist.get_world_size(group)
    me = dist.get_rank(group)  # rank in the group
    glob = dist.get_global_rank(group, me) if group is not None else me
    ranks = members if members is not None else list(range(world))

    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, payload(glob, what), group=group)
    if not same(gathered, [payload(r, what) for r in ranks]):
        failures.append(f"{what}: all_gather_object gave {gathered}")

    src = ranks[-1]  # a global rank: the last member
    big = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB
    objects: list[Any] = [payload(src, what), big, "end"] if glob == src else [None] * 3
    dist.broadcast_object_list(objects, src=src, group=group)
    if not same(objects, [payload(src, what), big, "end"]):
        failures.append(f"{what}: broadcast_object_list gave {str(objects)[:200]}")

    root = ranks[0]
    received: list[Any] = [None]
    scatter_in = [payload(r, what + "/scatter") for r in ranks] if glob == root else None
    dist.scatter_object_list(received, scatter_in, src=root, group=group)
    if not same(received[0], payload(glob, what + "/scatter")):
        failures.append(f"{what}: scatter_object_list gave {received}")

    dst = ranks[min(1, world - 1)]
    out: list[Any] | None = [None] * world if glob == dst else None
    dist.gather_object(payload(glob, what + "/gather"), out, dst=dst, group=group)
    if glob == dst and not same(out, [payload(r, what + "/gather") for r in ranks]):
        failures.append(f"{what}: gather_object gave {out}")
    return 4


def check_sum(group: dist.ProcessGroup, failures: list[str], what: str) -> None:
    """all_reduce over ``group``: the sum of the members' global ranks + 1."""
    members = dist.get_process_group_ranks(group)
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t, group=group)
    want = float(sum(r + 1 for r in members))
    if not torch.equal(t, torch.full((3,), want)):
        failures.append(f"{what} {members}: all_reduce gave {t.tolist()}, expected {want}")


def groups(failures: list[str], rounds: int = 5) -> dict[str, int]:
    """new_group in its variants; returns counts of what was checked."""
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = {"groups": 0, "object_checks": 0}

    # A group that leaves rank 0 out; non-members get NON_GROUP_MEMBER.
    tail = dist.new_group(list(range(1, world)))
    counts["groups"] += 1
    if rank == 0:
        if tail != dist.GroupMember.NON_GROUP_MEMBER:
            failures.append("rank 0 is not a member of ranks 1.. but got a group")
    else:
        check_sum(tail, failures, "group without rank 0")
        counts["object_checks"] += object_collectives(tail, failures, "group without rank 0")
        dist.destroy_process_group(tail)

    # Ranks in reverse order: group rank 0 is the last global rank.
    reverse = dist.new_group(list(reversed(range(world))), sort_ranks=False)
    counts["groups"] += 1
    if dist.get_rank(reverse) != world - 1 - rank:
        failures.append(f"reverse group: group rank {dist.get_rank(reverse)}")
    check_sum(reverse, failures, "reversed group")
    t = torch.tensor([float(rank)])
    dist.broadcast(t, group_src=0, group=reverse)  # from global rank world-1
    if t.item() != world - 1:
        failures.append(f"reversed group: broadcast from group rank 0 gave {t.item()}")
    counts["object_checks"] += object_collectives(reverse, failures, "reversed group")
    dist.destroy_process_group(reverse)

    # Overlapping pairs, many times over: every rank is in world-1 live groups at once,
    # and collectives alternate between them (in creation order, on every member).
    pairs = list(itertools.combinations(range(world), 2))
    live: list[tuple[tuple[int, int], dist.ProcessGroup]] = []
    for _ in range(rounds):
        for pair in pairs:
            group = dist.new_group(list(pair))
            counts["groups"] += 1
            if rank in pair:
                live.append((pair, group))
    for step in range(2):
        for _, group in live:
            check_sum(group, failures, f"pair, pass {step}")
    # Object collectives on the first round's pairs (the first world-1 groups of each rank).
    for pair, group in live[: world - 1]:
        counts["object_checks"] += object_collectives(group, failures, f"pair {pair}")
    for _, group in live:
        dist.destroy_process_group(group)

    # Local synchronization: only the members call new_group. The last group this makes: on
    # torch 2.15 it advances the members' group counter only, so a later plain new_group() would
    # be named differently on rank 2 and wait for ever, whatever the backend.
    if rank < 2:
        local = dist.new_group([0, 1], use_local_synchronization=True)
        counts["groups"] += 1
        check_sum(local, failures, "local-synchronization group")
        dist.destroy_process_group(local)
    dist.barrier()
    return counts


def try_split_group() -> str:
    """``dist.split_group`` of the default group into [0, 1] and the rest, if it can."""
    world = dist.get_world_size()
    if not hasattr(dist, "split_group"):
        return "unavailable: this torch has no dist.split_group"
    try:
        sub = dist.split_group(split_ranks=[[0, 1], list(range(2, world))])
    except (RuntimeError, ValueError) as exc:
        return f"unavailable: {type(exc).__name__}: {exc}"
    if sub is None:
        return "split: not a member"
    t = torch.ones(1)
    dist.all_reduce(t, group=sub)
    return f"ok: all_reduce over the split group gave {t.item()}"


def run(rounds: int = 5) -> dict[str, Any]:
    """Everything above on this rank; returns ``failures`` and counts."""
    failures: list[str] = []
    checked = object_collectives(None, failures, "default group")
    counts = groups(failures, rounds)
    return {
        "failures": failures,
        "object_checks": checked + counts["object_checks"],
        "groups": counts["groups"],
        "split_group": try_split_group(),
    }


def main() -> None:
    dist.init_process_group("dummy")
    rank = dist.get_rank()
    if dist.get_world_size() < 3:
        raise SystemExit("object_collectives.py needs at least 3 ranks")
    result = run()
    for failure in result["failures"]:
        print(f"rank {rank}: {failure}")
    if rank == 0:
        print(
            f"object collectives: {result['object_checks']} checks; subgroups: "
            f"{result['groups']} created and used; failures on rank 0: {len(result['failures'])}"
        )
        print(f"split_group: {result['split_group']}")
    dist.destroy_process_group()
    if result["failures"]:
        raise SystemExit(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=3, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size)
