"""Tests of the batched multi-turn rollout engine (`engine.rollout`, `engine.backend`).

Why: GRPO, OPD and TurnOPD train on exactly these records, so they must be right to the
token: the log-probs recorded while sampling with a ragged, compacted KV cache must equal one
teacher-forced pass over the final sequences; masks and turn indices must mark what the policy
produced; broken generations must become invalid turns, never exceptions; a seed must
reproduce a rollout. A tiny random Qwen2 (built by `pretrain.model`) and a tokenizer trained
on the tiny corpus are the real model under test; a ``script`` forces some turns (the gold
plan, or junk) so that random weights still produce long multi-turn episodes.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from planning_gym.make_data import main as make_data
from planning_gym.trajectory import task_of_row
from planning_gym.world import World
from engine.backend import HFPolicy, SamplingParams, sample_tokens
from engine.rollout import RolloutConfig, rollout
from pretrain.config import make_config
from pretrain.data import read_texts
from pretrain.model import build_model
from pretrain.tokenizer import agent_mask, encode, special_ids, train_tokenizer


@functools.lru_cache(maxsize=None)
def build_assets(root: str) -> dict:
    """Corpus, tokenizer, small random model, tasks with gold plans (built once per session)."""
    assert make_data(["--domain", "fa", "--scale", "tiny", "--data-dir", root, "--quiet"]) == 0
    corpus = Path(root) / "fa-tiny"
    tokenizer = train_tokenizer(read_texts(corpus / "pretrain.jsonl"), 3000)
    special = special_ids(tokenizer)
    cfg = make_config("tiny", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
    model = build_model(cfg, len(tokenizer), special, seed=0).eval()
    world = World.from_rules_json(json.loads((corpus / "rules_A.json").read_text()))
    rows = [json.loads(line) for line in (corpus / "test_id.jsonl").read_text().splitlines()]
    rows = sorted(rows, key=lambda r: r["horizon"])[::4]             # every horizon, short to long
    return {"corpus": corpus, "tokenizer": tokenizer, "special": special, "model": model, "world": world,
            "tasks": [(world, task_of_row(world, r)) for r in rows], "gold": [r["gold_actions"] for r in rows]}


@pytest.fixture(scope="session")
def assets(tmp_path_factory):
    return build_assets(str(tmp_path_factory.getbasetemp() / "rollout_assets"))


pytestmark = pytest.mark.usefixtures("one_thread")


def play(assets, n=None, script=None, seed=0, tasks=None, **cfg):
    tasks = tasks or (assets["tasks"][:n] if n else assets["tasks"])
    config = RolloutConfig(**{"max_turn_tokens": 12, "step_limit": 6, "batch_size": 4, **cfg})
    policy = HFPolicy(assets["model"], assets["special"].pad)
    return rollout(policy, assets["tokenizer"], tasks, config, seed=seed, script=script), policy


def gold_script(assets, sample_every: int = 0):
    """Force the gold action line on most turns; let the model sample every ``sample_every``-th."""
    def script(i, k, obs):
        gold = assets["gold"][i]
        if sample_every and (i + k) % sample_every == 1 or k >= len(gold):
            return None
        return "Action: " + gold[k]
    return script


def teacher_forced(model, batch) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(2, batch["input_ids"][:, 1:, None]).squeeze(2)
    return torch.cat([torch.zeros_like(lp[:, :1]), lp], dim=1)


def test_logprobs_equal_one_teacher_forced_pass(assets):
    ro, policy = play(assets, script=gold_script(assets, sample_every=3), temperature=0.7, top_p=0.9)
    eps = ro.episodes
    assert max(e.n_turns for e in eps) >= 4 and len({len(e.ids) for e in eps}) >= 4   # multi-turn, ragged
    assert any(e.success for e in eps) and not all(e.success for e in eps)
    assert policy.forwards["prefill"] > 1 and policy.forwards["decode"] > 1
    batch = ro.batch(assets["special"].pad)
    assert len(eps) > 4                                             # more episodes than rows: refills
    mask = batch["agent_mask"].bool()
    diff = (teacher_forced(assets["model"], batch) - batch["logprobs"])[mask].abs().max().item()
    assert diff < 1e-4, diff
    assert mask.sum() > 200
    # the sampling distribution (T=0.7, top-p 0.9) is not the raw one
    assert (batch["sample_logprobs"] - batch["logprobs"])[mask].abs().max() > 1e-3


def test_trainer_targets_are_exactly_the_policy_tokens(assets):
    """The loss mask of the trainers (`next_token_records`): under it, the targets are the
    generated tokens, each once, and the model's teacher-forced log-prob at each equals the
    recorded one.  A mask shifted by one position fails both."""
    from posttrain.train import next_token_records
    ro, _ = play(assets, script=gold_script(assets, sample_every=3), temperature=0.7, top_p=0.9)
    batch = ro.batch(assets["special"].pad)
    rec = next_token_records(batch)
    m = rec["mask"].bool()
    for i, e in enumerate(ro.episodes):
        generated = [t for t, keep in zip(e.ids, e.mask) if keep]
        assert rec["targets"][i][m[i]].tolist() == generated
    with torch.no_grad():
        logits = assets["model"](input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    lp = torch.log_softmax(logits[:, :-1], -1).gather(2, rec["targets"][..., None]).squeeze(2)
    assert (lp - rec["old"])[m].abs().max() < 1e-4 and m.sum() > 200


def test_padded_batch_is_scored_as_each_episode_alone(assets):
    """The trainers score a right-padded batch without its attention mask
    (`engine.rollout.next_token_logits`, for SDPA's causal kernel): every real position must
    get the logits of its episode scored alone. Any other padding keeps its mask (left padding
    here: without the mask, its real tokens would attend to the pads before them)."""
    from engine.rollout import next_token_logits
    ro, _ = play(assets, script=gold_script(assets, sample_every=3), temperature=0.7, top_p=0.9)
    batch = ro.batch(assets["special"].pad)
    ids, attn = batch["input_ids"], batch["attention_mask"]
    assert len(set(attn.sum(1).tolist())) >= 4                       # ragged: real padding
    model, seen = assets["model"], []

    def spy(**kw):
        seen.append(kw["attention_mask"])
        return model(**kw)
    with torch.no_grad():
        padded = next_token_logits(spy, ids, attn)
        for i, n in enumerate(attn.sum(1).tolist()):
            alone = model(input_ids=ids[i:i + 1, :n]).logits[0, :-1]
            assert (padded[i, :n - 1] - alone).abs().max() < 1e-4, i
        left = torch.stack([row.roll(int(n)) for row, n in zip(attn, (1 - attn).sum(1))])
        next_token_logits(spy, ids, left)
    assert seen[0] is None and seen[1] is left


def test_sample_logprob_is_raw_logprob_at_temperature_one(assets):
    ro, _ = play(assets, n=3, temperature=1.0, top_p=1.0, step_limit=2)
    for e in ro.episodes:
        m = np.array(e.mask, bool)
        assert np.allclose(np.array(e.logprobs)[m], np.array(e.sample_logprobs)[m], atol=1e-5)


def test_sample_tokens_temperature_and_top_p():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]] * 256)
    gen = torch.Generator().manual_seed(0)
    tok, logp, logq = sample_tokens(logits, SamplingParams(1.0, 0.5), gen)
    assert (tok == 0).all() and torch.allclose(logq, torch.zeros(256))          # top-p keeps the argmax only
    assert torch.allclose(logp, torch.log_softmax(logits, -1)[:, 0])
    tok, _, logq = sample_tokens(logits, SamplingParams(0.0, 1.0), gen)
    assert (tok == 0).all() and (logq == 0).all()
    tok, _, logq = sample_tokens(logits, SamplingParams(1.0, 0.9), gen)
    assert set(tok.tolist()) == {0, 1}                                          # 0.73 + 0.27 > 0.9
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4])
    many = probs.log().expand(40000, 4)
    for temperature, expect in ((1.0, probs), (0.5, probs ** 2 / (probs ** 2).sum())):
        tok, _, _ = sample_tokens(many, SamplingParams(temperature, 1.0), gen)
        assert torch.allclose(torch.bincount(tok, minlength=4) / 40000, expect, atol=0.01)
    forced = torch.full((256,), 3)
    tok, logp, logq = sample_tokens(logits, SamplingParams(1.0, 0.9), gen, forced)
    assert (tok == 3).all() and torch.isinf(logq).all() and torch.isfinite(logp).all()


def test_runaway_generations_are_invalid_turns(assets):
    ro, _ = play(assets, n=5, max_turn_tokens=5, step_limit=3)
    env_id = assets["special"].env
    for e in ro.episodes:
        assert e.stop_reason in ("step_limit", "eos") and not e.success
        assert e.n_invalid == e.n_turns and all(o.startswith("Result: Error:") for o in e.observations[1:])
        turns = np.array(e.turn)
        for k in range(e.n_turns):
            span = np.flatnonzero(turns == k)
            assert len(span) <= 5
            nxt = span[-1] + 1
            if e.ids[span[-1]] not in (env_id, assets["special"].eos):    # cut: the engine closed it
                assert len(span) == 5 and e.ids[nxt] == env_id and e.mask[nxt] == 0


def test_scripted_turns_valid_invalid_and_eos(assets):
    special = assets["special"]
    j = next(i for i, g in enumerate(assets["gold"]) if len(g) >= 2)
    lines = {0: ["no action line here", "Action: fly to the moon", None],
             1: ["Action: " + assets["gold"][j][0], [special.eos]]}

    def script(i, k, obs):
        return lines[i][k] if k < len(lines[i]) else None

    ro, _ = play(assets, script=script, step_limit=3, max_turn_tokens=24, tasks=[assets["tasks"][0], assets["tasks"][j]])
    a, b = ro.episodes
    assert a.valid[:2] == [False, False] and a.actions[:2] == [None, "fly to the moon"]
    assert a.observations[1].startswith("Result: Error:") and "unknown verb 'fly'" in a.observations[2]
    assert a.n_turns == 3 and a.stop_reason == "step_limit" and a.n_invalid == 3
    assert b.valid == [True, False] and b.stop_reason == "eos" and b.n_turns == 2 and not b.success
    assert b.ids[-1] == special.eos and b.mask[-1] == 1 and b.turn[-1] == 1


def test_engine_edges_agent_marker_eos_success_and_exact_budget(assets):
    """An AGENT the policy writes inside a turn closes it (an ENV follows, as after a cut); a turn
    closed by EOS that reaches the goal ends the text at the EOS (no observation without an ENV);
    no episode is ever longer than max_total_tokens."""
    special, tok = assets["special"], assets["tokenizer"]
    j = next(i for i, g in enumerate(assets["gold"]) if len(g) == 1)
    action = lambda i: encode(tok, "Action: " + assets["gold"][i][0])              # noqa: E731
    lines = {0: [action(0) + [special.agent]], 1: [action(j) + [special.eos]]}

    def script(i, k, obs):
        return lines[i][k] if k < len(lines[i]) else None

    ro, _ = play(assets, script=script, step_limit=2, max_turn_tokens=24,
                 tasks=[assets["tasks"][0], assets["tasks"][j]])
    a, b = ro.episodes
    k = a.ids.index(special.agent, len(encode(tok, a.observations[0])) + 2)     # the policy's AGENT
    assert a.mask[k] == 1 and a.turn[k] == 0 and a.ids[k + 1] == special.env and a.mask[k + 1] == 0
    assert a.actions[0] == assets["gold"][0][0] and a.valid[0]
    assert b.success and b.stop_reason == "success" and b.ids[-1] == special.eos and b.mask[-1] == 1
    from planning_gym.env import PlanningEnv
    first = max(len(encode(tok, PlanningEnv(w).reset(options={"task": t})[0])) for w, t in assets["tasks"][:6])
    for total in range(first + 3, first + 60, 7):
        ro, _ = play(assets, n=6, temperature=1.0, max_turn_tokens=8, max_total_tokens=total, seed=total)
        assert all(len(e.ids) <= total for e in ro.episodes), total


def test_gold_script_succeeds_and_masks_mark_policy_tokens(assets):
    ro, _ = play(assets, script=gold_script(assets), step_limit=20)
    tok, special = assets["tokenizer"], assets["special"]
    for e, gold in zip(ro.episodes, assets["gold"]):
        assert e.success and e.stop_reason == "success" and e.n_turns == len(gold) and e.n_invalid == 0
        assert e.actions == gold and "Goal reached" in e.observations[-1]
        assert e.text.startswith("<|env|>") and e.text.endswith(e.observations[-1])
        mask, turn = np.array(e.mask), np.array(e.turn)
        assert ((mask == 1) == (turn >= 0)).all()
        assert (mask == agent_mask(e.ids, special)).all()          # every turn closed by a policy ENV
        assert sorted(set(turn[turn >= 0])) == list(range(e.n_turns)) and (np.diff(turn[turn >= 0]) >= 0).all()
        # ids are built by concatenation: each observation appears as encode(obs) right after ENV
        pos = 0
        for k, obs in enumerate(e.observations):
            chunk = encode(tok, obs)
            assert e.ids[pos] == special.env and e.ids[pos + 1:pos + 1 + len(chunk)] == chunk
            pos += 1 + len(chunk)
            if k < e.n_turns:
                assert e.ids[pos] == special.agent and e.mask[pos] == 0
                pos = int(np.flatnonzero(turn == k)[-1])                # the turn's closing ENV
        assert pos == len(e.ids)


def test_seed_reproduces_and_changes_samples(assets):
    ids = lambda ro: [e.ids for e in ro.episodes]                              # noqa: E731
    a, _ = play(assets, n=6, seed=7, temperature=1.0)
    b, _ = play(assets, n=6, seed=7, temperature=1.0)
    c, _ = play(assets, n=6, seed=8, temperature=1.0)
    assert ids(a) == ids(b) and [e.logprobs for e in a.episodes] == [e.logprobs for e in b.episodes]
    assert ids(a) != ids(c)


def test_batching_and_refills_do_not_change_greedy_results(assets):
    script = gold_script(assets, sample_every=2)
    one, _ = play(assets, script=script, temperature=0.0, batch_size=1)
    many, policy = play(assets, script=script, temperature=0.0, batch_size=16)
    assert [e.ids for e in one.episodes] == [e.ids for e in many.episodes]
    for x, y in zip(one.episodes, many.episodes):
        assert np.abs(np.array(x.logprobs) - np.array(y.logprobs)).max() < 1e-4


def test_turn_cap_and_token_budget(assets):
    caps = [1, 2, None]
    policy = HFPolicy(assets["model"], assets["special"].pad)
    ro = rollout(policy, assets["tokenizer"], assets["tasks"][-3:], RolloutConfig(max_turn_tokens=8, step_limit=6),
                 seed=0, max_turns=caps)
    assert [e.n_turns for e in ro.episodes] == [1, 2, 6]
    assert [e.stop_reason for e in ro.episodes][:2] == ["turn_cap", "turn_cap"]
    ro, _ = play(assets, n=4, max_turn_tokens=16, max_total_tokens=70)
    for e in ro.episodes:
        assert len(e.ids) <= 70 and e.stop_reason in ("max_total_tokens", "eos")
    with pytest.raises(ValueError):
        play(assets, n=1, max_total_tokens=5)


def test_batch_tensors(assets):
    ro, _ = play(assets, n=5, step_limit=2)
    b = ro.batch(assets["special"].pad)
    lengths = [len(e.ids) for e in ro.episodes]
    assert b["input_ids"].shape == (5, max(lengths)) and b["attention_mask"].sum(1).tolist() == lengths
    for i, e in enumerate(ro.episodes):
        assert b["input_ids"][i, :lengths[i]].tolist() == e.ids
        assert (b["input_ids"][i, lengths[i]:] == assets["special"].pad).all()
        assert (b["turn_index"][i, lengths[i]:] == -1).all() and (b["agent_mask"][i, lengths[i]:] == 0).all()
    assert b["n_turns"].tolist() == [e.n_turns for e in ro.episodes] and b["success"].dtype == torch.bool
    assert ro.generated_tokens == int(b["agent_mask"].sum())
