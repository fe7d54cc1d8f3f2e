#!/usr/bin/env bash
# The post-training budget sweep at `small`, from nothing, in one resumable command (issue: a budget
# where post-training does no harm). Student = the step-400 checkpoint of `make pretrain`'s small fa
# model, teacher = its final (step-1000) checkpoint; arms OPD-from-teacher, GRPO, self-distillation.
#
#   scripts/sweep_small.sh [extra reproduce.budget_sweep flags]     # e.g. --lrs 1e-5,5e-5 --steps 12,24
#
# Every stage is reused when finished and resumed when cut off, so rerunning continues the work.
# Measured cost on the 2-core machine (one thread, the other core busy): pre-training 66 min; the
# base evaluation (384 ID episodes, 16 tasks x 3 difficulties x K=8) over 30 min; each arm about
# 12 training steps of 32 episodes plus one such evaluation. Start it first thing in a session.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
THREADS=${THREADS:-1}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS
$PY -m planning_gym.make_data --domain fa --scale small --data-dir data --seed 0 --quiet
RUN=runs/pretrain-fa-small
if [ ! -f $RUN/summary.json ]; then
  resume=""; [ -d $RUN/checkpoints ] && resume=--resume
  $PY -m pretrain.train --data data/fa-small --out $RUN --scale small --set keep_checkpoints=100 $resume
fi
$PY -m reproduce.budget_sweep --student $RUN/checkpoints/step_000400 --teacher $RUN --out runs/sweep-small \
    --scale small --arms opd,grpo,self --lrs 5e-5 --steps 12 --set tasks_per_step=4 --set eval_splits=ID "$@"
