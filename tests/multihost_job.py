"""One rank of a job across namespaced hosts (test_multihost.py starts it, with torchrun or one
process per rank): initialises the default group with the backend under test (dummy, or
DC_TEST_BACKEND) from the env:// variables, runs a scenario and writes what it saw to
``OUT_DIR/rank<r>.json``.

usage: python tests/multihost_job.py SCENARIO OUT_DIR [ARGS...]

Scenarios:
  random_program SEED N_OPS   the random program of test_random_program.py, every op checked
                              against gloo over the same ranks (no receive from any source)
  ddp STEPS                   the same model trained with DDP on dummy and on gloo; then
                              (dummy) the last rank sleeps before a few collectives and
                              wait_summary must name it on every host
  kill VICTIM                 a loop of collectives; rank VICTIM SIGKILLs itself mid-way
  mismatch                    ranks on different hosts (then on one host) call different
                              collectives; the group must stay usable
  alltoall                    all_to_all_single with split sizes that disagree (every rank
                              raises, the group stays usable), then with uneven ones
  chain_broadcast             broadcasts beyond the root's record from every root, odd sizes
                              and dtypes, each checked against exact values
  skip VICTIM                 rank VICTIM skips one collective; the others time out
  train_through_faults        collectives in a loop, each checked, while the test breaks and
                              mends the network (markers in OUT_DIR); then, once healed, the
                              failed group again and a new group
  make_groups N               makes N groups of every rank one after another, each checked
                              with an allreduce, while strangers knock on every port
  slow_rank                   the last rank sleeps before a few small allreduces; every rank's
                              wait_summary must name it, and every result is exact

DC_JOB_LATE=HOST:SECONDS makes the ranks on HOST that late to every dummy group's cross-host
part (after the group's gloo levels, before its shared memory and leader links): the other
hosts' listeners wait that long for them.

DC_JOB_FAKETIME=HOST:OFFSET runs the ranks on HOST (a hostname) with their wall clock shifted by
OFFSET (libfaketime's FAKETIME, e.g. +1s): the rank re-executes itself with the library loaded,
so torchrun's agent, whose sleeps it would break, runs unshifted.
  cuda                        collectives on CUDA tensors of the one GPU every rank shares,
                              checked against exact values
"""

from __future__ import annotations

import datetime
import glob
import importlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import test_random_program  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

Result = dict[str, Any]


def topology() -> Result:
    """What this rank's group looks like: the backend's lowering (its class for another backend)
    and its hosts."""
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    return {
        "backend": getattr(backend, "lowering", type(backend).__name__),
        "hosts": getattr(backend, "hosts", None),
    }


def random_program(out_dir: str, seed: str, n_ops: str) -> Result:
    harness.adopt_launched_rank(out_dir)
    test_random_program.ANY_SOURCE = False
    return test_random_program.run_random_program(int(seed), int(n_ops))


def _train(
    group: dist.ProcessGroup | None, steps: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """A small model trained with DDP over ``group``; values stay exact in float64 (dyadic
    weights, integer inputs, a power-of-two learning rate and world size)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32, bias=True), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    ).double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape).double() / 8)
    initial = [p.detach().clone() for p in model.parameters()]
    ddp = DistributedDataParallel(model, process_group=group, bucket_cap_mb=0.001)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1 / 16)
    rank = dist.get_rank()
    for step in range(steps):
        generator = torch.Generator().manual_seed(step * 131 + rank)
        x = torch.randint(-3, 4, (8, 16), generator=generator).double()
        optimizer.zero_grad()
        ddp(x).sum().backward()
        optimizer.step()
    final = [p.detach().clone() for p in model.parameters()]
    return initial, final


def ddp(out_dir: str, steps: str) -> Result:
    gloo = dist.new_group(backend="gloo")
    initial, on_backend = _train(None, int(steps))
    _, on_gloo = _train(gloo, int(steps))
    pairs = zip(on_backend, on_gloo, strict=True)
    differ = [i for i, (a, b) in enumerate(pairs) if not a.equal(b)]
    moved = [i for i, (a, b) in enumerate(zip(initial, on_backend, strict=True)) if not a.equal(b)]
    result = {"differ": differ, "moved": moved, "parameters": len(initial)}
    if harness.backend_under_test() == "dummy":
        result["waits"] = _slow_rank_waits()
    return result


SLOW_ROUNDS = 5
SLOW_DELAY_S = 0.02


def _slow_rank_waits() -> Result:
    """The last rank (not its host's leader) sleeps before each of a few small allreduces: who
    made whom wait, as every rank's wait_summary tells it."""
    import dummy_collectives

    slow_rank = dist.get_world_size() - 1
    dummy_collectives.wait_summary(reset=True)
    for _ in range(SLOW_ROUNDS):
        if dist.get_rank() == slow_rank:
            time.sleep(SLOW_DELAY_S)
        dist.all_reduce(torch.ones(4))
    summary = dummy_collectives.wait_summary()
    top = summary.most_waited_for()
    return {
        "slow_rank": slow_rank,
        "most_waited_for": top.rank if top is not None else None,
        "times_last": [r.times_last for r in summary.ranks],
        "others_waited_us": [r.others_waited_us for r in summary.ranks],
        "printed": str(summary),
        "rounds": SLOW_ROUNDS,
        # How long the others waited for it, at the least: each one the delay of every round.
        "others_must_wait_us": (dist.get_world_size() - 1) * SLOW_ROUNDS * SLOW_DELAY_S * 1e6,
    }


def make_groups(out_dir: str, count: str) -> Result:
    rank, world = dist.get_rank(), dist.get_world_size()
    wrong = []
    for i in range(int(count)):
        group = dist.new_group(backend=harness.backend_under_test())
        t = torch.full((300_000,), float(rank + i))
        dist.all_reduce(t, group=group)
        if not bool((t == world * (world - 1) // 2 + world * i).all()):
            wrong.append(i)
        dist.destroy_process_group(group)
    return {"wrong": wrong, "groups": int(count)}


def slow_rank(out_dir: str) -> Result:
    world = dist.get_world_size()
    t = torch.full((1000,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    exact = bool((t == world * (world + 1) // 2).all())
    return {"waits": _slow_rank_waits(), "exact": exact, "clock": time.time()}


def kill(out_dir: str, victim: str) -> Result:
    """Collectives of every size in a loop; the victim dies by SIGKILL while they run."""
    rank = dist.get_rank()
    victim_rank = int(victim)
    marker = Path(out_dir) / "killed_at"
    if rank == victim_rank:

        def die() -> None:
            marker.write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Timer(1.5, die).start()
    else:
        # torchrun's agent SIGTERMs a dead rank's host peers at its next check (0.1 s by
        # default), which can come before they see the death. What is tested is the backend's
        # own detection, so the survivors ignore the signal and run on until their collective
        # raises; the agent SIGKILLs them 30 s later if it never does.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    tensors = [torch.ones(n) for n in (1, 1000, 300_000, 3_000_000)]
    iterations = 0
    try:
        while True:
            for t in tensors:
                dist.all_reduce(t)
            iterations += 1
    except Exception as exc:  # what the test checks
        failed_at = time.time()
        error = f"{type(exc).__name__}: {exc}"
    killed_at = float(marker.read_text()) if marker.exists() else None
    return {
        "iterations": iterations,
        "error": error,
        "after_kill_s": failed_at - killed_at if killed_at is not None else None,
    }


def _attempt(fn: Callable[[], object]) -> str | None:
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def mismatch(out_dir: str) -> Result:
    rank = dist.get_rank()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    host = next(h for h, ranks in enumerate(backend.hosts) if rank in ranks)
    result: Result = {}
    # Host 1's ranks call another size: every rank, on every host, raises, before data moves.
    t = torch.full((5 if host == 1 else 4,), float(rank))
    result["across_hosts"] = _attempt(lambda: dist.all_reduce(t))
    result["across_hosts_untouched"] = bool((t == rank).all())
    # One rank of host 1 calls broadcast instead: its host sees it, and tells the others.
    t = torch.full((300_000,), float(rank))
    if rank == backend.hosts[1][-1]:
        result["within_host"] = _attempt(lambda: dist.broadcast(t, src=0))
    else:
        result["within_host"] = _attempt(lambda: dist.all_reduce(t))
    result["within_host_untouched"] = bool((t == rank).all())
    # The group is still usable, small and large (not where the hosts run one rank each: a
    # broadcast met by another collective there fails the group, docs/faults.md).
    ok = []

    def use() -> None:
        for n in (3, 300_000):
            t = torch.ones(n)
            dist.all_reduce(t)
            ok.append(bool((t == dist.get_world_size()).all()))

    result["usable_after_error"] = _attempt(use)
    result["usable_after"] = bool(ok) and all(ok)
    return result


def alltoall(out_dir: str) -> Result:
    """all_to_all_single across hosts: split sizes that disagree raise on every rank, before
    any data moves, and leave the group usable; uneven splits then land where they belong."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    result: Result = {}
    n = 3 if rank == 0 else 2
    out = torch.full((ws * n,), -1.0)
    result["mismatch"] = _attempt(lambda: dist.all_to_all_single(out, torch.ones(ws * n)))
    result["mismatch_untouched"] = bool((out == -1).all())
    # Rank s sends rank d (d + 1) * 1000 + s elements of value s * 1000 + d: parts of odd
    # lengths, every rank's different.
    sends = [(d + 1) * 1000 + rank for d in range(ws)]
    receives = [(rank + 1) * 1000 + s for s in range(ws)]
    inp = torch.cat([torch.full((k,), float(rank * 1000 + d)) for d, k in enumerate(sends)])
    out = torch.empty(sum(receives))
    result["uneven"] = _attempt(lambda: dist.all_to_all_single(out, inp, receives, sends))
    expected = torch.cat([torch.full((k,), float(s * 1000 + rank)) for s, k in enumerate(receives)])
    result["uneven_exact"] = bool(out.equal(expected))
    t = torch.ones(5)
    result["usable_after_error"] = _attempt(lambda: dist.all_reduce(t))
    result["usable_after"] = bool((t == ws).all())
    return result


def chain_broadcast(out_dir: str) -> Result:
    """Broadcasts too large for the root's record (on hosts of one rank they go along a chain of
    the hosts, each passing the message on as it lands) from every root: odd byte counts, so
    no piece is a whole number of pages, and float and uint8 data, each checked
    exactly on every rank; then a small allreduce, which must still pair."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    wrong = []
    for numel, dtype in [((1 << 20) + 1, torch.uint8), (3 * (1 << 20) + 5, torch.uint8),
                         ((4 << 20) + 3, torch.float32)]:  # fmt: skip
        for root in range(ws):
            generator = torch.Generator().manual_seed(numel * 7 + root)
            expected = torch.randint(0, 251, (numel,), generator=generator).to(dtype)
            t = expected.clone() if rank == root else torch.zeros(numel, dtype=dtype)
            dist.broadcast(t, root)
            if not t.equal(expected):
                first = int((t != expected).nonzero()[0])
                wrong.append(f"{numel} {dtype} from root {root}: first wrong element {first}")
    t = torch.ones(5)
    dist.all_reduce(t)
    return {"wrong": wrong, "usable_after": bool((t == ws).all())}


def one_way_mismatch(out_dir: str, variant: str) -> Result:
    """Broadcasts whose root's host sends its record one way, called differently (``variant``):
    ``sizes``, inline sizes (rank 0 the root; its host's ranks 4 floats, every other host's 5);
    ``mid``, sizes that fit the root's record but not the in-host ones (each host's leader
    shares the data); ``large``, sizes beyond a record (the data follows the root's record);
    ``roots``, each host
    the root of its own (its first rank); ``root_host``, the root's host's last rank 5 floats,
    everyone else 4; ``overlong``, the other hosts call a 4-float allreduce instead, whose
    exchange's slot the root's record (400 KB of data) overruns. Every rank raises the
    mismatch, at the call or at its next one, long before the group's timeout; ``root_host``
    leaves the group usable."""
    rank = dist.get_rank()
    hosts = dist.group.WORLD._get_backend(torch.device("cpu")).hosts
    host = next(h for h, ranks in enumerate(hosts) if rank in ranks)
    n = {"mid": 100_000, "large": 300_000, "overlong": 100_000}.get(variant, 4)
    src = hosts[host][0] if variant == "roots" else 0
    if variant == "root_host":
        n += rank == hosts[0][-1]
    elif variant != "roots":
        n += host > 0
    t = torch.full((n,), float(rank))
    start = time.monotonic()
    if variant == "overlong" and host > 0:
        t = torch.full((4,), float(rank))
        result: Result = {"error": _attempt(lambda: dist.all_reduce(t)), "src": src}
    else:
        result = {"error": _attempt(lambda: dist.broadcast(t, src=src)), "src": src}
    result["untouched"] = bool((t == rank).all())
    after = torch.ones(3)
    result["next_error"] = _attempt(lambda: dist.all_reduce(after))
    result["next_sum"] = after.tolist()
    result["seconds"] = time.monotonic() - start
    return result


def skip(out_dir: str, victim: str) -> Result:
    """The victim skips one collective: everyone else times out, naming whom they waited for."""
    rank = dist.get_rank()
    error = None
    start = time.monotonic()
    if rank != int(victim):
        error = _attempt(lambda: dist.all_reduce(torch.ones(1000)))
    else:
        time.sleep(4)  # outlives the others' timeout, then leaves
    return {"error": error, "seconds": time.monotonic() - start, "fr": _flight_recorder()}


def _flight_recorder() -> Result:
    """What this rank's flight recorder holds of the default group (dummy only)."""
    if harness.backend_under_test() != "dummy":
        return {}
    import pickle

    import dummy_collectives

    dump = pickle.loads(dummy_collectives.dump_fr_trace())
    entries = [e for e in dump["entries"] if e["process_group"][0] == "0"]
    return {
        "ranks": dump["pg_config"].get("0", {}).get("ranks"),
        "entries": [[e["profiling_name"], e["collective_seq_id"], e["state"]] for e in entries],
    }


def _values(rank: int, n: int, device: torch.device) -> torch.Tensor:
    """Rank ``rank``'s small integers (exact in float32 when summed over a few ranks)."""
    return (torch.arange(n, device=device) % 7 + rank + 1).float()


def cuda(out_dir: str) -> Result:
    """Collectives on CUDA tensors across hosts (every rank on cuda:0, the GPU they share):
    each host's ranks over the CUDA path; between hosts in CUDA memory where every host's UCX
    moves it (the path is reported), else staged through host memory."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    wrong: list[str] = []

    def check(what: str, got: torch.Tensor, expected: torch.Tensor) -> None:
        if not torch.equal(got.cpu(), expected.cpu()):
            wrong.append(
                f"{what}: got {got.flatten()[:4].tolist()}, want {expected.flatten()[:4].tolist()}"
            )

    is_dummy = harness.backend_under_test() == "dummy"
    for n in (5, 300_000, 3_000_000):  # rides with the agreement, pipelined, several chunks
        total = sum(_values(r, n, device) for r in range(world))
        t = _values(rank, n, device)
        dist.all_reduce(t)
        check(f"all_reduce sum n={n}", t, total)
        t = _values(rank, n, device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        check(f"all_reduce max n={n}", t, _values(world - 1, n, device))
        t = _values(rank, n, device)
        dist.broadcast(t, src=world - 1)
        check(f"broadcast n={n}", t, _values(world - 1, n, device))
        out = [torch.empty(n, device=device) for _ in range(world)]
        dist.all_gather(out, _values(rank, n, device))
        for r in range(world):
            check(f"all_gather n={n} part {r}", out[r], _values(r, n, device))
        if is_dummy:  # gloo has no CUDA reduce_scatter or reduce
            full = torch.cat([_values(rank, n, device) * (r + 1) for r in range(world)])
            part = torch.empty(n, device=device)
            dist.reduce_scatter_tensor(part, full)
            check(f"reduce_scatter n={n}", part, total * (rank + 1))
            t = _values(rank, n, device)
            dist.reduce(t, dst=0)
            if rank == 0:
                check(f"reduce n={n}", t, total)
    torch.cuda.synchronize()
    result: Result = {"wrong": wrong, "device": torch.cuda.get_device_name(device)}
    if is_dummy:
        backend = dist.distributed_c10d._get_default_group()._get_backend(device)
        result["cuda_path"] = next(
            line for line in backend.algorithms if line.startswith("CUDA tensors:")
        )
    return result


def _marker(out_dir: str, name: str) -> Path:
    return Path(out_dir) / name


def _await_marker(path: Path, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# What dummy adds to a failure's reason that the store could not be told of yet.
UNTOLD = "the group's store did not answer"
UNTOLD_LANDS_WITHIN_S = 30.0


def train_through_faults(out_dir: str) -> Result:
    """Checked collectives in a loop (a small and a pipelined allreduce, a broadcast: both forms
    of the agreement) while the test breaks the network. Each rank writes ``ready<rank>`` after
    a few rounds; the test writes ``healed`` once the network is whole again, and ``stop``
    when the ranks that still run should stop (they agree on it, in an allreduce). A rank
    whose collective raised waits for ``healed``, then calls the failed group again, makes and
    uses a new group, and calls the failed group until its reason is the one the store holds."""
    rank, world = dist.get_rank(), dist.get_world_size()
    total = world * (world + 1) // 2
    wrong: list[str] = []
    steps: list[float] = []
    error = None
    last_success = time.monotonic()
    failed_after_s = None
    stop = _marker(out_dir, "stop")
    ready = _marker(out_dir, f"ready{rank}")
    iteration = 0
    while True:
        try:
            # The ranks stop together: one that saw the marker alone would leave the others
            # waiting in their next collective.
            seen = torch.tensor([float(stop.exists())])
            dist.all_reduce(seen, op=dist.ReduceOp.MAX)
            if seen.item() > 0:
                break
            for n in (4, 300_000):
                t = torch.full((n,), float(rank + 1))
                dist.all_reduce(t)
                if not bool((t == total).all()):
                    wrong.append(f"allreduce of {n} at iteration {iteration}")
            t = torch.full((1000,), float(rank) if rank == iteration % world else -1.0)
            dist.broadcast(t, src=iteration % world)
            if not bool((t == iteration % world).all()):
                wrong.append(f"broadcast at iteration {iteration}")
        except Exception as exc:  # what the test checks
            failed_after_s = time.monotonic() - last_success
            error = f"{type(exc).__name__}: {exc}"
            break
        now = time.monotonic()
        steps.append(now - last_success)
        last_success = now
        iteration += 1
        if iteration == 20:
            ready.write_text("")
    result: Result = {
        "iterations": iteration,
        "wrong": wrong,
        "error": error,
        "failed_after_s": failed_after_s,
        "longest_step_s": max(steps, default=None),
    }
    if error is None:
        return result
    if not _await_marker(_marker(out_dir, "healed"), 120):
        return result
    result["failed_group_again"] = _attempt(lambda: dist.all_reduce(torch.ones(4)))
    group = dist.new_group(backend=harness.backend_under_test())
    t = torch.full((5,), float(rank + 1))
    result["new_group_error"] = _attempt(lambda: dist.all_reduce(t, group=group))
    result["new_group_exact"] = bool((t == total).all())
    # A rank that could not tell the store its reason adopts the one that won once its request
    # lands (the network is back, but its connection may still be in TCP's retransmit backoff).
    deadline = time.monotonic() + UNTOLD_LANDS_WITHIN_S
    while True:
        again = _attempt(lambda: dist.all_reduce(torch.ones(4)))
        if again is None or UNTOLD not in again or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    result["failed_group_later"] = again
    return result


SCENARIOS: dict[str, Callable[..., Result]] = {
    "random_program": random_program,
    "ddp": ddp,
    "kill": kill,
    "mismatch": mismatch,
    "alltoall": alltoall,
    "chain_broadcast": chain_broadcast,
    "one_way_mismatch": one_way_mismatch,
    "skip": skip,
    "cuda": cuda,
    "train_through_faults": train_through_faults,
    "slow_rank": slow_rank,
    "make_groups": make_groups,
}

# Debian's libfaketime (the multithreaded build), wherever the architecture puts it.
FAKETIME_LIBRARY = next(iter(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")), "")


def _shift_clock_if_asked() -> None:
    """DC_JOB_FAKETIME=HOST:OFFSET: on HOST, re-executes this rank with its wall clock shifted
    by OFFSET (libfaketime; the steady clock is left alone, as NTP leaves it)."""
    asked = os.environ.get("DC_JOB_FAKETIME", "")
    if not asked or os.environ.get("FAKETIME"):
        return
    host, offset = asked.split(":", 1)
    if socket.gethostname() != host:
        return
    preload = " ".join(p for p in (os.environ.get("LD_PRELOAD", ""), FAKETIME_LIBRARY) if p)
    env = {**os.environ, "LD_PRELOAD": preload, "FAKETIME": offset,
           "FAKETIME_DONT_FAKE_MONOTONIC": "1"}  # fmt: skip
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _be_late_if_asked() -> None:
    """DC_JOB_LATE=HOST:SECONDS (see the module's docstring)."""
    asked = os.environ.get("DC_JOB_LATE", "")
    if not asked or harness.backend_under_test() != "dummy":
        return
    host, seconds = asked.split(":", 1)
    if socket.gethostname() != host:
        return
    from dummy_collectives import _hierarchy

    made = _hierarchy.DummyBackend

    class Late:
        @staticmethod
        def _across_hosts(*args: Any, **kwargs: Any) -> Any:
            time.sleep(float(seconds))
            return made._across_hosts(*args, **kwargs)

    _hierarchy.DummyBackend = Late  # type: ignore[assignment, misc]


def main() -> None:
    _shift_clock_if_asked()
    scenario, out_dir, *args = sys.argv[1:]
    # A failed group's flight recorder dumps land beside the results (test_multihost reads them).
    os.environ["TORCH_FR_DUMP_TEMP_FILE"] = str(Path(out_dir, "fr_rank_"))
    timeout = float(os.environ.get("DC_JOB_TIMEOUT_S", "120"))
    backend = harness.backend_under_test()  # dummy, or gloo (DC_TEST_BACKEND)
    module = harness.backend_module_for(backend)
    if module:
        importlib.import_module(module)
    _be_late_if_asked()
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    rank = dist.get_rank()
    result: Result = {"rank": rank, "hostname": socket.gethostname(), **topology()}
    try:
        result.update(SCENARIOS[scenario](out_dir, *args))
    except Exception:
        result["crashed"] = traceback.format_exc()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    if scenario == "kill":
        # The job failed, as a real one whose rank died does: a non-zero exit. With a clean
        # exit the agent of the host that lost no rank would wait at torchrun's exit barrier
        # (300 s) for the other host's agent, which failed and never comes.
        sys.exit(1)
    if scenario != "skip":  # its group failed: nothing to tear down in step
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
