"""One flat configuration for tokenizer, model and pre-training, and the SCALE dial.

Why one flat dataclass: every knob of a run (model shape, data, optimiser, bookkeeping) lives in
`PretrainConfig`, so a run folder's `train_config.json` alone says how its weights were made, a
preset is just a dict of field overrides, and any field can be set from the command line
(`--set field=value`) without a flag per field.

Scales: the per-scale overrides are `planning_gym.scales.PRETRAIN` (the one page that says what
``tiny`` / ``small`` / ``paper`` mean at every stage); `resolve_scale` picks ``paper`` on a CUDA
machine and ``small`` otherwise when none is given, and says so.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from planning_gym.cli import UsageError, check_fields, coerce, parse_sets, spec
from planning_gym.scales import PRETRAIN, SCALES, resolve_scale  # noqa: F401  (resolve_scale: re-exported)
from pretrain.tracking import TRACKERS, check_tracker
LOSS_ON = ("all", "agent")


@dataclass
class PretrainConfig:
    scale: str = spec("tiny", "the SCALE preset this config started from", choices=SCALES)
    # tokenizer + model (transformers Qwen2 / Qwen2.5 architecture)
    vocab_size: int = spec(3000, "BPE target size (the model uses the trained tokenizer's size)", ge=260)
    hidden_size: int = spec(128, "model width", ge=1)
    num_layers: int = spec(4, "transformer blocks", ge=1)
    num_heads: int = spec(4, "attention heads", ge=1)
    num_kv_heads: int = spec(2, "key/value heads (grouped-query attention)", ge=1)
    intermediate_size: int = spec(384, "MLP width", ge=1)
    max_position_embeddings: int = spec(4096, "longest position the rotary table covers", ge=1)
    rope_theta: float = spec(10000.0, "rotary base", gt=0)
    rms_norm_eps: float = spec(1e-6, "RMSNorm epsilon", gt=0)
    tie_embeddings: bool = spec(True, "share input and output embeddings")
    init_std: float = spec(0.02, "initialisation standard deviation", gt=0)
    # data
    block_size: int = spec(512, "packed sequence length", ge=1)
    loss_on: str = spec("all", "train on all tokens or only the agent's turns", choices=LOSS_ON)
    # optimisation
    steps: int = spec(300, "optimiser steps", ge=1)
    batch_size: int = spec(4, "global sequences per optimiser step (all ranks, all micro-steps)", ge=1)
    micro_batch: int = spec(4, "sequences per forward pass per process", ge=1)
    lr: float = spec(3e-3, "peak learning rate", gt=0)
    min_lr_ratio: float = spec(0.1, "the cosine decays to lr x min_lr_ratio", ge=0, le=1)
    warmup_steps: int = spec(20, "linear warm-up steps", ge=0)
    weight_decay: float = spec(0.1, "AdamW weight decay", ge=0)
    beta1: float = spec(0.9, "AdamW beta1", ge=0, lt=1)
    beta2: float = spec(0.95, "AdamW beta2", ge=0, lt=1)
    adam_eps: float = spec(1e-8, "AdamW epsilon", gt=0)
    grad_clip: float = spec(1.0, "gradient-norm clip (a negative clip would turn descent into ascent)", gt=0)
    # bookkeeping
    eval_every: int = spec(50, "steps between test_id loss evaluations", ge=1)
    eval_blocks: int = spec(32, "test_id blocks per evaluation", ge=1)
    ckpt_every: int = spec(100, "steps between checkpoints", ge=1)
    keep_checkpoints: int = spec(2, "newest checkpoints kept", ge=1)
    log_every: int = spec(10, "steps between metrics rows", ge=1)
    seed: int = spec(0, "data order and initialisation seed", ge=0)
    tracker: str = spec("none", "also log metrics to a tracker: none | tensorboard (RUN/tensorboard/)", choices=TRACKERS)
    # systems
    compile: bool = spec(False, "torch.compile the model")
    cpu_bf16: bool = spec(False, "bf16 autocast on a CPU that multiplies bf16 natively (else fp32), as CUDA "
                          "runs always do; off by default: runs recorded before it ran fp32 on CPUs")
    fsdp: bool = spec(False, "shard with FSDP2 under torchrun instead of DDP")

    def validate(self) -> "PretrainConfig":
        """Raise UsageError on values no run can use (each field's declared type and range, then
        the rules that tie fields together); return self."""
        check_fields(self)
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise UsageError("hidden_size must divide by num_heads and num_heads by num_kv_heads")
        head_dim = self.hidden_size // self.num_heads
        if head_dim % 2:
            raise UsageError(f"hidden_size / num_heads = {head_dim} must be even (rotary embeddings rotate pairs)")
        if self.block_size > self.max_position_embeddings:
            raise UsageError("block_size exceeds max_position_embeddings")
        check_tracker(self.tracker)
        return self

    def grad_accum(self, world_size: int) -> int:
        """Micro-steps per optimiser step so that world_size * micro_batch * accum == batch_size."""
        per_pass = self.micro_batch * world_size
        if self.batch_size % per_pass:
            raise UsageError(f"batch_size {self.batch_size} is not a multiple of micro_batch "
                             f"{self.micro_batch} x world size {world_size}")
        return self.batch_size // per_pass

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> "PretrainConfig":
        """Rebuild from `to_json` output; unknown or mistyped fields are a UsageError."""
        if not isinstance(data, dict):
            raise UsageError("config is not a JSON object")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UsageError(f"config has unknown fields: {', '.join(unknown)}")
        values = {k: coerce(known[k], v) for k, v in data.items()}
        return cls(**values).validate()


PRESETS = PRETRAIN    # field overrides per scale, on top of the dataclass defaults (which are tiny)


def make_config(scale: str, **overrides: Any) -> PretrainConfig:
    """The preset for ``scale`` with ``overrides`` applied (None values are ignored)."""
    if scale not in PRESETS:
        raise UsageError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
    values = {**PRESETS[scale], **{k: v for k, v in overrides.items() if v is not None}, "scale": scale}
    known = {f.name for f in fields(PretrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"unknown config field(s): {', '.join(unknown)}")
    return PretrainConfig(**values).validate()


def parse_set(items: list[str], config_cls: type = None) -> dict[str, Any]:
    """``--set field=value`` overrides for the fields of ``config_cls`` (default `PretrainConfig`;
    post-training passes its own); ``scale`` and ``method`` have their own flags."""
    return parse_sets(items, config_cls or PretrainConfig, fixed=("scale", "method"))
