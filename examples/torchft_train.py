"""Fault-tolerant data parallelism with torchft over the dummy backend (or gloo, to compare).

torchft's Manager takes a process-group object, not a backend name, and rebuilds its group on
every new quorum (a replica joins or leaves): ``dummy_collectives.torchft`` has that object,
``ProcessGroupDummyCollectives``, as torchft has ``ProcessGroupGloo``.

Run (a lighthouse, then one torchrun per replica group; here 2 replica groups of 1 rank):

    torchft_lighthouse --min_replicas 1 --bind 127.0.0.1:29510 &
    export TORCHFT_LIGHTHOUSE=http://127.0.0.1:29510
    REPLICA_GROUP_ID=0 torchrun --nproc-per-node 1 --master-port 29600 \\
        examples/torchft_train.py --backend dummy &
    REPLICA_GROUP_ID=1 torchrun --nproc-per-node 1 --master-port 29601 \\
        examples/torchft_train.py --backend dummy

``--leave-after K``: replica group 1 leaves after step K, and the others go on in a new quorum
(a group of one). ``--start-file PATH`` (the same new path for every replica group): each waits
there until all ``--replicas`` have their Manager up before the first quorum, so the first step
has everyone and two runs compare exactly (without it, the first replica may start alone).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from _results import report
from torch import nn
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
from torchft.process_group import ProcessGroup

from dummy_collectives.torchft import ProcessGroupDummyCollectives


def make_group(backend: str) -> ProcessGroup:
    timeout = timedelta(seconds=30)
    if backend == "dummy":
        return ProcessGroupDummyCollectives(timeout=timeout)
    return ProcessGroupGloo(timeout=timeout)


def wait_for_replicas(path: str, replicas: int) -> None:
    """Return once ``replicas`` processes have called this with ``path``."""
    store = dist.FileStore(path, -1)
    if store.add("arrived", 1) == replicas:
        store.set("all_arrived", "1")
    store.wait(["all_arrived"], timedelta(seconds=120))
    # Both Managers now heartbeat: give the lighthouse a few of their heartbeats (every
    # 100 ms) so that it waits for everyone before forming the first quorum.
    time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("dummy", "gloo"), default="dummy")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=2, help="replica groups in the job")
    parser.add_argument("--leave-after", type=int, default=None, metavar="K")
    parser.add_argument("--start-file", default=None)
    parser.add_argument("--out", default=None, help="write losses and weight checksum (JSON)")
    args = parser.parse_args()

    replica = int(os.environ.get("REPLICA_GROUP_ID", "0"))
    torch.manual_seed(0)  # the same initial weights in every replica group
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
    model.append(nn.Linear(64, 8))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    def load_state_dict(state: dict[str, dict[str, object]]) -> None:
        model.load_state_dict(state["model"])
        sgd.load_state_dict(state["optim"])

    def state_dict() -> dict[str, dict[str, object]]:
        return {"model": model.state_dict(), "optim": sgd.state_dict()}

    manager = Manager(
        pg=make_group(args.backend),
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"replica_{replica}",
        timeout=timedelta(seconds=30),
    )
    ddp = DistributedDataParallel(manager, model)
    optimizer = Optimizer(manager, sgd)
    if args.start_file:
        wait_for_replicas(args.start_file, args.replicas)

    losses: list[float] = []
    participants: list[int] = []
    step_ends: list[float] = []
    data = torch.Generator()
    while manager.current_step() < args.steps:
        step = manager.current_step()
        if replica == 1 and args.leave_after is not None and step >= args.leave_after:
            break
        data.manual_seed(1000 * replica + step)
        x = torch.randn(16, 32, generator=data)
        y = torch.randn(16, 8, generator=data)
        optimizer.zero_grad()  # starts the step's quorum
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # gradients averaged over the quorum's replica groups
        optimizer.step()  # applied only if every participant committed the step
        losses.append(loss.item())
        participants.append(manager.num_participants())
        step_ends.append(time.perf_counter())
    manager.shutdown(wait=False)
    report(
        f"torchft replica {replica}",
        args.backend,
        losses,
        model.state_dict(),
        args.out,
        step_ends,
        participants=participants,
        steps_committed=manager.current_step(),
    )


if __name__ == "__main__":
    main()
