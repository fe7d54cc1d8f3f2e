"""Tests of the rollout backends behind `engine.backend.make_policy`: lean, hf and (when its
extra is installed) vLLM.

Why: every backend must produce the records the trainers consume to the token. The lean path
re-implements Qwen2's forward, so its log-probs are checked against one teacher-forced
`transformers` pass over the final sequences (fp32, 1e-5), on ragged multi-turn episodes with
refills, forced prefixes and both kinds of forward pass; it must decode the model's *current*
weights (trainers update them between rollouts), and refuse what it does not implement.
"""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch

from engine.backend import HFPolicy, make_policy
from engine.lean import LeanPolicy, UnsupportedModel
from engine.rollout import RolloutConfig, rollout
from engine.vllm_backend import vllm_available
from test_rollout import assets, gold_script, teacher_forced  # noqa: F401  (session fixture)

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = 1e-5


def play(assets, backend, model=None, tasks=None, script=None, seed=0, **cfg):
    config = RolloutConfig(**{"max_turn_tokens": 12, "step_limit": 6, "batch_size": 4, **cfg})
    policy = make_policy(model or assets["model"], backend, assets["special"].pad)
    return rollout(policy, assets["tokenizer"], tasks or assets["tasks"], config, seed=seed, script=script), policy


def max_logprob_gap(model, ro, pad) -> float:
    batch = ro.batch(pad)
    mask = batch["agent_mask"].bool()
    return (teacher_forced(model, batch) - batch["logprobs"])[mask].abs().max().item()


def test_auto_is_lean_for_qwen2(assets):
    assert isinstance(make_policy(assets["model"], "auto"), LeanPolicy)
    assert type(make_policy(assets["model"], "hf")) is HFPolicy
    with pytest.raises(ValueError, match="unknown backend"):
        make_policy(assets["model"], "fast")


@pytest.mark.parametrize("attention", ["auto", "padded", "ragged"])
def test_lean_logprobs_equal_a_teacher_forced_pass(assets, monkeypatch, attention):
    """Both attention layouts (padded batched matmuls; row by row over each row's own slots,
    skipping idle rows) give the teacher-forced log-probs, prefill chunks and decode steps alike."""
    import engine.lean as lean

    if attention != "auto":   # the per-row cost decides the layout: make one side always win
        monkeypatch.setattr(lean, "RAGGED_ROW_COST", -10**9 if attention == "ragged" else 10**9)
    ro, policy = play(assets, "lean", script=gold_script(assets, sample_every=3), temperature=0.7, top_p=0.9)
    assert isinstance(policy, LeanPolicy)
    assert policy.forwards["prefill"] > 1 and policy.forwards["decode"] > 1
    assert len(ro.episodes) > 4 and max(e.n_turns for e in ro.episodes) >= 4     # refills, multi-turn
    assert sum(sum(e.mask) for e in ro.episodes) > 200
    assert max_logprob_gap(assets["model"], ro, assets["special"].pad) < TOL


def test_lean_and_hf_play_the_same_episodes(assets):
    """Greedy decoding: the same token ids, and log-probs within the tolerance, episode by episode."""
    lean, _ = play(assets, "lean", temperature=0.0, max_turn_tokens=16)
    hf, _ = play(assets, "hf", temperature=0.0, max_turn_tokens=16)
    assert [e.ids for e in lean.episodes] == [e.ids for e in hf.episodes]
    gap = max(abs(a - b) for x, y in zip(lean.episodes, hf.episodes) for a, b in zip(x.logprobs, y.logprobs))
    assert gap < TOL


def test_lean_decodes_the_current_weights(assets):
    """A trainer changes the weights between rollouts; the next rollout must see the change."""
    model = copy.deepcopy(assets["model"])
    policy = make_policy(model, "lean", assets["special"].pad)
    config = RolloutConfig(max_turn_tokens=12, step_limit=3, batch_size=4)
    tasks = assets["tasks"][:4]
    before = rollout(policy, assets["tokenizer"], tasks, config, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    after = rollout(policy, assets["tokenizer"], tasks, config, seed=0)
    assert max_logprob_gap(model, after, assets["special"].pad) < TOL
    assert max_logprob_gap(model, before, assets["special"].pad) > 1e-3


def test_lean_refuses_other_architectures(assets):
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(UnsupportedModel, match="llama.*--backend hf"):
        make_policy(llama, "lean")
    assert type(make_policy(llama, "auto")) is HFPolicy


@pytest.mark.parametrize("backend, message", [("fast", "unknown --backend"), ("vllm", "make vllm")])
def test_evaluate_backend_errors(assets, tmp_path, backend, message):
    if backend == "vllm" and vllm_available():
        pytest.skip("the vllm extra is installed here")
    model_dir = tmp_path / "model"
    assets["model"].save_pretrained(model_dir)
    assets["tokenizer"].save_pretrained(model_dir)
    out = subprocess.run([sys.executable, "-m", "engine.evaluate", "--model", str(model_dir), "--data",
                          str(assets["corpus"]), "--backend", backend], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], out.stderr


@pytest.mark.skipif(not vllm_available(), reason="the vllm extra is not installed (make vllm)")
def test_vllm_episodes_and_logprobs(assets):
    """vLLM's episodes are valid records and its sampled-token log-probs match a teacher-forced pass."""
    from pretrain.config import make_config
    from pretrain.model import build_model

    # vLLM's CPU attention needs head_dim >= 32 (the presets' 32); the shared test model has 16
    cfg = make_config("tiny", hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128)
    model = build_model(cfg, len(assets["tokenizer"]), assets["special"], seed=0).eval()
    ro, policy = play(assets, "vllm", model=model, temperature=1.0, max_turn_tokens=16)
    assert policy.forwards["generate"] > 1
    for e in ro.episodes:
        assert len(e.ids) == len(e.logprobs) == len(e.mask) == len(e.turn)
        assert e.n_turns >= 1 and e.stop_reason
    assert max_logprob_gap(model, ro, assets["special"].pad) < 1e-4


def test_bench_rollout_side_by_side(assets, tmp_path, capsys):
    """The benchmark runs every requested loop on the same tasks and reports ratios and peak shares."""
    import json

    from benchmarks.rollout import main as bench

    out = tmp_path / "bench.json"
    assert bench(["--scales", "tiny", "--data", str(assets["corpus"]), "--episodes", "3", "--baseline-episodes", "1",
                  "--step-limit", "2", "--max-turn-tokens", "6", "--loops", "engine/lean", "engine/hf",
                  "generate/batched", "generate/one", "--json", str(out)]) == 0
    rows = {r["loop"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"engine/lean", "engine/hf", "generate/batched", "generate/one"}
    assert rows["generate/batched"]["vs_batched_generate"] == 1.0
    assert rows["engine/lean"]["episodes"] == 3 and rows["generate/one"]["episodes"] == 1
    assert 0 < rows["engine/lean"]["peak_share_weights"] < rows["engine/lean"]["peak_share"] < 1
    assert rows["engine/lean"]["read_bytes_per_s"] > 0 and rows["engine/lean"]["read_bandwidth"] > 0
    assert "| tiny |" in capsys.readouterr().out
    assert bench(["--loops", "engine/fast"]) == 2
    assert "error: unknown loop" in capsys.readouterr().err


def test_a_padded_prefill_never_reaches_past_the_position_table(assets):
    """Rows prefilled together are padded to the widest chunk: a row deep into its episode beside a
    newly joined row's long first observation once asked the lean path for more positions than the
    model has (the small evaluation crashed at 4118 > 4096). Such a batch is split; nothing else changes."""
    model = copy.deepcopy(assets["model"])
    limit = 150
    model.config.max_position_embeddings = limit
    policy = make_policy(model, "lean", assets["special"].pad)
    assert policy.max_positions == limit
    ro = rollout(policy, assets["tokenizer"], assets["tasks"] * 2,
                 RolloutConfig(max_turn_tokens=12, step_limit=6, batch_size=3, max_total_tokens=limit), seed=0)
    assert max(len(e.ids) for e in ro.episodes) <= limit
    assert any(e.stop_reason == "max_total_tokens" for e in ro.episodes)       # the budget was reached
    assert max_logprob_gap(assets["model"], ro, assets["special"].pad) < TOL
    # the split itself: one row at 140 with 2 pending, one at 10 with 20 pending -> two groups at limit 150
    policy.rows = {0: type("Row", (), {"filled": 140, "pending": [1, 2]})(),
                   1: type("Row", (), {"filled": 10, "pending": list(range(20))})()}
    assert policy.prefill_groups([0, 1]) == [[0], [1]]
    policy.max_positions = None
    assert policy.prefill_groups([0, 1]) == [[0, 1]]
