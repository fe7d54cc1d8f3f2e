#!/usr/bin/env bash
# The prepared GPU check: every stage on the device it is given, with its numbers, in about six
# minutes on one GPU.  A paper-graph corpus (2 000 pre-training rows per bin), paper-preset
# pre-training for 30 steps (tokens/s and MFU against the bf16 matmul peak it measures), the
# rollout engine at the paper preset beside batched `generate`, 3 OPD and 3 GRPO steps on CUDA
# (bf16 autocast), and one evaluation cell.  Logs and JSON go to $OUT (default /tmp/gpu_check).
#
#   bash scripts/gpu_check.sh          # from the repository root, on the GPU machine
#   DEVICE=cpu SCALE=tiny N_PRE=40 bash scripts/gpu_check.sh     # the same steps, dry, on a CPU
#
# The device image has torch, transformers and tokenizers but not `datasets`: carry its wheels
# (datasets, dill, multiprocess) and install them first (see the device tool's notes).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
SCALE=${SCALE:-paper}
N_PRE=${N_PRE:-2000}
mkdir -p "$OUT"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
log() { echo "== $(date +%T) $*"; }

log "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"

log "corpus: the $SCALE graph, $N_PRE pre-training rows per bin"
$PY -m planning_gym.make_data --domain fa --scale "$SCALE" --n-pretrain "$N_PRE" --n-posttrain 64 --n-test 8 \
    --data-dir "$OUT/data" --workers 8 --quiet
corpus=$(ls -d "$OUT"/data/fa-"$SCALE"-*)

log "pre-training: $SCALE preset, 30 steps"
$PY -m pretrain.train --data "$corpus" --out "$OUT/pre" --scale "$SCALE" --device "$DEVICE" \
    --set steps=30 --set warmup_steps=5 --set eval_every=30 --set ckpt_every=30 --set log_every=5 \
    2>&1 | tee "$OUT/pretrain.log"

log "rollouts: the engine (lean and hf backends) at the $SCALE preset, beside batched and one-at-a-time generate"
$PY -m benchmarks.rollout --scales "$SCALE" --device "$DEVICE" --data "$corpus" --episodes 256 --paper-episodes 256 \
    --baseline-episodes 4 --batch-size 256 --threads 4 --json "$OUT/rollout.json" 2>&1 | tee "$OUT/rollout.log"

for method in opd grpo; do
    log "post-training: 3 $method steps"
    teacher=()
    [ "$method" = opd ] && teacher=(--teacher "$OUT/pre")      # self-distillation: its KL starts at 0
    $PY -m posttrain.train --method "$method" --student "$OUT/pre" "${teacher[@]}" --out "$OUT/$method" \
        --scale "$SCALE" --device "$DEVICE" --set steps=3 --set tasks_per_step=8 --set group_size=4 \
        --set eval_every=0 --set eval_tasks_per_cell=1 --set eval_k=2 2>&1 | tee "$OUT/$method.log"
    cp "$OUT/$method/metrics.jsonl" "$OUT/$method-metrics.jsonl"
done

log "evaluation: one cell (short, 1 task per split, K=8)"
$PY -m engine.evaluate --run "$OUT/pre" --max-tasks-per-cell 1 --difficulties short --device "$DEVICE" \
    --out "$OUT/eval" --quiet 2>&1 | tee "$OUT/eval.log"
log "done"
