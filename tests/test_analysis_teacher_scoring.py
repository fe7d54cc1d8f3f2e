"""`analysis.teacher_scoring`: one model's rollouts scored by teachers (Table 4's token views and
TurnOPD's per-turn probe both read it).

Why: the two tables used to keep their own copies of this code; now that they share one, its
contract is pinned here on a tiny random Qwen2: a model scored by itself has zero KL and the same
token probabilities and top-1 tokens, a teacher passed as a folder or as a loaded model scores the
same, every tensor is aligned with next-token prediction, and the top-k is the caller's (a coarser
support never gives a larger KL).
"""
from __future__ import annotations

import json

import pytest
import torch

from analysis.teacher_scoring import posttrain_tasks, score_rollouts
from pretrain.tokenizer import save_tokenizer
from test_rollout import assets  # noqa: F401  (session fixture: tiny corpus, tokenizer, random model)

pytestmark = pytest.mark.usefixtures("one_thread")
SETTINGS = dict(max_turn_tokens=12, step_limit=4, batch_size=4)


def checkpoint(model, tokenizer, folder):
    """A checkpoint folder `load_model_and_tokenizer(run_dir=...)` accepts."""
    folder.mkdir(parents=True)
    model.save_pretrained(str(folder))
    save_tokenizer(tokenizer, folder)
    (folder / "trainer_state.json").write_text(json.dumps({"format": 1, "step": 1}))
    return folder


@pytest.fixture(scope="module")
def models(assets, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("scoring")
    own = checkpoint(assets["model"], assets["tokenizer"], root / "run" / "checkpoints" / "step_000001")
    other = type(assets["model"])(assets["model"].config)
    other.load_state_dict({k: v + 0.05 * torch.randn_like(v) for k, v in assets["model"].state_dict().items()})
    other = checkpoint(other.eval(), assets["tokenizer"], root / "other" / "checkpoints" / "step_000001")
    return own, other


def test_a_model_scored_by_itself_agrees_with_itself_to_the_token(assets, models):  # noqa: F811
    own, other = models
    tasks = assets["tasks"][:3]
    (label, s), = list(score_rollouts({"me": own}, {"folder": own, "loaded": assets["model"], "other": other},
                                      tasks, topk=5, seed=0, **SETTINGS))
    assert label == "me" and len(s.episodes) == 3
    B, T = s.input_ids.shape
    for t in (s.agent_mask, s.turn_index, s.token_probs, *s.top1, *s.kl.values(), *s.teacher_probs.values()):
        assert t.shape == (B, T - 1)
    mask = s.agent_mask.bool()
    assert mask.any() and (s.turn_index[mask] >= 0).all()
    for name in ("folder", "loaded"):
        assert s.kl[name][mask].abs().max() < 1e-5
        assert torch.allclose(s.teacher_probs[name], s.token_probs, atol=1e-6)
        assert torch.equal(s.teacher_top1[name][0], s.top1[0])
    assert (s.kl["other"][mask] > 1e-4).any() and (s.kl["other"][mask] >= -1e-6).all()


def test_the_top_k_is_the_callers_and_a_seed_repeats_the_rollouts(assets, models):  # noqa: F811
    own, other = models
    tasks = assets["tasks"][:3]
    vocab = len(assets["tokenizer"])
    coarse = dict(score_rollouts({"a": own, "b": own}, {"t": other}, tasks, topk=3, seed=1, **SETTINGS))
    fine = dict(score_rollouts({"a": own}, {"t": other}, tasks, topk=vocab, seed=1, **SETTINGS))
    assert torch.equal(coarse["a"].input_ids, coarse["b"].input_ids)        # same seed, same rollouts
    assert torch.equal(coarse["a"].input_ids, fine["a"].input_ids)
    mask = coarse["a"].agent_mask.bool()
    small, full = coarse["a"].kl["t"][mask], fine["a"].kl["t"][mask]
    assert (small <= full + 1e-5).all() and (small < full - 1e-6).any()


def test_posttrain_tasks_take_mid_and_long_tasks_and_repeat_each(assets):  # noqa: F811
    from engine.evaluate import load_rows, load_worlds, task_for_row
    corpus = assets["corpus"]
    rows, worlds = load_rows(corpus, "posttrain"), load_worlds(corpus)
    tasks = posttrain_tasks(corpus, n_tasks=3, group=2)
    assert len(tasks) == 6 and tasks[0] == tasks[1] and tasks[1] != tasks[2]

    def keys(chosen):
        return [task_for_row(worlds, r)[1].key for r in chosen]
    mid_long = [r for r in rows if r["difficulty"] != "short"]
    long_first = [r for r in rows if r["difficulty"] == "long"] + [r for r in rows if r["difficulty"] == "mid"] + rows
    assert [t.key for _, t in posttrain_tasks(corpus, n_tasks=3, group=1)] == keys(mid_long[:3])
    assert [t.key for _, t in posttrain_tasks(corpus, n_tasks=3, group=1, longest_first=True)] == keys(long_first[:3])
