"""Information measures the papers argue with but never estimate.

Why: the Physics paper's post-training story rests on I(task; pattern) < I(task; knowledge)
(planning patterns are reusable skeletons, planning knowledge is task-specific), and TurnOPD
explains deep-turn KL decay with a "forced mass" lambda(c) that neither paper measures. Both
reviews ask for an estimate; the gym makes one possible, and these functions provide it.

Mutual information (plug-in, from discrete samples):
  ``I(X;Y) = H(X) + H(Y) - H(X,Y)`` with ``H`` the entropy of the empirical distribution. With
  ``miller_madow=True`` each entropy gets the Miller-Madow correction ``(m - 1) / (2N)`` nats,
  m = number of observed (non-empty) bins, N = sample count; the plug-in entropy is biased low by
  about that much, and plug-in MI is biased *high* by about ``(m_x - 1)(m_y - 1) / (2N)`` for
  independent variables, which the correction removes to first order. The corrected MI can be
  slightly negative; it is reported as is (clipping would bring the bias back). Units: bits by
  default (``base=2``), nats with ``base=math.e``.
  Samples may be any hashable values; lists (e.g. an action sequence) are turned into tuples,
  so a trajectory's action list or rule choices can serve as its "knowledge" signature.

Forced-mass proxy (TurnOPD's lambda(c), per turn depth):
  At each agent position, student and teacher are both "forced" when they put their top-1
  probability on the *same* token and both top-1 probabilities exceed ``threshold`` (0.9). The
  proxy is the share of agent positions at a turn depth that are forced. It is a lower-bound
  style proxy for the shared, context-determined mass of the paper's decomposition: positions
  where both models merely agree softly are not counted.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Hashable, Iterable, Optional, Sequence

import pandas as pd
import torch

__all__ = ["entropy", "mutual_information", "signature", "task_information", "top1_from_logits",
           "forced_mass"]


def signature(x) -> Hashable:
    """A hashable form of a sample: lists/tuples become nested tuples, dicts sorted item tuples."""
    if isinstance(x, dict):
        return tuple(sorted((k, signature(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(signature(v) for v in x)
    return x


def _entropy_from_counts(counts: Iterable[int], miller_madow: bool, base: float) -> float:
    c = [int(v) for v in counts if v > 0]
    n = sum(c)
    if n == 0:
        return float("nan")
    h = -sum(v / n * math.log(v / n) for v in c)
    if miller_madow:
        h += (len(c) - 1) / (2.0 * n)
    return h / math.log(base)


def entropy(samples: Sequence, miller_madow: bool = False, base: float = 2.0) -> float:
    """Plug-in (optionally Miller-Madow corrected) entropy of discrete samples."""
    return _entropy_from_counts(Counter(signature(s) for s in samples).values(), miller_madow, base)


def mutual_information(x: Sequence, y: Sequence, miller_madow: bool = False, base: float = 2.0) -> float:
    """Plug-in I(X;Y) from paired samples; see the module docstring for the correction."""
    if len(x) != len(y):
        raise ValueError("x and y need one value per sample")
    xs = [signature(v) for v in x]
    ys = [signature(v) for v in y]
    hx = _entropy_from_counts(Counter(xs).values(), miller_madow, base)
    hy = _entropy_from_counts(Counter(ys).values(), miller_madow, base)
    hxy = _entropy_from_counts(Counter(zip(xs, ys)).values(), miller_madow, base)
    return hx + hy - hxy


def task_information(tasks: Sequence, patterns: Sequence, knowledge: Sequence,
                     miller_madow: bool = True, base: float = 2.0) -> pd.DataFrame:
    """I(task; pattern) and I(task; knowledge) side by side, with the entropies they are bounded by.

    Rows ``pattern`` and ``knowledge``; columns ``mi``, ``h_task``, ``h_var`` (entropy of the
    variable), ``mi_over_h_var`` (how much of the variable the task determines, 1 = fully), ``n``.
    """
    h_task = entropy(tasks, miller_madow, base)
    rows = []
    for label, var in (("pattern", patterns), ("knowledge", knowledge)):
        mi = mutual_information(tasks, var, miller_madow, base)
        hv = entropy(var, miller_madow, base)
        rows.append({"variable": label, "mi": mi, "h_task": h_task, "h_var": hv,
                     "mi_over_h_var": mi / hv if hv > 0 else float("nan"), "n": len(tasks)})
    return pd.DataFrame(rows).set_index("variable")


# ----------------------------------------------------------------------------- forced mass
def top1_from_logits(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-1 token ids and their softmax probabilities, ``[B, T]`` each, from ``[B, T, V]`` logits."""
    p, i = torch.softmax(logits.detach().double(), dim=-1).max(dim=-1)
    return i, p


def forced_mass(student_ids: torch.Tensor, student_probs: torch.Tensor, teacher_ids: torch.Tensor,
                teacher_probs: torch.Tensor, turn_index: torch.Tensor, agent_mask: torch.Tensor,
                threshold: float = 0.9, episode_group: Optional[Sequence] = None) -> pd.DataFrame:
    """Forced-mass proxy lambda per turn depth (1-based ``depth = turn_index + 1``).

    All tensors are ``[B, T]``; ``agent_mask`` selects agent positions. Returns one row per
    (group, depth) with ``positions``, ``forced`` and ``lambda = forced / positions``. With
    ``episode_group`` (one label per episode, e.g. success) the rows are split by that label.
    """
    mask = agent_mask != 0
    forced = mask & (student_ids == teacher_ids) & (student_probs > threshold) & (teacher_probs > threshold)
    groups = list(episode_group) if episode_group is not None else ["all"] * mask.shape[0]
    if len(groups) != mask.shape[0]:
        raise ValueError("episode_group needs one label per episode")
    if mask.any() and int(turn_index[mask].min()) < 0:
        raise ValueError("agent positions must have turn_index >= 0")
    b_idx, t_idx = mask.nonzero(as_tuple=True)
    frame = pd.DataFrame({"group": [groups[b] for b in b_idx.tolist()],
                          "depth": (turn_index[b_idx, t_idx] + 1).tolist(),
                          "forced": forced[b_idx, t_idx].tolist()})
    out = frame.groupby(["group", "depth"], sort=True)["forced"].agg(positions="count", forced="sum")
    out = out.reset_index()
    out["forced"] = out["forced"].astype(int)
    out["lambda"] = out["forced"] / out["positions"]
    if episode_group is None:
        out = out.drop(columns="group")
    return out
