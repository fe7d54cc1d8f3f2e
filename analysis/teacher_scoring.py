"""A model's own rollouts, scored token by token by one or more teachers.

Why one function: Table 4's token views (the per-token KL by correctness, Figs. 13-15) and
TurnOPD's per-turn KL / forced-mass probe measure the same thing, how far a student's own
tokens are from each teacher's, and two copies of the roll-out-then-score code had already
drifted (different dtypes, different top-k in the same loop).  Here it is written once; the
caller gives the top-k of its paper (`planning_gym.constants.PHYSICS_OPD_TOPK` for Table 4,
`TURNOPD_TOPK` for TurnOPD).

It keeps per-token reductions, not ``[B, T, V]`` logits, so that several models and teachers fit
in memory: the probability of each sampled token, the top-1 token and its probability, and the
top-k reverse KL of the student to each teacher (`posttrain.losses.reverse_kl_topk`, the OPD
loss's own definition).  Every ``[B, T-1]`` tensor is aligned with next-token prediction:
position t scores token t+1.  This is measurement: models are sampled, never updated.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import torch

from analysis.info import top1_from_logits

__all__ = ["ScoredRollouts", "posttrain_tasks", "score_rollouts"]


@dataclass
class ScoredRollouts:
    """One model's rollouts and what its teachers think of each of its tokens."""
    tokenizer: object
    episodes: list                       # `engine.rollout` episodes (success, valid steps, turns)
    input_ids: torch.Tensor              # [B, T] prompt + sampled tokens
    agent_mask: torch.Tensor             # [B, T-1] 1 where token t+1 is the model's own
    turn_index: torch.Tensor             # [B, T-1] 0-based agent turn of token t+1, -1 elsewhere
    token_probs: torch.Tensor            # [B, T-1] the model's probability of token t+1
    top1: tuple[torch.Tensor, torch.Tensor]          # the model's top-1 ids and probabilities [B, T-1]
    teacher_probs: dict[str, torch.Tensor] = field(default_factory=dict)   # per teacher, as token_probs
    teacher_top1: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    kl: dict[str, torch.Tensor] = field(default_factory=dict)   # per teacher: top-k reverse KL [B, T-1]


def posttrain_tasks(corpus: Path, n_tasks: int, group: int = 2, longest_first: bool = False) -> list:
    """``(world, task)`` pairs of the first ``n_tasks`` mid/long tasks of ``corpus``'s posttrain
    split, each repeated ``group`` times.  ``longest_first``: long tasks before mid ones, and
    short ones filling up when the split has fewer than ``n_tasks`` mid/long tasks."""
    from engine.evaluate import load_rows, load_worlds, task_for_row
    worlds, rows = load_worlds(Path(corpus)), load_rows(Path(corpus), "posttrain")
    if longest_first:
        rows = ([r for r in rows if r["difficulty"] == "long"] + [r for r in rows if r["difficulty"] == "mid"]
                + rows)[:n_tasks]
    else:
        rows = [r for r in rows if r["difficulty"] != "short"][:n_tasks]
    return [task_for_row(worlds, r) for r in rows for _ in range(group)]


def _sampled(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]


def score_rollouts(models: Mapping[str, Path], teachers: Mapping[str, Path | torch.nn.Module],
                   tasks: Sequence, topk: int, seed: int = 0,
                   **rollout_settings) -> Iterator[tuple[str, ScoredRollouts]]:
    """For each of ``models`` (label -> run or checkpoint folder) in turn: roll it out on ``tasks``
    at temperature 1 (as in training) and score its tokens with every teacher (label -> folder, or
    a loaded model sharing the tokenizer); yields ``(label, ScoredRollouts)``.

    Teachers are loaded once; one model's logits live at a time.  ``rollout_settings`` go to
    `engine.rollout.RolloutConfig` (e.g. ``step_limit``, ``max_turn_tokens``)."""
    from engine.backend import make_policy
    from engine.evaluate import load_model_and_tokenizer
    from engine.rollout import RolloutConfig, next_token_logits, rollout
    from posttrain import losses
    from pretrain.tokenizer import special_ids

    loaded = {name: (t if isinstance(t, torch.nn.Module) else load_model_and_tokenizer(run_dir=t)[0]).eval()
              for name, t in teachers.items()}
    config = RolloutConfig(**{"temperature": 1.0, **rollout_settings})
    for label, path in models.items():
        model, tok, _ = load_model_and_tokenizer(run_dir=path)
        model.eval()
        pad = special_ids(tok).pad
        with torch.no_grad():
            ro = rollout(make_policy(model, "auto", pad), tok, tasks, config, seed=seed)
            b = ro.batch(pad)
            ids, attn = b["input_ids"], b["attention_mask"]
            mask = b["agent_mask"][:, 1:]
            logits = next_token_logits(model, ids, attn).float()
            scored = ScoredRollouts(tok, ro.episodes, ids, mask, b["turn_index"][:, 1:], _sampled(logits, ids),
                                    top1_from_logits(logits))
            for name, teacher in loaded.items():
                t_logits = next_token_logits(teacher, ids, attn).float()
                scored.teacher_probs[name] = _sampled(t_logits, ids)
                scored.teacher_top1[name] = top1_from_logits(t_logits)
                scored.kl[name] = losses.reverse_kl_topk(logits, mask, topk, teacher_logits=t_logits)
                del t_logits
            del logits
        yield label, scored
