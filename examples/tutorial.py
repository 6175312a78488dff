"""Step 4 of PyTorch's tutorial "Customize Process Group Backends Using Cpp Extensions".

https://pytorch.org/tutorials/intermediate/process_group_cpp_extension_tutorial.html

Run it alone (``python examples/tutorial.py``: one rank) or with
``torchrun --standalone --nproc-per-node 1 examples/tutorial.py``. CPU tensors
go to gloo and CUDA tensors to the ``dummy`` backend. With
``DUMMY_COLLECTIVES_MODE=zero`` the dummy backend behaves like the tutorial's:
the CUDA allreduce prints zeros and broadcast raises RuntimeError.
"""

import os

import torch
import torch.distributed as dist

import dummy_collectives  # noqa: F401 - registers the "dummy" backend

os.environ.setdefault("MASTER_ADDR", "localhost")
os.environ.setdefault("MASTER_PORT", "29500")

rank = int(os.environ.get("RANK", "0"))
world_size = int(os.environ.get("WORLD_SIZE", "1"))
dist.init_process_group("cpu:gloo,cuda:dummy", rank=rank, world_size=world_size)

# this goes through gloo
x = torch.ones(6)
dist.all_reduce(x)
print(f"cpu allreduce: {x}")

# this goes through dummy
if torch.cuda.is_available():
    y = x.cuda()
    dist.all_reduce(y)
    print(f"cuda allreduce: {y}")

    try:
        dist.broadcast(y, 0)
    except RuntimeError:
        print("got RuntimeError when calling broadcast")

dist.destroy_process_group()
