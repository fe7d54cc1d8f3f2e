"""SCALE, the one dial: what ``tiny``, ``small`` and ``paper`` mean at every stage, on one page.

Why one module: a scale decides the world's size, the corpus, the model, the optimiser, the
post-training budget and how many test tasks an evaluation plays. Spread over the stages' config
modules, a reader could not see what ``SCALE=small`` is, and two copies could drift. Each stage's
config starts from its table here and lets ``--set`` override single fields.

* ``tiny``  -- tests and smoke runs on a laptop CPU in minutes (~1M parameters);
* ``small`` -- a real but reduced run on a 2-core CPU in well under an hour (~5M parameters);
* ``paper`` -- the paper's shape (Qwen2.5, hidden 768, 12 layers, ~104M parameters) for a GPU.

`resolve_scale` is the one rule for a missing scale: ``paper`` when a CUDA device is visible,
else ``small``, and it says which it chose. ``python -m planning_gym.scales [SCALE]`` prints the
resolved scale (the Makefile's ``SCALE=`` goes through it). No torch, no imports from the stages.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from typing import Callable

from .cli import UsageError
from .constants import PAPER_POSTTRAIN_STEPS

SCALES = ("tiny", "small", "paper")

# The world and the corpus (planning_gym.config.CorpusConfig): the skill graph's size and the rows
# per horizon bin of each pool (pre-training rows at 100 % of the horizon mixture).
CORPUS = {
    "tiny": dict(graph=dict(n_base=6, items_per_level=(5, 4, 3, 2)), pretrain=200, posttrain=32, test=16),
    "small": dict(graph=dict(n_base=8, items_per_level=(8, 6, 5, 4)), pretrain=3000, posttrain=160, test=160),
    # ~330 crafted items with 1-2 alternatives each: about 500 rules per domain, as in the paper.
    "paper": dict(graph=dict(n_base=40, items_per_level=(100, 90, 80, 60)), pretrain=40000, posttrain=2000, test=160),
}

# Pre-training (pretrain.config.PretrainConfig field overrides; the dataclass defaults are tiny).
# Gym trajectories run to ~1600 tokens, so blocks are 512 / 1024 / 2048 tokens: the larger presets
# see whole long-horizon episodes at the positions a rollout will use.
PRETRAIN = {
    "tiny": dict(),
    "small": dict(
        hidden_size=256, num_layers=6, num_heads=8, num_kv_heads=2, intermediate_size=768,
        block_size=1024, steps=1000, batch_size=4, micro_batch=4, lr=1.5e-3, warmup_steps=50,
        eval_every=100, eval_blocks=32, ckpt_every=200, log_every=10,
        cpu_bf16=True,     # bf16 autocast where the CPU multiplies bf16 natively: ~2x on one core
    ),
    "paper": dict(
        hidden_size=768, num_layers=12, num_heads=12, num_kv_heads=2, intermediate_size=3072,
        block_size=2048, steps=9000, batch_size=32, micro_batch=16, lr=5e-4, warmup_steps=300,
        eval_every=500, eval_blocks=64, ckpt_every=1000, log_every=20,
    ),
}

# Post-training (posttrain.config.PosttrainConfig field overrides); the paper trains GRPO / OPD 75 steps.
# small autocasts the update's forward passes to bf16 on a CPU that multiplies bf16 natively, as CUDA
# runs do (`make bench-update`: an OPD update 1.65x faster on one core); GRPO and tiny stay fp32
# (posttrain.config._METHOD_DEFAULTS; tiny's tests compare exact values).
POSTTRAIN = {
    "tiny": dict(steps=4, tasks_per_step=2, group_size=4, eval_tasks_per_cell=2, eval_k=2),
    "small": dict(steps=60, tasks_per_step=8, group_size=8, lr=5e-5, eval_every=20, eval_tasks_per_cell=16,
                  cpu_bf16=True),
    "paper": dict(steps=PAPER_POSTTRAIN_STEPS, tasks_per_step=32, group_size=8, lr=1e-5, micro_batch=16, rollout_batch=256,
                  eval_every=25, eval_tasks_per_cell=160, ckpt_every=25),
}

# Test tasks per (split, domain, difficulty) cell when `make pretrain` evaluates its model (0: all).
EVAL_TASKS_PER_CELL = {"tiny": 4, "small": 16, "paper": 0}

# The reproductions (`make reproduce`, reproduce.store): tasks per evaluation cell (K=8 samples at
# T=0.4, step limit 20 always), the pre-training step whose checkpoint is the post-training
# student, and the post-training budget (PosttrainConfig overrides on top of POSTTRAIN).
_SMALL_DISTILL = dict(lr=2e-4, steps=72, eval_every=24)   # OPD's family (MOPD's stages too): see small below

REPRODUCE = {
    # tiny is a smoke test of every code path, so one task per cell (x 8 samples): most of
    # `reproduce-all`'s cost is evaluating weak models whose episodes run to the step limit.
    "tiny": dict(eval_tasks_per_cell=1, student_step=200,
                 posttrain=dict(steps=6, tasks_per_step=2, group_size=4, lr=1e-4, eval_every=3)),
    # small on a 2-core CPU: 16 tasks per cell, so a paired difference over a cell's tasks has a
    # standard error a verdict can use. The post-training budgets are the ones the sweep
    # (`scripts/sweep_small.sh`, reproduce.budget_sweep; results/small/budget-sweep) found where each
    # method gains beyond two SE over 48 ID tasks of the step-400 student: GRPO at lr 5e-5 x 12 steps
    # of 4 tasks x 8 samples (+3.1 ± 1.5; at 2e-4: +0.5 ± 2.9); OPD and its family (TurnOPD, TCOD,
    # MOPD's stages) at lr 2e-4 x 72 steps (+3.9 ± 1.9, from a +21.1-point teacher), where 12 steps
    # do not gain at 5e-5 (-0.3 ± 0.5), 2e-4 (+0.3 ± 0.9) or 5e-4 (-1.8 ± 1.5). Self-distillation is a
    # bit-identical no-op at any lr (an exactly zero gradient). The old budget (8 steps of 2 x 4 at lr
    # 3e-4) lowered avg@8 in every Fig. 7 cell. A checkpoint every 4 steps: a 72-step run (~3-4 h on one
    # core) outlasts a working session, and a cut-off run resumes from its newest checkpoint.
    "small": dict(eval_tasks_per_cell=16, student_step=400,
                  posttrain=dict(steps=12, tasks_per_step=4, group_size=8, lr=5e-5, eval_every=6, ckpt_every=4),
                  posttrain_per_method={m: _SMALL_DISTILL for m in ("opd", "turnopd", "tcod")}),
    "paper": dict(eval_tasks_per_cell=0, student_step=3000, posttrain=dict()),   # 0: all 160 per cell
}


def check_scale(scale: str) -> str:
    if scale not in SCALES:
        raise UsageError(f"unknown scale {scale!r} (choose one of {', '.join(SCALES)})")
    return scale


def cuda_present() -> bool:
    """Whether a CUDA device is visible, without making the gym depend on torch."""
    if importlib.util.find_spec("torch") is not None:
        import torch
        return bool(torch.cuda.is_available())
    return os.path.exists("/proc/driver/nvidia/version")


def resolve_scale(scale: str | None, log: Callable[[str], None] | None = None) -> str:
    """The explicit scale, else ``paper`` with CUDA and ``small`` without; ``log`` (default: stderr)
    gets one line saying which scale was chosen and why."""
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if scale not in (None, "", "auto"):
        say(f"scale: {check_scale(scale)} (given)")
        return scale
    if cuda_present():
        say("scale: paper (no scale given and a CUDA device is present; pass --scale to override)")
        return "paper"
    say("scale: small (no scale given and no CUDA device; pass --scale to override)")
    return "small"


if __name__ == "__main__":
    from .cli import entry

    def _print() -> int:
        print(resolve_scale(sys.argv[1] if len(sys.argv) > 1 else None))
        return 0
    sys.exit(entry(_print))
