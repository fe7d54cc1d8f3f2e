"""One flat configuration for tokenizer, model and pre-training, and the SCALE dial.

Why one flat dataclass: every knob of a run (model shape, data, optimiser, bookkeeping) lives in
`PretrainConfig`, so a run folder's `train_config.json` alone says how its weights were made, a
preset is just a dict of field overrides, and any field can be set from the command line
(`--set field=value`) without a flag per field.

Scales (SPEC §1): ``tiny`` (~1M params, tests and smoke runs, a few minutes), ``small`` (~5M
params, a real but reduced run on a 2-core CPU in well under an hour: 1000 steps of 4 x 1024
tokens), ``paper`` (~104M params, the paper's Qwen2.5 shape: hidden 768, 12 layers, 12 heads,
2 KV heads, tied embeddings, 3000-token vocabulary, 9000 steps of 32 x 2048 tokens). Gym
trajectories run to ~1600 tokens, so blocks are 512 / 1024 / 2048 tokens: the larger presets see
whole long-horizon episodes at the positions a rollout will use. `resolve_scale` picks ``paper`` on a CUDA machine and ``small`` otherwise when none
is given, and says so.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from planning_gym.config import SCALES, cuda_present
LOSS_ON = ("all", "agent")


class UsageError(Exception):
    """Bad input from the user (unknown scale, missing corpus, corrupt checkpoint, ...).

    Entry points turn it into one ``error: ...`` line on stderr and exit status 2.
    """


@dataclass
class PretrainConfig:
    scale: str = "tiny"
    # tokenizer + model (transformers Qwen2 / Qwen2.5 architecture)
    vocab_size: int = 3000            # BPE target size; the model uses the trained tokenizer's size
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    init_std: float = 0.02
    # data
    block_size: int = 512             # packed sequence length
    loss_on: str = "all"              # "all" tokens, or only "agent" turn tokens
    # optimisation
    steps: int = 300
    batch_size: int = 4               # global sequences per optimiser step (all ranks, all micro-steps)
    micro_batch: int = 4              # sequences per forward pass per process
    lr: float = 3e-3
    min_lr_ratio: float = 0.1         # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    # bookkeeping
    eval_every: int = 50
    eval_blocks: int = 32             # test_id blocks per evaluation
    ckpt_every: int = 100
    keep_checkpoints: int = 2
    log_every: int = 10
    seed: int = 0
    # systems
    compile: bool = False             # torch.compile the model
    fsdp: bool = False                # shard with FSDP2 under torchrun instead of DDP

    def validate(self) -> "PretrainConfig":
        """Raise UsageError on values no run can use; return self."""
        if self.scale not in SCALES:
            raise UsageError(f"unknown scale {self.scale!r} (choose one of {', '.join(SCALES)})")
        if self.loss_on not in LOSS_ON:
            raise UsageError(f"loss_on must be one of {', '.join(LOSS_ON)}, not {self.loss_on!r}")
        positive = ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                    "intermediate_size", "block_size", "steps", "batch_size", "micro_batch",
                    "eval_every", "eval_blocks", "ckpt_every", "keep_checkpoints", "log_every")
        for name in positive:
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} must be positive, got {getattr(self, name)}")
        if self.vocab_size < 256 + 4:
            raise UsageError(f"vocab_size must be at least 260 (256 bytes + 4 special tokens), got {self.vocab_size}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise UsageError("hidden_size must divide by num_heads and num_heads by num_kv_heads")
        if self.block_size > self.max_position_embeddings:
            raise UsageError("block_size exceeds max_position_embeddings")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and self.warmup_steps >= 0):
            raise UsageError("need lr > 0, 0 <= min_lr_ratio <= 1, warmup_steps >= 0")
        import math
        finite = ("lr", "weight_decay", "adam_eps", "grad_clip", "init_std", "rope_theta", "rms_norm_eps")
        bad = [n for n in finite if not math.isfinite(getattr(self, n))]
        if bad:
            raise UsageError(f"{', '.join(bad)} must be finite numbers")
        if self.grad_clip <= 0 or self.init_std <= 0 or self.adam_eps <= 0 or self.weight_decay < 0:
            raise UsageError("grad_clip, init_std and adam_eps must be positive and weight_decay >= 0 "
                             "(a negative clip would turn descent into ascent)")
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
        values = {k: _coerce(known[k], v) for k, v in data.items()}
        return cls(**values).validate()


# Field overrides per scale, on top of the dataclass defaults (which are the tiny preset).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(),
    "small": dict(
        hidden_size=256, num_layers=6, num_heads=8, num_kv_heads=2, intermediate_size=768,
        block_size=1024, steps=1000, batch_size=4, micro_batch=4, lr=1.5e-3, warmup_steps=50,
        eval_every=100, eval_blocks=32, ckpt_every=200, log_every=10,
    ),
    "paper": dict(
        hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=2, intermediate_size=3072,
        block_size=2048, steps=9000, batch_size=32, micro_batch=16, lr=5e-4, warmup_steps=300,
        eval_every=500, eval_blocks=64, ckpt_every=1000, log_every=20,
    ),
}


def resolve_scale(scale: str | None, log: Callable[[str], None] | None = None) -> str:
    """Return the scale to use: the explicit one, else ``paper`` with CUDA and ``small`` without.

    ``log`` (default: print to stderr) receives one line saying which scale was chosen and why.
    """
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if scale not in (None, "", "auto"):
        if scale not in SCALES:
            raise UsageError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
        say(f"scale: {scale} (given)")
        return scale
    if cuda_present():  # the gym's check: one rule for every stage
        say("scale: paper (no scale given and a CUDA device is present; pass --scale to override)")
        return "paper"
    say("scale: small (no scale given and no CUDA device; pass --scale to override)")
    return "small"


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
    """Parse ``--set field=value`` strings into typed overrides (JSON values, else strings)
    for the fields of ``config_cls`` (default `PretrainConfig`; post-training passes its own)."""
    known = {f.name: f for f in fields(config_cls or PretrainConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            raise UsageError(f"--set expects field=value with a known field, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key] = _coerce(known[key], value)
    return out


def _coerce(field: dataclasses.Field, value: Any) -> Any:
    """Check a JSON value against a field's declared type (ints may stand for floats)."""
    kind = {"int": int, "float": float, "bool": bool, "str": str}[str(field.type)]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        raise UsageError(f"config field {field.name} expects {kind.__name__}, got {value!r}")
    return value
