"""Process group, device and precision plumbing shared by the trainer (and any other torchrun job).

Why a module of its own: the training loop should read as optimisation, not as launcher
bookkeeping. `Context` reads the torchrun environment (``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``), picks the device (CUDA when present unless ``cpu`` is asked), opens a NCCL or
gloo process group, and offers the few collectives the trainer uses. `wrap_model` applies DDP, or
FSDP2 (``fully_shard`` per decoder layer, then the root) for models that outgrow one device;
`grad_sync` turns gradient synchronisation off for all but the last accumulation micro-step.
A single process (no torchrun) gets no process group and no wrapper at all.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import sys

from pretrain.config import UsageError


class Context:
    """Process-group, device and precision facts of this process."""

    def __init__(self, device_arg: str):
        import torch
        import torch.distributed as dist

        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device_arg == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda given but no CUDA device is available")
        cuda = torch.cuda.is_available() and device_arg != "cpu"
        self.device = torch.device(f"cuda:{local}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(self.device)
            torch.backends.cuda.matmul.allow_tf32 = True
        if self.world > 1 and not dist.is_initialized():
            # generous timeout: rank 0 alone trains the tokenizer and packs a paper-scale corpus
            # while the other ranks wait in the first collective
            dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(minutes=90))
        self.dist = dist if self.world > 1 else None
        self.cuda = cuda

    def bf16(self, cpu_bf16: bool = False) -> bool:
        """Whether forward passes autocast to bf16: always on CUDA; on a CPU with ``cpu_bf16`` where it
        multiplies bf16 natively (`pretrain.model.cpu_has_bf16`)."""
        from pretrain.model import cpu_has_bf16
        return self.cuda or (cpu_bf16 and cpu_has_bf16())

    def autocast(self, cpu_bf16: bool = False):
        import torch

        if not self.bf16(cpu_bf16):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=torch.bfloat16)

    def barrier(self):
        if self.dist:
            self.dist.barrier()

    def all_reduce(self, tensor):
        if self.dist:
            self.dist.all_reduce(tensor)
        return tensor

    def agree(self, ok: bool) -> bool:
        """True when every process reports ok (so that a failing rank never leaves others waiting)."""
        if not self.dist:
            return ok
        import torch

        flag = torch.tensor([1 if ok else 0], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN)
        return bool(flag.item())

    def say(self, *msg, err: bool = False):
        if self.rank == 0:
            print(*msg, file=sys.stderr if err else sys.stdout, flush=True)


def wrap_model(model, ctx: Context, fsdp: bool = False):
    """DDP or FSDP2 under torchrun; the model itself otherwise."""
    if ctx.world == 1:
        return model
    if fsdp:
        from torch.distributed.fsdp import fully_shard

        for layer in model.model.layers:
            fully_shard(layer)
        return fully_shard(model)
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[ctx.device.index] if ctx.cuda else None)


def grad_sync(model, sync: bool):
    """Skip the gradient all-reduce on all but the last micro-step of an accumulation."""
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
        return contextlib.nullcontext()
    if not sync and hasattr(model, "no_sync"):  # DDP
        return model.no_sync()
    return contextlib.nullcontext()
