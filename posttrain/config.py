"""Post-training configuration: one flat dataclass per run, presets per scale, any field settable.

Methods share one loop (`posttrain.train`) and differ only in what they roll out and what loss
they take:

  grpo     G rollouts per task, binary outcome reward (optionally + the solver's process reward),
           group-relative advantages, PPO-clipped policy gradient, optional KL to the start model
  opd      reverse KL to a teacher on the student's own rollouts (top-k, or full vocabulary)
  turnopd  opd with TurnOPD's adaptive rollout-depth cap and progressive turn-normalised loss
  tcod     opd with the TCOD-F2B front-to-back turn window 1 + step // tcod_checkpoint_steps
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planning_gym import constants as C
from pretrain.config import SCALES, UsageError

DIFFICULTIES = C.DIFFICULTIES
SPLIT_NAMES = ("ID", "OOD")                 # the test splits


def comma_list(text: str, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The items of a comma list, in ``allowed``'s order; a UsageError names any other item."""
    items = {x.strip() for x in text.split(",") if x.strip()}
    if items - set(allowed):
        raise UsageError(f"{name} must be a comma list of {', '.join(allowed)}, not {text!r}")
    return tuple(x for x in allowed if x in items)

METHODS = ("grpo", "opd", "turnopd", "tcod")


@dataclass
class PosttrainConfig:
    method: str = "opd"
    scale: str = "tiny"
    steps: int = 4
    tasks_per_step: int = 2          # distinct posttrain tasks per step
    group_size: int = 4              # rollouts per task (GRPO's G)
    lr: float = 5e-5
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    micro_batch: int = 2             # episodes per forward/backward, grouped by length (bench-update)
    temperature: float = 1.0
    max_turn_tokens: int = 192
    step_limit: int = C.STEP_LIMIT
    rollout_batch: int = 64          # episodes in flight in the rollout engine
    entropy_coef: float = 0.0        # entropy bonus (any method; 0: off)
    ppo_epochs: int = 1              # passes over each rollout batch
    ppo_mini_batches: int = 1        # optimiser steps per pass (the PPO clip acts from the second on)
    # grpo
    loss_agg: str = "seq-mean-token-mean"   # GRPO | token-mean (DAPO) | seq-mean-token-sum-norm (Dr. GRPO)
    clip_eps: float = 0.2
    scale_by_std: bool = True
    kl_coef: float = 0.0             # KL to the start model (0: off)
    kl_estimator: str = "k3"
    process_weight: float = 0.0      # weight of the solver's step-level process advantage (0: off)
    # opd family
    topk: int = C.PHYSICS_OPD_TOPK   # 0: full-vocabulary reverse KL
    topk_support: str = "teacher"    # teacher | student | union: whose top-k tokens the KL is taken on
    topk_estimator: str = "tail"     # tail (support + one bucket for the rest: >= 0, <= full KL) | renormalized | truncated
    # turnopd
    probe_interval: int = C.TURNOPD_PROBE_INTERVAL
    probe_warmup: int = C.TURNOPD_PROBE_WARMUP
    h_min: int = 1
    h_max: int = C.TURNOPD_H_MAX
    ema_alpha: float = C.TURNOPD_EMA_ALPHA
    adaptive_depth: bool = True      # ablation switches: the depth controller ...
    turn_blend: bool = True          # ... and the alpha-blended turn loss (both off = OPD at top-k 50)
    # tcod
    tcod_checkpoint_steps: int = 10
    # bookkeeping
    domains: str = ""                # comma list: only posttrain tasks of these domains ("" = all)
    difficulties: str = ""           # comma list of short, mid, long: only tasks of these bins ("" = all)
    eval_every: int = 0              # 0: evaluate only at the end
    eval_at_start: bool = True       # with eval_every: also evaluate the student before step 1
    eval_tasks_per_cell: int = 4
    eval_k: int = C.EVAL_K
    eval_splits: str = "ID,OOD"      # comma list: the test splits evaluations run
    eval_difficulties: str = ""      # comma list of short, mid, long: the bins evaluations run ("" = all)
    ckpt_every: int = 0              # 0: only the final checkpoint
    keep_checkpoints: int = 2        # 0: keep every checkpoint (update-direction analyses need them)
    seed: int = 0
    device: str = "auto"             # auto (cuda when present) | cpu | cuda
    backend: str = "auto"            # rollout backend: auto (fastest correct) | lean | hf (engine.backend)
    bf16: bool = True                # bf16 autocast for the forward passes on CUDA (losses stay fp32)

    @property
    def eval_split_list(self) -> tuple[str, ...]:
        return comma_list(self.eval_splits, SPLIT_NAMES, "eval_splits")

    @property
    def eval_difficulty_list(self) -> tuple[str, ...] | None:
        return comma_list(self.eval_difficulties, DIFFICULTIES, "eval_difficulties") or None

    def validate(self) -> "PosttrainConfig":
        if self.method not in METHODS:
            raise UsageError(f"unknown method {self.method!r} (choose one of {', '.join(METHODS)})")
        if self.scale not in SCALES:
            raise UsageError(f"unknown scale {self.scale!r} (choose one of {', '.join(SCALES)})")
        for name in ("steps", "tasks_per_step", "group_size", "micro_batch", "max_turn_tokens", "step_limit",
                     "rollout_batch", "eval_k", "tcod_checkpoint_steps", "probe_interval"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be positive")
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise UsageError(f"kl_estimator must be k1, k2 or k3, not {self.kl_estimator!r}")
        from posttrain.losses import TOPK_ESTIMATORS, TOPK_SUPPORTS
        from posttrain.objectives import LOSS_AGGREGATIONS
        if self.loss_agg not in LOSS_AGGREGATIONS:
            raise UsageError(f"loss_agg must be one of {', '.join(LOSS_AGGREGATIONS)}, not {self.loss_agg!r}")
        if self.ppo_epochs < 1 or self.ppo_mini_batches < 1 or self.entropy_coef < 0:
            raise UsageError("ppo_epochs and ppo_mini_batches must be positive and entropy_coef >= 0")
        if self.topk_support not in TOPK_SUPPORTS or self.topk_estimator not in TOPK_ESTIMATORS:
            raise UsageError(f"topk_support must be one of {', '.join(TOPK_SUPPORTS)} and topk_estimator one of "
                             f"{', '.join(TOPK_ESTIMATORS)}")
        if self.topk < 0 or self.lr <= 0:
            raise UsageError("topk must be >= 0 and lr > 0")
        import math
        reals = ("lr", "weight_decay", "grad_clip", "temperature", "clip_eps", "kl_coef", "process_weight",
                 "entropy_coef", "ema_alpha")
        bad = [n for n in reals if not math.isfinite(getattr(self, n))]
        if bad:
            raise UsageError(f"{', '.join(bad)} must be finite numbers")
        if self.grad_clip <= 0 or self.temperature <= 0 or self.clip_eps <= 0 or self.kl_coef < 0 \
                or self.weight_decay < 0 or not 0 <= self.ema_alpha <= 1:
            raise UsageError("grad_clip, temperature and clip_eps must be positive, kl_coef and weight_decay "
                             ">= 0, ema_alpha in [0, 1]")
        comma_list(self.difficulties, DIFFICULTIES, "difficulties")
        comma_list(self.eval_difficulties, DIFFICULTIES, "eval_difficulties")
        if not self.eval_split_list:
            raise UsageError("eval_splits must name at least one of ID, OOD")
        if self.backend not in ("auto", "lean", "hf"):
            raise UsageError(f"backend must be auto, lean or hf, not {self.backend!r} (vllm serves evaluation: "
                             "training updates the weights in place)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise UsageError(f"device must be auto, cpu or cuda, not {self.device!r}")
        if self.keep_checkpoints < 0:
            raise UsageError("keep_checkpoints must be >= 0 (0 keeps all)")
        if not 1 <= self.h_min <= self.h_max:
            raise UsageError("need 1 <= h_min <= h_max")
        return self


_PRESETS = {
    "tiny": dict(steps=4, tasks_per_step=2, group_size=4, eval_tasks_per_cell=2, eval_k=2),
    "small": dict(steps=60, tasks_per_step=8, group_size=8, lr=5e-5, eval_every=20, eval_tasks_per_cell=16),
    # the paper trains GRPO / OPD for 75 steps
    "paper": dict(steps=C.PAPER_POSTTRAIN_STEPS, tasks_per_step=32, group_size=8, lr=1e-5, micro_batch=16, rollout_batch=256,
                  eval_every=25, eval_tasks_per_cell=160, ckpt_every=25),
}
# GRPO takes two optimiser steps per rollout batch, so the second is off-policy and the clip acts.
_METHOD_DEFAULTS = {"turnopd": dict(topk=C.TURNOPD_TOPK), "grpo": dict(ppo_mini_batches=2)}


def make_config(method: str, scale: str, **overrides) -> PosttrainConfig:
    if scale not in _PRESETS:
        raise UsageError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
    if {"method", "scale"} & set(overrides):
        raise UsageError("method and scale are chosen by --method and --scale, not --set")
    fields = {f.name for f in dataclasses.fields(PosttrainConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise UsageError(f"unknown config field(s): {', '.join(unknown)}")
    values = {**_PRESETS[scale], **_METHOD_DEFAULTS.get(method, {}), **overrides, "method": method, "scale": scale}
    return PosttrainConfig(**values).validate()
