"""Hugging Face Trainer over the dummy backend (or gloo, to compare).

The Trainer picks its process group through accelerate, which on CPU accepts only gloo (or mpi,
ccl) by name: ``TrainingArguments(use_cpu=True, ddp_backend="dummy")`` raises "ValueError: Your
assigned backend dummy is not available, please use gloo", and on the command line
``--ddp_backend dummy`` stops at "invalid choice: 'dummy'". What works: make the default group
yourself before the TrainingArguments are made, set ``use_cpu``, leave ``ddp_backend`` unset;
the Trainer then trains over that group. This script does so when given ``--backend dummy``,
and takes every other TrainingArguments option on its command line (its own HfArgumentParser):

    torchrun --nproc-per-node 2 examples/trainer_train.py --backend dummy --use_cpu

(``--use_cpu`` matters: without it, on a machine with no GPU, accelerate runs every rank on
its own, without DDP, each over the whole dataset.)
"""

from __future__ import annotations

import gc
import os
import tempfile
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from _results import report
from _tiny_lm import tiny_gpt2, token_sequences
from torch.utils.data import Dataset
from transformers import HfArgumentParser, Trainer, TrainerCallback, TrainingArguments

# This example's defaults for TrainingArguments; the command line's own come after, and win.
DEFAULTS = [
    "--max_steps", "10", "--per_device_train_batch_size", "4", "--learning_rate", "5e-3",
    "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
    "--disable_tqdm", "true", "--output_dir", os.path.join(tempfile.gettempdir(), "trainer_train"),
]  # fmt: skip


@dataclass
class ExampleArguments:
    backend: str = field(default="dummy", metadata={"choices": ["dummy", "gloo"]})
    out: str | None = field(default=None, metadata={"help": "write losses and weights (JSON)"})


class Tokens(Dataset):
    """Random token sequences, as language-modelling examples (labels = inputs)."""

    def __init__(self, sequences: torch.Tensor) -> None:
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.sequences[index], "labels": self.sequences[index]}


class StepEnds(TrainerCallback):
    """When each optimizer step ended (the loop's time per step)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_step_end(self, *args: object, **kwargs: object) -> None:
        self.times.append(time.perf_counter())


def main() -> None:
    # The group must exist before the TrainingArguments: making them sets up accelerate's
    # state, which makes a gloo group when there is none. So this script's own arguments first.
    example, rest = HfArgumentParser(ExampleArguments).parse_args_into_dataclasses(
        return_remaining_strings=True
    )
    if example.backend == "dummy":
        import dummy_collectives  # noqa: F401  (registers "dummy")

        dist.init_process_group("dummy")
    # With --backend gloo, accelerate makes its gloo group here.
    (training,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(DEFAULTS + rest)
    trainer = Trainer(
        model=tiny_gpt2(seed=training.seed),
        args=training,
        train_dataset=Tokens(token_sequences(8 * max(training.max_steps, 1), seed=0)),
        callbacks=[step_ends := StepEnds()],
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    backend = dist.get_backend()
    if trainer.is_world_process_zero():
        report("trainer", backend, losses, trainer.model.state_dict(), example.out, step_ends.times)
    # The DDP model goes before the group: where it holds a gloo group's last reference, torch
    # destroys that group holding the GIL, which its worker thread may still need (a deadlock).
    trainer.accelerator.free_memory()
    del trainer
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
