"""PyTorch's CommDebugMode recipe, on the dummy backend: tensor parallelism on CPU.

https://pytorch.org/tutorials/recipes/distributed_comm_debug_mode.html

Run:  python examples/commdebug_tp.py [--out-dir DIR] [--world-size W]   (spawns the ranks)
  or: torchrun --nproc-per-node 2 examples/commdebug_tp.py [--out-dir DIR]

As in the recipe, an ``MLPModule`` (net1: Linear(10, 16), ReLU, net2: Linear(16, 10); the
module of torch's DTensor tests) is parallelized over a 1-d device mesh, ``net1`` with
``ColwiseParallel`` and ``net2`` with ``RowwiseParallel``, and its forward pass runs under
``CommDebugMode``. Rank 0 then:

- prints the operation-level tracing table at noise level 0: one
  ``c10d_functional.all_reduce`` in the forward pass (net2's row-parallel output);
- logs the table at noise level 1 to ``DIR/transformer_operation_log.txt``
  (``log_comm_debug_tracing_table_to_file``);
- dumps the noise-level-2 information as JSON to ``DIR/comm_mode_log.json``
  (``generate_json_dump``; the recipe's visual browser loads this file).

The mesh is ``init_device_mesh("cpu", (world_size,))`` over the default process group, so
the collectives run on the dummy backend. Beyond the recipe, every rank checks the
parallelized model against the same module unparallelized: weights and input are rounded to
multiples of 1/64, so every product and partial sum is exact in float32 and the output, the
parameter gradients and the input gradient must be bitwise equal. The backward pass runs
under a second CommDebugMode: the input's gradient needs one more all_reduce.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _launch import launch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import dummy_collectives  # noqa: F401  (registers the "dummy" backend)

LOG_FILE = "transformer_operation_log.txt"
JSON_FILE = "comm_mode_log.json"


class MLPModule(nn.Module):
    """``torch.testing._internal.distributed._tensor.common_dtensor.MLPModule``."""

    def __init__(self, device: str | torch.device, bias: bool = True) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.net1 = nn.Linear(10, 16, bias=bias, device=device)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 10, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def dyadic(t: torch.Tensor) -> torch.Tensor:
    """``t`` rounded to a multiple of 1/64 (exact sums and products in float32 here)."""
    return (t * 64).round() / 64


def run(out_dir: Path | str) -> dict[str, Any]:
    """The recipe plus the checks; every rank returns what it saw (rank 0 writes files)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = Path(out_dir)
    device_mesh = init_device_mesh("cpu", (world,))

    reference = MLPModule("cpu")
    with torch.no_grad():
        for p in reference.parameters():
            p.copy_(dyadic(p))
    model = parallelize_module(
        copy.deepcopy(reference),
        device_mesh,
        {"net1": ColwiseParallel(), "net2": RowwiseParallel()},
    )
    torch.manual_seed(0)
    inp = dyadic(torch.rand(8, 10)).requires_grad_()

    comm_mode = CommDebugMode()
    with comm_mode:
        output = model(inp)

    table = comm_mode.generate_comm_debug_tracing_table(noise_level=0)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        # print the operation level collective tracing information
        print(table)
        # log the operation level collective tracing information to a file
        comm_mode.log_comm_debug_tracing_table_to_file(noise_level=1, file_name=str(out / LOG_FILE))
        # dump the operation level collective tracing information to json file,
        # used in the visual browser
        comm_mode.generate_json_dump(noise_level=2, file_name=str(out / JSON_FILE))

    ref_inp = inp.detach().clone().requires_grad_()
    ref_output = reference(ref_inp)
    backward_mode = CommDebugMode()
    with backward_mode:
        output.sum().backward()
    ref_output.sum().backward()

    grads_equal = {}
    for (name, p), (_, q) in zip(
        model.named_parameters(), reference.named_parameters(), strict=True
    ):
        assert isinstance(p, DTensor) and p.grad is not None and q.grad is not None
        grads_equal[name] = torch.equal(p.grad.full_tensor(), q.grad)
    assert inp.grad is not None and ref_inp.grad is not None
    return {
        "rank": rank,
        "backend": dist.get_backend(device_mesh.get_group()),
        "table": table,
        "forward_counts": {str(k): v for k, v in comm_mode.get_comm_counts().items()},
        "backward_counts": {str(k): v for k, v in backward_mode.get_comm_counts().items()},
        "output_equal": torch.equal(output, ref_output),
        "grads_equal": grads_equal,
        "input_grad_equal": torch.equal(inp.grad, ref_inp.grad),
        "placements": {name: str(p.placements) for name, p in model.named_parameters()},
    }


def main(out_dir: str) -> None:
    dist.init_process_group("dummy")
    result = run(out_dir)
    ok = (
        result["output_equal"]
        and result["input_grad_equal"]
        and all(result["grads_equal"].values())
    )
    print(
        f"rank {result['rank']}: output equal to the single-process model: "
        f"{result['output_equal']}; gradients equal: {result['grads_equal']}; input gradient "
        f"equal: {result['input_grad_equal']}; backward collectives: {result['backward_counts']}"
    )
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(f"rank {result['rank']}: tensor parallel result differs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        # Not the current folder (often the repo): one folder under the temp dir that every
        # rank names alike, under torchrun too.
        default=str(Path(tempfile.gettempdir(), "dummy_collectives-commdebug_tp")),
        help="where rank 0 writes the log and JSON",
    )
    parser.add_argument("--world-size", type=int, default=2, help="ranks to spawn (no torchrun)")
    cli = parser.parse_args()
    launch(main, cli.world_size, cli.out_dir)
