"""Reading what runs wrote: a post-training run's ``metrics.jsonl`` and an evaluation's ``summary.json``.

Why here: the training-curve command (`analysis.curves`) and the reproductions' tables
(`reproduce.shaping`, `reproduce.turnopd`, ...) read the same records the same way, and
`analysis/` must not import `reproduce/` (the data flow is planning_gym <- pretrain <- engine <-
posttrain <- analysis <- reproduce).  These helpers only read files and build tables; they train
and evaluate nothing.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from analysis.measures import logs_frame
from planning_gym.constants import EVAL_K
from pretrain import rundir

__all__ = ["metrics", "cell", "baseline_cell", "beside_baselines", "log_rows", "frame", "step_cell",
           "corpus_budget_fit", "failure_endings"]


def metrics(run: Path) -> list[dict]:
    """A post-training run's metrics.jsonl records."""
    return [json.loads(line) for line in rundir.metrics_path(run).read_text().splitlines() if line]


def cell(summary: dict, split: str, difficulty: str, metric: str = "avg@8", domain: str | None = None) -> float:
    """One number of an evaluation summary (percent): ``domain=None`` averages over domains by task."""
    return _by_task([r for r in summary["table"] if r["split"] == split and r["difficulty"] == difficulty
                     and (domain is None or r["domain"] == domain)], metric)


def _by_task(rows: list[dict], metric: str) -> float:
    """``metric`` averaged over summary rows weighted by their tasks (NaN for no tasks)."""
    n = sum(r["tasks"] for r in rows)
    return sum(r[metric] * r["tasks"] for r in rows) / n if n else float("nan")


def baseline_cell(summary: dict, split: str, difficulty: str, baseline: str, metric: str = "avg@8") -> float:
    """A non-planning baseline's score on the summary's own tasks (percent; averaged over domains by task)."""
    return _by_task([r for r in summary.get("baselines", []) if r["split"] == split and r["difficulty"] == difficulty
                     and r["baseline"] == baseline], metric)


ORACLES = ("solver",)          # knows the rules and searches: an upper bound, not an agent that does not plan


def beside_baselines(summaries: dict[str, dict], split: str = "ID",
                     difficulties: tuple[str, ...] = ("short", "mid", "long")) -> tuple[list[list], int]:
    """Each model's avg@8 / pass@8 beside what agents that do not plan score on the same tasks: random-valid's
    pass@8 (eight random legal actions), recall-cascade (the nearest training plans replayed back to back) and
    the best of the others, named. A model's cell says something about planning only where it is above them.
    Returns the rows and how many cells a baseline reaches the model's pass@8 (no rows: summaries written
    before evaluations scored the baselines)."""
    rows, reached = [], 0
    for label, s in summaries.items():
        names = sorted({b["baseline"] for b in s.get("baselines", []) if b["split"] == split}
                       - {"random-valid", "recall-cascade", *ORACLES})
        if not names:
            continue
        for d in difficulties:
            others = {n: baseline_cell(s, split, d, n) for n in names}
            best = max(others, key=others.get)
            agents = [baseline_cell(s, split, d, "random-valid", "pass@8"), baseline_cell(s, split, d, "recall-cascade"),
                      others[best]]
            model_pass = cell(s, split, d, "pass@8")
            reached += max((a for a in agents if a == a), default=float("nan")) >= model_pass
            rows.append([label, d, cell(s, split, d), model_pass, *agents[:2], f"{others[best]:.1f} ({best})"])
    return rows, reached


BASELINE_HEADER = ["model", "difficulty", "model avg@8", "model pass@8", "random-valid pass@8", "recall-cascade",
                   "best other (which)"]


def log_rows(records: list[dict], method: str, split: str = "ID", k: int = EVAL_K) -> pd.DataFrame:
    """One row per metrics record: method, step, wall, acc (``split`` avg@k on evaluation records,
    NaN on training steps) and the training step's mean depth / cap where logged."""
    rows = []
    for r in records:
        ev = bool(r.get("eval"))
        rows.append({"method": method, "step": int(r["step"]), "wall": float(r.get("train_wall_s", 0.0)),
                     "acc": float(r[f"{split}_avg@{k}"]) if ev and f"{split}_avg@{k}" in r else float("nan"),
                     "depth": float("nan") if ev or r.get("depth") is None else float(r["depth"]),
                     "cap": float("nan") if ev or r.get("cap") is None else float(r["cap"])})
    return pd.DataFrame(rows, columns=["method", "step", "wall", "acc", "depth", "cap"])


def frame(runs: dict[str, Path], split: str = "ID", start: dict | None = None, k: int = EVAL_K) -> pd.DataFrame:
    """Logs of all runs; ``start`` (the shared student's evaluation summary) becomes every run's
    step-0 point, so the runs need not each re-evaluate the same model (``eval_at_start=False``)."""
    parts = [log_rows(metrics(r), m, split, k) for m, r in runs.items()]
    if start is not None:
        acc = cell(start, split, "all")
        parts += [pd.DataFrame([{"method": m, "step": 0, "wall": 0.0, "acc": acc}]) for m in runs]
    return logs_frame(pd.concat(parts, ignore_index=True))


def step_cell(v) -> int | None:
    """A table's step cell: an int, or None (an en dash) for a missing one."""
    return None if v is None or v != v else int(v)


def corpus_budget_fit(run: Path, max_turn_tokens: int, max_total_tokens: int, corpus: Path | None = None) -> dict:
    """Do a pre-training run's own corpus trajectories fit the budgets its evaluation samples under?
    A rollout cuts a turn at ``max_turn_tokens`` (its action is parsed from the cut text) and stops an
    episode at ``max_total_tokens``: an arm whose trajectories do not fit (a verbose chain of thought)
    would be scored on what it was not allowed to write. Counts the agent turns of the run's corpus
    (pretrain split) with the marker that closes each -- the tokens a policy generates, the corpus's
    agent-mask tokens -- and its whole episodes with their EOS, in the run's tokens.
    ``corpus``: where the run's corpus is now (default: where it was when the run trained)."""
    from planning_gym.text import AGENT, ENV
    from pretrain.data import read_texts
    from pretrain.tokenizer import encode_batch, load_tokenizer
    corpus = Path(corpus or (rundir.read_train_config(run) or {})["data"])
    tok = load_tokenizer(Path(run) / rundir.TOKENIZER)
    texts = read_texts(corpus / "pretrain.jsonl")
    turns = [part.split(ENV)[0] for text in texts for part in text.split(AGENT)[1:]]
    turn_len = [len(ids) + 1 for ids in encode_batch(tok, turns)]
    episode_len = [len(ids) + 1 for ids in encode_batch(tok, texts)]
    return {"turns": len(turn_len), "turns_over": sum(n > max_turn_tokens for n in turn_len),
            "longest_turn": max(turn_len, default=0), "episodes": len(episode_len),
            "episodes_over": sum(n > max_total_tokens for n in episode_len),
            "longest_episode": max(episode_len, default=0)}


def failure_endings(samples: list[dict], split: str = "ID") -> dict[str, int]:
    """How the failed episodes of one split ended (an evaluation's ``stop_reason``: the step limit,
    the token budget, an end of text), most frequent first."""
    return dict(Counter(s.get("stop_reason") or "unrecorded" for s in samples
                        if s["split"] == split and not s["success"]).most_common())
