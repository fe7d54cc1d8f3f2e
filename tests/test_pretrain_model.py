"""Tests of the presets, the SCALE dial and the Qwen2 models (pretrain/config.py, pretrain/model.py).

Why: the three scales are a contract (SPEC §1: ~1M, ~5-10M, ~100M Qwen2.5-shaped), the paper
preset must be runnable before a GPU is ever used, and checkpoints must be plain HF folders.
"""
from __future__ import annotations

import pytest
import torch

from pretrain.config import PRESETS, PretrainConfig, UsageError, make_config, parse_set, resolve_scale
from pretrain.model import analytic_params, build_model, count_params, preset_table, train_flops_per_token


def test_preset_parameter_counts():
    counts = {r["scale"]: r["params"] for r in preset_table(3000)}
    assert 0.8e6 <= counts["tiny"] <= 1.5e6
    assert 4e6 <= counts["small"] <= 10e6
    assert 95e6 <= counts["paper"] <= 110e6
    for scale, n in counts.items():  # the module agrees with the shape arithmetic
        assert analytic_params(make_config(scale), 3000) == n


def test_paper_preset_is_the_papers_shape():
    cfg = make_config("paper")
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (768, 12, 12, 2)
    assert cfg.vocab_size == 3000 and cfg.tie_embeddings and cfg.steps == 9000
    with torch.device("meta"):
        model = build_model(cfg)
    assert model.config.model_type == "qwen2"
    assert model.lm_head.weight is model.model.embed_tokens.weight
    attn = model.model.layers[0].self_attn
    assert attn.k_proj.out_features == 2 * 64 and attn.q_proj.bias is not None  # GQA, Qwen's qkv bias


def test_paper_preset_dry_run_one_optimizer_step():
    from pretrain.train import make_optimizer

    cfg = make_config("paper", block_size=16)
    model = build_model(cfg, 3000).train()
    assert 95e6 <= count_params(model) <= 110e6
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(4, 3000, (1, 17), generator=gen)

    def loss():
        return model(input_ids=x[:, :-1], labels=x[:, :-1].clone(), use_cache=False).loss

    before = loss()
    before.backward()
    for group in opt.param_groups:
        group["lr"] = cfg.lr
    probe = model.model.layers[5].mlp.down_proj.weight
    snapshot = probe.detach().clone()
    opt.step()
    opt.zero_grad(set_to_none=True)
    assert torch.isfinite(before)
    assert abs(before.item() - torch.log(torch.tensor(3000.0)).item()) < 1.0  # ~uniform at init
    assert not torch.equal(snapshot, probe.detach())
    with torch.no_grad():
        assert loss().item() < before.item()  # the step went downhill on this batch


def test_resolve_scale(monkeypatch):
    said = []
    assert resolve_scale("tiny", log=said.append) == "tiny"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_scale(None, log=said.append) == "paper"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_scale(None, log=said.append) == "small"
    assert resolve_scale("auto", log=said.append) == "small"
    assert said[0].startswith("scale: tiny") and "CUDA" in said[1] and said[2].startswith("scale: small")
    with pytest.raises(UsageError, match="unknown scale 'huge'"):
        resolve_scale("huge", log=said.append)


def test_config_round_trip_and_validation():
    cfg = make_config("small", steps=7, loss_on="agent")
    assert (cfg.steps, cfg.loss_on, cfg.hidden_size) == (7, "agent", PRESETS["small"]["hidden_size"])
    assert PretrainConfig.from_json(cfg.to_json()) == cfg
    with pytest.raises(UsageError, match="unknown fields: bogus"):
        PretrainConfig.from_json({**cfg.to_json(), "bogus": 1})
    with pytest.raises(UsageError, match="steps expects int"):
        PretrainConfig.from_json({**cfg.to_json(), "steps": "many"})
    with pytest.raises(UsageError, match="loss_on"):
        make_config("tiny", loss_on="env")
    with pytest.raises(UsageError, match="hidden_size must divide"):
        make_config("tiny", num_heads=3)
    assert parse_set(["lr=0.01", "loss_on=agent", "compile=true", "steps=3"]) == \
        {"lr": 0.01, "loss_on": "agent", "compile": True, "steps": 3}
    with pytest.raises(UsageError, match="--set"):
        parse_set(["nope=1"])
    assert make_config("tiny", micro_batch=2, batch_size=8).grad_accum(2) == 2
    with pytest.raises(UsageError, match="not a multiple"):
        make_config("tiny", micro_batch=3, batch_size=8).grad_accum(1)


def test_flops_per_token_counts_weights_and_attention():
    cfg = make_config("tiny")
    n = 10 ** 6
    assert train_flops_per_token(cfg, n, context=0) == 6 * n
    assert train_flops_per_token(cfg, n, context=256) - 6 * n == 6 * cfg.num_layers * cfg.hidden_size * 256


def test_hf_folder_round_trip(tmp_path):
    from transformers import AutoModelForCausalLM

    cfg = make_config("tiny", hidden_size=64, num_layers=2, intermediate_size=128)
    model = build_model(cfg, 300, seed=3).eval()
    model.save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= {"config.json", "model.safetensors"}
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    x = torch.randint(0, 300, (2, 12))
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, loaded(input_ids=x).logits)
    other = build_model(cfg, 300, seed=4)
    assert not torch.equal(other.model.embed_tokens.weight, model.model.embed_tokens.weight)


def test_cpu_has_bf16_needs_the_native_instructions(tmp_path):
    """oneDNN says yes on any AVX-512 CPU, where bf16 is emulated and no faster: the CPU's flags decide."""
    from pretrain.model import cpu_has_bf16
    emulated, native = tmp_path / "emulated", tmp_path / "native"
    emulated.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    native.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw avx512_bf16\n")
    assert not cpu_has_bf16(str(emulated)) and not cpu_has_bf16(str(tmp_path / "missing"))
    assert cpu_has_bf16(str(native)) == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
