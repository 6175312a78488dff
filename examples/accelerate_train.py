"""Hugging Face accelerate over the dummy backend (or gloo, to compare).

On CPU, accelerate accepts only gloo (or mpi, ccl) by name: ``Accelerator(cpu=True,
kwargs_handlers=[InitProcessGroupKwargs(backend="dummy")])`` raises "ValueError: Your assigned
backend dummy is not available, please use gloo". What works: make the default group yourself
first; accelerate then uses it (its ``state.backend`` still says "gloo").

Run (2 CPU ranks; --backend gloo runs the same training over gloo):

    torchrun --nproc-per-node 2 examples/accelerate_train.py --backend dummy
    accelerate launch --cpu --num_processes 2 examples/accelerate_train.py --backend dummy
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from _results import report
from _tiny_lm import tiny_gpt2, token_sequences
from accelerate import Accelerator
from torch.utils.data import DataLoader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("dummy", "gloo"), default="dummy")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=None, help="write losses and weight checksum (JSON)")
    args = parser.parse_args()

    if args.backend == "dummy":
        import dummy_collectives  # noqa: F401  (registers "dummy")

        dist.init_process_group("dummy")  # before the Accelerator, which then keeps it
    accelerator = Accelerator(cpu=True)  # with --backend gloo it makes a gloo group itself

    model = tiny_gpt2(seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # Each rank takes its own batches of the same dataset (accelerate shards the loader).
    loader = DataLoader(token_sequences(8 * args.steps, seed=0), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    losses: list[float] = []
    step_ends: list[float] = []
    for _, batch in zip(range(args.steps), loader, strict=False):
        loss = model(input_ids=batch, labels=batch).loss
        accelerator.backward(loss)  # DDP all-reduces the gradients over the default group
        optimizer.step()
        optimizer.zero_grad()
        losses.append(accelerator.gather(loss.detach()).mean().item())
        step_ends.append(time.perf_counter())

    backend = dist.get_backend()
    state = accelerator.unwrap_model(model).state_dict()
    if accelerator.is_main_process:
        report("accelerate", backend, losses, state, args.out, step_ends)
    # The DDP model goes before the group: where it holds a gloo group's last reference, torch
    # destroys that group holding the GIL, which its worker thread may still need (a deadlock).
    model, optimizer, loader = accelerator.free_memory(model, optimizer, loader)
    accelerator.end_training()  # destroys the process group too


if __name__ == "__main__":
    main()
