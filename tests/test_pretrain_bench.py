"""Tests of the packed-vs-padded benchmark (``python -m benchmarks.train``), at a tiny size.

Why: the benchmark backs the trainer's systems claim, so its bookkeeping must be right (useful
tokens, pad fraction, FLOP accounting, utilisation against the measured peak) and its table must
say what was measured. The wall-clock figures themselves come from running the command at its
default, compute-bound size; at this tiny, overhead-bound size only the work done is stable.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.config import make_config
from pretrain.model import train_flops_per_token

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.train", "--scale", "tiny", "--steps", "3", "--warmup", "1",
         "--block-size", "512", "--micro-batch", "2", "--docs", "300", "--peak-seconds", "0.2", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_bookkeeping_is_consistent(bench):
    r, _ = bench
    assert r["block_size"] == 512 and r["micro_batch"] == 2 and r["threads"] == 1
    assert r["packed_useful_per_step"] == 2 * 512
    assert r["packed_tokens_per_s"] == pytest.approx(2 * 512 / r["packed_step_s"], rel=1e-6)
    assert r["padded_rows"] == round(2 * 512 / r["mean_doc_tokens"])
    per_token = train_flops_per_token(make_config("tiny", block_size=512), r["params"], 512)
    assert r["packed_flops"] == pytest.approx(r["packed_tokens_per_s"] * per_token)
    assert r["packed_mfu"] == pytest.approx(r["packed_flops"] / r["matmul_peak_flops"])
    assert 0 < r["packed_mfu"] < 1.5
    assert r["speedup"] == pytest.approx(r["packed_tokens_per_s"] / r["padded_tokens_per_s"])


def test_padding_wastes_positions_that_packing_does_not(bench):
    # per useful token the padded batches push 1 / (1 - pad fraction) positions through the
    # model; on trajectories of mixed horizons that is well above the packed 1
    r, _ = bench
    assert r["padded_pad_fraction"] > 0.2
    positions = r["padded_rows"] * r["padded_mean_len"]
    assert positions * (1 - r["padded_pad_fraction"]) == pytest.approx(r["padded_useful_per_step"])


def test_table_reports_the_targets(bench):
    r, table = bench
    assert f"{r['speedup']:.2f}x (target >= 1.5x)" in table
    assert f"{100 * r['packed_mfu']:.1f}% (target >= 50%)" in table
    assert "| packed (ours) |" in table and "| padded (HF style) |" in table
