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
from planning_gym.cli import UsageError, check_fields, spec
from planning_gym.scales import POSTTRAIN, SCALES
from pretrain.tracking import TRACKERS, check_tracker

DIFFICULTIES = C.DIFFICULTIES
SPLIT_NAMES = ("ID", "OOD")                 # the test splits


def comma_list(text: str, allowed: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The items of a comma list, in ``allowed``'s order; a UsageError names any other item."""
    items = {x.strip() for x in text.split(",") if x.strip()}
    if items - set(allowed):
        raise UsageError(f"{name} must be a comma list of {', '.join(allowed)}, not {text!r}")
    return tuple(x for x in allowed if x in items)

METHODS = ("grpo", "opd", "turnopd", "tcod")
# How a run executes, not what it computes: a run built or resumed with other values of these is the
# same experiment (where it ran, the precision of its forward passes, where its metrics also went).
EXECUTION_FIELDS = ("device", "bf16", "cpu_bf16", "tracker")
TOPK_SUPPORTS = ("teacher", "student", "union")          # whose top-k tokens the OPD KL is taken on
TOPK_ESTIMATORS = ("tail", "renormalized", "truncated")  # posttrain.losses.reverse_kl_topk
LOSS_AGGREGATIONS = ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm")  # GRPO | DAPO | Dr. GRPO


@dataclass
class PosttrainConfig:
    method: str = spec("opd", "the objective (set by --method)", choices=METHODS)
    scale: str = spec("tiny", "the SCALE preset (set by --scale)", choices=SCALES)
    steps: int = spec(4, "optimiser rounds (one rollout batch each)", ge=1)
    tasks_per_step: int = spec(2, "distinct posttrain tasks per step", ge=1)
    group_size: int = spec(4, "rollouts per task (GRPO's G)", ge=1)
    lr: float = spec(5e-5, "AdamW learning rate", gt=0)
    weight_decay: float = spec(0.0, "AdamW weight decay", ge=0)
    grad_clip: float = spec(1.0, "gradient-norm clip", gt=0)
    micro_batch: int = spec(2, "episodes per forward/backward, grouped by length", ge=1)
    temperature: float = spec(1.0, "rollout sampling temperature", gt=0)
    max_turn_tokens: int = spec(192, "token budget of one agent turn", ge=1)
    step_limit: int = spec(C.STEP_LIMIT, "agent turns per episode", ge=1)
    rollout_batch: int = spec(64, "episodes in flight in the rollout engine", ge=1)
    entropy_coef: float = spec(0.0, "entropy bonus, any method (0: off)", ge=0)
    ppo_epochs: int = spec(1, "passes over each rollout batch", ge=1)
    ppo_mini_batches: int = spec(1, "optimiser steps per pass (the PPO clip acts from the second on)", ge=1)
    # grpo
    loss_agg: str = spec("seq-mean-token-mean", "GRPO loss aggregation", choices=LOSS_AGGREGATIONS)
    clip_eps: float = spec(0.2, "PPO clip range", gt=0)
    scale_by_std: bool = spec(True, "divide group advantages by their standard deviation")
    kl_coef: float = spec(0.0, "KL to the start model (0: off)", ge=0)
    kl_estimator: str = spec("k3", "KL estimator of the reference penalty", choices=("k1", "k2", "k3"))
    process_weight: float = spec(0.0, "weight of the solver's step-level process advantage (0: off)", ge=0)
    # opd family
    topk: int = spec(C.PHYSICS_OPD_TOPK, "OPD support size (0: full-vocabulary reverse KL)", ge=0)
    topk_support: str = spec("teacher", "whose top-k tokens the KL is taken on", choices=TOPK_SUPPORTS)
    topk_estimator: str = spec("tail", "tail (support + one bucket for the rest: >= 0, <= full KL) | "
                               "renormalized | truncated", choices=TOPK_ESTIMATORS)
    # turnopd
    probe_interval: int = spec(C.TURNOPD_PROBE_INTERVAL, "steps between depth probes", ge=1)
    probe_warmup: int = spec(C.TURNOPD_PROBE_WARMUP, "steps before the first depth probe", ge=0)
    h_min: int = spec(1, "smallest rollout depth cap", ge=1)
    h_max: int = spec(C.TURNOPD_H_MAX, "largest rollout depth cap", ge=1)
    ema_alpha: float = spec(C.TURNOPD_EMA_ALPHA, "EMA weight of the depth signal", ge=0, le=1)
    adaptive_depth: bool = spec(True, "ablation switch: the depth controller")
    turn_blend: bool = spec(True, "ablation switch: the alpha-blended turn loss (both off = OPD)")
    # tcod
    tcod_checkpoint_steps: int = spec(10, "TCOD-F2B: steps per widening of the turn window", ge=1)
    # bookkeeping
    domains: str = spec("", "comma list: only posttrain tasks of these domains (empty: all)")
    difficulties: str = spec("", "comma list of short, mid, long: only tasks of these bins (empty: all)")
    novel_tasks: bool = spec(False, "only posttrain tasks the pre-training corpus does not hold (a control: at "
                             "small most short posttrain tasks are also pre-training tasks)")
    eval_every: int = spec(0, "steps between evaluations (0: only at the end)", ge=0)
    eval_at_start: bool = spec(True, "with eval_every: also evaluate the student before step 1")
    eval_tasks_per_cell: int = spec(4, "test tasks per (split, difficulty) cell", ge=1)
    eval_k: int = spec(C.EVAL_K, "samples per task (avg@K)", ge=1)
    eval_splits: str = spec("ID,OOD", "comma list: the test splits evaluations run")
    eval_difficulties: str = spec("", "comma list of short, mid, long: the bins evaluations run (empty: all)")
    ckpt_every: int = spec(0, "steps between checkpoints (0: only the final one)", ge=0)
    keep_checkpoints: int = spec(2, "newest checkpoints kept (0: all; update-direction analyses need them)", ge=0)
    seed: int = spec(0, "rollout and task-order seed", ge=0)
    device: str = spec("auto", "auto (cuda when present) | cpu | cuda", choices=("auto", "cpu", "cuda"))
    backend: str = spec("auto", "rollout backend (vllm serves evaluation only: training updates weights in place)",
                        choices=("auto", "lean", "hf"))
    bf16: bool = spec(True, "bf16 autocast for forward passes on CUDA (losses stay fp32)")
    cpu_bf16: bool = spec(False, "bf16 autocast for the update's forward passes on a CPU that multiplies bf16 "
                          "natively (else fp32; rollouts and evaluations stay fp32); off by default: runs "
                          "recorded before it ran fp32 on CPUs")
    tracker: str = spec("none", "also log metrics to a tracker: none | tensorboard (RUN/tensorboard/)", choices=TRACKERS)

    @property
    def eval_split_list(self) -> tuple[str, ...]:
        return comma_list(self.eval_splits, SPLIT_NAMES, "eval_splits")

    @property
    def eval_difficulty_list(self) -> tuple[str, ...] | None:
        return comma_list(self.eval_difficulties, DIFFICULTIES, "eval_difficulties") or None

    def evaluates_after(self, step: int) -> bool:
        """Whether a periodic evaluation follows training step ``step`` (the final one always runs)."""
        return bool(self.eval_every) and step % self.eval_every == 0 and step < self.steps

    @property
    def evaluations(self) -> int:
        """Evaluations a fresh run makes: before step 1 (``eval_every`` with ``eval_at_start``), after
        every ``eval_every`` steps short of the last, and the final one."""
        return int(bool(self.eval_every and self.eval_at_start)) + \
            sum(self.evaluates_after(s) for s in range(1, self.steps + 1)) + 1

    def validate(self) -> "PosttrainConfig":
        """Each field's declared type and range (`planning_gym.cli.check_fields`), then the rules
        that tie fields together; raise UsageError, return self."""
        check_fields(self)
        comma_list(self.difficulties, DIFFICULTIES, "difficulties")
        comma_list(self.eval_difficulties, DIFFICULTIES, "eval_difficulties")
        if not self.eval_split_list:
            raise UsageError("eval_splits must name at least one of ID, OOD")
        if not self.h_min <= self.h_max:
            raise UsageError("need h_min <= h_max")
        check_tracker(self.tracker)
        return self


_PRESETS = POSTTRAIN   # field overrides per scale (planning_gym.scales)
# GRPO takes two optimiser steps per rollout batch, so the second is off-policy and the clip acts;
# it stays fp32 on a CPU: its ratio divides the trained policy's probability by the sampler's (fp32
# rollouts), and autocasting one side would put precision noise into every ratio.
_METHOD_DEFAULTS = {"turnopd": dict(topk=C.TURNOPD_TOPK), "grpo": dict(ppo_mini_batches=2, cpu_bf16=False)}


def make_config(method: str, scale: str, **overrides) -> PosttrainConfig:
    if scale not in _PRESETS:
        raise UsageError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
    if method not in METHODS:
        raise UsageError(f"unknown method {method!r} (choose one of {', '.join(METHODS)})")
    if {"method", "scale"} & set(overrides):
        raise UsageError("method and scale are chosen by --method and --scale, not --set")
    fields = {f.name for f in dataclasses.fields(PosttrainConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise UsageError(f"unknown config field(s): {', '.join(unknown)}")
    values = {**_PRESETS[scale], **_METHOD_DEFAULTS.get(method, {}), **overrides, "method": method, "scale": scale}
    return PosttrainConfig(**values).validate()
