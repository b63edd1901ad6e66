"""A distributed PyTorch job in a few lines: every rank adds its number into one sum (an all-reduce).

    nanum submit --nodes 2 --gpus 0 --torchrun examples/allreduce.py

torchrun starts it on every node with the rendezvous filled in; on CPUs it uses the gloo backend, on GPUs nccl.
"""

import os

import torch
import torch.distributed as dist

backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend)
rank, world = dist.get_rank(), dist.get_world_size()
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
value = torch.tensor([float(rank + 1)], device="cuda" if backend == "nccl" else "cpu")
dist.all_reduce(value)
print(f"rank {rank} of {world} on {os.uname().nodename}: all-reduce sum {value.item():g} "
      f"(expected {world * (world + 1) // 2})", flush=True)
dist.destroy_process_group()
