"""Lightning over the dummy backend (or gloo, to compare): its own DDPStrategy takes the
backend's name, ``DDPStrategy(process_group_backend="dummy")``; the import registers it.

Run (2 CPU ranks, under torchrun; --backend gloo runs the same training over gloo):

    torchrun --nproc-per-node 2 examples/lightning_train.py --backend dummy
"""

from __future__ import annotations

import argparse
import time

import lightning as L
import torch
import torch.distributed as dist
from _results import report
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import dummy_collectives  # noqa: F401  (registers "dummy")


class Regression(L.LightningModule):
    """A small MLP fitting random targets; records the losses of the rank it runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.net.append(nn.Linear(64, 8))
        self.losses: list[float] = []
        self.step_ends: list[float] = []

    def training_step(self, batch: list[torch.Tensor], batch_index: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def on_train_batch_end(self, outputs: object, batch: object, batch_index: int) -> None:
        self.step_ends.append(time.perf_counter())  # after the optimizer's step

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("dummy", "gloo"), default="dummy")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=None, help="write losses and weight checksum (JSON)")
    args = parser.parse_args()

    L.seed_everything(0, verbose=False)
    model = Regression()
    data = torch.Generator().manual_seed(1)
    count = 2 * 8 * args.steps  # 8 samples per rank and step
    dataset = TensorDataset(
        torch.randn(count, 32, generator=data), torch.randn(count, 8, generator=data)
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend=args.backend),
        max_steps=args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    # Lightning gives each rank its share of the data (a DistributedSampler; shuffle off).
    trainer.fit(model, DataLoader(dataset, batch_size=8))
    if trainer.is_global_zero:
        report(
            "lightning",
            dist.get_backend(),
            model.losses,
            model.state_dict(),
            args.out,
            model.step_ends,
        )


if __name__ == "__main__":
    main()
