"""Survive a dead rank: the survivors shrink the group and keep training, without a restart.

Run (4 ranks on this host; rank 3 is SIGKILLed during step 5's backward pass):
    python examples/recover_after_a_dead_rank.py
Across hosts (one launcher per host; host 0's launcher hosts the store, as torchrun's agent does):
    python examples/recover_after_a_dead_rank.py --nnodes 2 --node-rank 0 --master-addr HOST0 \
        --nproc-per-node 2      # on host 0; --node-rank 1 on host 1
Options: --steps N, --kill-rank R, --kill-step S, --simulated-hosts H (hosts made of this one,
for testing: DUMMY_COLLECTIVES_HOST_ID per rank).

What it shows (README, "Recovering from a dead rank"):

1. Every rank trains a small MLP with DistributedDataParallel over the default group ("dummy").
2. The victim kills itself (SIGKILL) in the middle of a step: after the forward pass, as the
   backward pass begins, before its gradients reach anyone.
3. The survivors' backward raises (a DistBackendError naming the dead rank, within about 0.1 s
   on one host). They ask whom they lost (``dummy_collectives.dead_ranks()``), call
   ``dist.shrink_group(dead)`` -- which makes the survivors' group the new default -- wrap the
   model in a new DDP and redo the failed step, now averaged over the survivors.
4. Each survivor reports the time from the kill to its first successful step after the shrink,
   and checks its weights against a replay of the same steps in one process (steps before the
   kill averaged over every rank, later ones over the survivors).

The launcher matters: torchrun stops the whole worker group when one worker dies, so the ranks
here are processes started directly, and the store lives in the launcher (host 0's), not in a
rank that might die. The launcher exits 0 when every survivor finished with the replay's weights.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import dummy_collectives  # registers the "dummy" backend

TIMEOUT = datetime.timedelta(seconds=60)
LEARNING_RATE = 0.1


def say(line: str) -> None:
    """Prints `line` in one write: every rank shares the launcher's stdout, and where Python
    runs unbuffered (PYTHONUNBUFFERED) print() writes the text and its newline apart, so another
    rank's line could land between them."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def make_model() -> nn.Module:
    torch.manual_seed(0)  # every rank, and the replay, starts from the same weights
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).double()


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s data for ``step`` (its rank in the original group: data stays put)."""
    generator = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(8, 16, generator=generator, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def loss_of(model: nn.Module, rank: int, step: int) -> torch.Tensor:
    x, y = batch(rank, step)
    return nn.functional.mse_loss(model(x), y)


def replay(steps: int, world_size: int, kill_rank: int, kill_step: int) -> nn.Module:
    """The same training in one process: gradients averaged over every rank before the kill,
    over the survivors from the killed step on (which the survivors redo)."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for step in range(steps):
        ranks = [r for r in range(world_size) if step < kill_step or r != kill_rank]
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for r in ranks:
            model.zero_grad()
            loss_of(model, r, step).backward()
            for g, p in zip(grads, model.parameters(), strict=True):
                g += p.grad / len(ranks)
        for g, p in zip(grads, model.parameters(), strict=True):
            p.grad = g
        optimizer.step()
    return model


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    """One rank: train, and recover when a peer dies."""
    if args.simulated_hosts:
        os.environ["DUMMY_COLLECTIVES_HOST_ID"] = f"sim{rank * args.simulated_hosts // world_size}"
    torch.set_num_threads(1)
    store = dist.TCPStore(args.master_addr, args.master_port, is_master=False, timeout=TIMEOUT)
    dist.init_process_group("dummy", store=store, rank=rank, world_size=world_size, timeout=TIMEOUT)
    model = make_model()
    ddp = DDP(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    report: dict[str, object] = {"rank": rank}
    step = 0
    while step < args.steps:
        loss = ddp(batch(rank, step)[0])
        loss = nn.functional.mse_loss(loss, batch(rank, step)[1])
        if rank == args.kill_rank and step == args.kill_step:
            # Mid step: the forward pass is done, the backward pass starts (this hook runs
            # first), no gradient has left this rank yet.
            loss.register_hook(lambda grad: die(store))
        try:
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients here: a dead peer raises here
        except Exception as error:  # noqa: BLE001  (a DistBackendError, as any backend's)
            say(f"rank {rank}: step {step} failed: {type(error).__name__}: {error}")
            ddp, step = recover(rank, model, step, report)
            continue  # redo the step on the survivors' group
        optimizer.step()
        if "lost" in report and "kill_to_first_step_s" not in report:
            killed_at = float(store.get("killed_at").decode())
            report["kill_to_first_step_s"] = time.time() - killed_at
        step += 1
    expected = replay(args.steps, world_size, args.kill_rank, args.kill_step)
    difference = max(
        (p - q).abs().max().item()
        for p, q in zip(model.parameters(), expected.parameters(), strict=True)
    )
    report.update(steps=step, new_rank=dist.get_rank(), max_difference_from_replay=difference)
    if "lost" in report:
        say(
            f"rank {rank}: recovered from losing ranks {report['lost']}: shrink "
            f"{report['shrink_s']:.3f} s, first step on the {report['survivors']} survivors "
            f"{report['kill_to_first_step_s']:.3f} s after the kill; weights "
            f"{'equal' if difference <= 1e-12 else 'DIFFER FROM'} the replay (max difference "
            f"{difference:.1e})"
        )
    say(f"rank {rank}: RESULT {json.dumps(report)}")
    dist.destroy_process_group()
    store.add("finished", 1)
    if difference > 1e-12:
        sys.exit(f"rank {rank}: weights differ from the replay by {difference}")


def die(store: dist.Store) -> None:
    store.set("killed_at", str(time.time()))
    store.add("finished", 1)  # counted as done, so that the launcher does not wait for it
    os.kill(os.getpid(), signal.SIGKILL)


def recover(rank: int, model: nn.Module, step: int, report: dict[str, object]) -> tuple[DDP, int]:
    """Shrink the default group to the survivors, wrap the model again, and agree on the step
    to go on from."""
    dead = dummy_collectives.dead_ranks()  # ranks of the failed group this rank knows gone
    error = dist.group.WORLD._get_backend(torch.device("cpu")).get_error()
    say(f"rank {rank}: lost ranks {dead} ({error}); shrinking")
    started = time.time()
    dist.shrink_group(dead)  # only the survivors call it; the new group becomes the default
    report.update(lost=dead, shrink_s=time.time() - started, survivors=dist.get_world_size())
    # Survivors go on from rank 0's state: DDP broadcasts its weights, and its step comes with
    # them. (Here every survivor failed the same step, before optimizer.step(). In general the
    # collective in flight at a death may have completed on some survivors and not on others.)
    agreed = torch.tensor([step])
    dist.broadcast(agreed, src=0)
    return DDP(model), int(agreed.item())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--nproc-per-node", type=int, default=4)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=29531)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--kill-rank", type=int, default=3)
    parser.add_argument("--kill-step", type=int, default=5)
    parser.add_argument("--simulated-hosts", type=int, default=0)
    args = parser.parse_args()
    world_size = args.nnodes * args.nproc_per_node
    # Host 0's launcher hosts the store: it must outlive any rank, so it is not in a rank.
    server = None
    if args.node_rank == 0:
        server = dist.TCPStore(
            args.master_addr,
            args.master_port,
            is_master=True,
            wait_for_workers=False,
            timeout=TIMEOUT,
        )
    context = mp.get_context("spawn")
    ranks = range(args.node_rank * args.nproc_per_node, (args.node_rank + 1) * args.nproc_per_node)
    processes = [context.Process(target=train, args=(r, world_size, args)) for r in ranks]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    if server is not None:  # the other hosts' ranks still use the store: wait for them
        server.wait(["finished"])
        deadline = time.monotonic() + TIMEOUT.total_seconds()
        while server.add("finished", 0) < world_size and time.monotonic() < deadline:
            time.sleep(0.1)
    codes = {r: p.exitcode for r, p in zip(ranks, processes, strict=True)}
    say(f"node {args.node_rank}: exit codes by rank {codes}")
    survivors_ok = all(code == 0 for r, code in codes.items() if r != args.kill_rank)
    victim_killed = args.kill_rank not in codes or codes[args.kill_rank] == -signal.SIGKILL
    return 0 if survivors_ok and victim_killed else 1


if __name__ == "__main__":
    sys.exit(main())
