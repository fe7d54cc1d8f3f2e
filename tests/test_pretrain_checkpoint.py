"""Tests of pickle-free, atomic checkpoints (pretrain/checkpoint.py), in process.

Why: exact resume rests on the optimiser and generator states surviving safetensors + JSON, and
on readers never seeing half-written checkpoints. The end-to-end SIGKILL test lives in
test_pretrain_train.py; these pin the pieces so a failure there is easy to place.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from pretrain import checkpoint as ck
from pretrain.config import UsageError, make_config
from pretrain.model import build_model
from pretrain.synthetic import synthetic_rows
from pretrain.tokenizer import train_tokenizer
from pretrain.train import lr_schedule, make_optimizer

CFG = make_config("tiny", hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64,
                  steps=20, warmup_steps=2)


def _trained(steps: int, seed: int = 0):
    model = build_model(CFG, 300, seed=seed)
    opt = make_optimizer(model, CFG)
    sched = lr_schedule(opt, CFG)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randint(0, 300, (2, 9), generator=gen)
        model(input_ids=x, labels=x, use_cache=False).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return model, opt, sched


def _one_more_step(model, opt, sched):
    x = torch.arange(18).view(2, 9) % 300
    model(input_ids=x, labels=x, use_cache=False).loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([r["text"] for r in synthetic_rows(40)], vocab_size=300)


def test_optimizer_state_survives_safetensors(tmp_path):
    from safetensors.torch import load_file, save_file
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                         set_optimizer_state_dict)

    model, opt, sched = _trained(3)
    tensors, meta = ck.flatten_optimizer_state(get_optimizer_state_dict(model, opt, options=StateDictOptions(full_state_dict=True)))
    assert tensors and all(k.startswith("state::") for k in tensors)
    save_file(tensors, str(tmp_path / "o.safetensors"))
    (tmp_path / "o.json").write_text(json.dumps(meta))
    restored_sd = ck.unflatten_optimizer_state(load_file(str(tmp_path / "o.safetensors")), json.loads((tmp_path / "o.json").read_text()))

    fresh = build_model(CFG, 300, seed=0)
    fresh.load_state_dict(model.state_dict())
    fresh_opt = make_optimizer(fresh, CFG)
    fresh_sched = lr_schedule(fresh_opt, CFG)
    set_optimizer_state_dict(fresh, fresh_opt, restored_sd, options=StateDictOptions(full_state_dict=True))
    fresh_sched.load_state_dict(json.loads(json.dumps(sched.state_dict())))
    expected = _one_more_step(model, opt, sched)
    got = _one_more_step(fresh, fresh_opt, fresh_sched)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    # without the restored state the same step lands elsewhere (the test can tell the difference)
    blank = build_model(CFG, 300, seed=0)
    blank.load_state_dict(model.state_dict())
    blank_opt = make_optimizer(blank, CFG)
    other = _one_more_step(blank, blank_opt, lr_schedule(blank_opt, CFG))
    assert not all(torch.equal(_one_more_step(model, opt, sched)[k], other[k]) for k in other)


def test_rng_state_round_trip():
    tensors, meta = ck.rng_state()
    draws = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(123), random.seed(4), np.random.seed(5)
    ck.set_rng_state(tensors, meta)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(draws[0], again[0]) and draws[1:] == again[1:]


def test_save_is_atomic_pickle_free_and_loadable(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, opt, sched = _trained(2)
    run = tmp_path / "run"
    (run / "checkpoints" / ".tmp-step_000099").mkdir(parents=True)  # debris of a killed save
    assert ck.latest_checkpoint(run) is None
    for step in (2, 4, 6):
        ck.save_checkpoint(run, step, model=model, optimizer=opt, scheduler=sched, tokenizer=tokenizer,
                           trainer_state={"samples_seen": step})
        ck.prune_checkpoints(run, keep=2)
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == ["step_000004", "step_000006"]  # pruned, no tmp folder left
    latest = ck.latest_checkpoint(run)
    assert latest.name == "step_000006"
    files = {p.name for p in latest.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "optimizer.safetensors",
            "optimizer.json", "rng_rank0.safetensors", "trainer_state.json"} <= files
    assert all(p.suffix in (".json", ".safetensors", ".jinja") for p in latest.iterdir())   # .jinja: the chat template
    for p in latest.iterdir():  # no pickle protocol header anywhere
        assert not p.read_bytes().startswith(b"\x80"), p
    state = ck.read_checkpoint(latest)
    assert state["state"]["step"] == 6 and state["state"]["samples_seen"] == 6 and state["rng"] is not None
    loaded = AutoModelForCausalLM.from_pretrained(latest)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    assert len(AutoTokenizer.from_pretrained(latest)) == len(tokenizer)


@pytest.mark.parametrize("damage", ["truncate_optimizer", "garble_state", "drop_model", "truncate_model"])
def test_corrupt_checkpoints_are_refused(tmp_path, tokenizer, damage):
    model, opt, sched = _trained(1)
    path = ck.save_checkpoint(tmp_path, 1, model=model, optimizer=opt, scheduler=sched, tokenizer=tokenizer,
                              trainer_state={})
    if damage == "truncate_optimizer":
        blob = (path / "optimizer.safetensors").read_bytes()
        (path / "optimizer.safetensors").write_bytes(blob[: len(blob) // 2])
    elif damage == "garble_state":
        (path / "trainer_state.json").write_text("{\"format\": 1, \"step\": ")
    elif damage == "drop_model":
        (path / "model.safetensors").unlink()
    else:
        blob = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(blob[:100])
    with pytest.raises(UsageError, match="corrupt checkpoint"):
        ck.read_checkpoint(path)


def test_weights_missing_a_tensor_are_refused(tmp_path, tokenizer):
    from safetensors.torch import load_file, save_file

    model, opt, sched = _trained(1)
    path = ck.save_checkpoint(tmp_path, 1, model=model, optimizer=opt, scheduler=sched, tokenizer=tokenizer,
                              trainer_state={})
    assert ck.load_model(path) is not None
    weights = load_file(str(path / "model.safetensors"))
    weights.pop("model.layers.1.mlp.up_proj.weight")
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    ck.read_checkpoint(path)  # still readable file by file ...
    with pytest.raises(UsageError, match="do not match"):  # ... but a resume would start from random weights
        ck.load_model(path)


def test_a_checkpoint_names_its_run():
    from pathlib import Path

    from pretrain import rundir
    run = Path("runs") / "pretrain" / "fa-small"
    assert rundir.run_of(run / "checkpoints" / "step_000400") == run
    assert rundir.run_of(run) == run and rundir.run_of(str(run)) == run
