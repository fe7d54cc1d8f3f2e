"""Pure-tensor objectives for multi-turn post-training (GRPO, agent OPD, TurnOPD).

Nothing here knows about models or environments. Every function takes the batch layout the
trainers produce:

* ``agent_mask [B, T]`` -- 1 on tokens the policy generated, 0 on prompt / environment /
  padding tokens. Only agent tokens ever carry loss; the environment's text is context, not
  an action, so supervising it would train the policy to imitate the simulator.
* ``turn_index [B, T]`` -- agent turn 0..K-1 of each agent token, -1 elsewhere.
* per-token log-probs ``[B, T]`` and logits ``[B, T, V]``.

Normalisation is explicit and global. A loss that divides by "tokens in this micro-batch" or
"tokens in this sequence" changes value when the batch is split differently for memory,
so every reducer takes the *whole batch's* denominator as an argument (agent-token count or
episode count). Summing micro-batch losses computed with that shared denominator reproduces
the full-batch loss and gradient exactly (up to float rounding).

Masked positions are neutralised *before* any non-linearity (``torch.where`` on inputs),
not only multiplied by zero afterwards: ``0 * inf`` is NaN in both the forward and the
backward pass, and environment positions often hold meaningless log-probs.
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

Count = Union[int, float, Tensor, None]

__all__ = [
    "grpo_advantages",
    "process_advantages",
    "broadcast_turn_values",
    "combine_advantages",
    "ppo_clip_per_token",
    "policy_gradient_loss",
    "clip_fraction",
    "kl_to_reference_per_token",
    "kl_to_reference_loss",
    "token_entropy",
    "reverse_kl_full",
    "topk_indices",
    "teacher_topk_logprobs",
    "TOPK_SUPPORTS",
    "TOPK_ESTIMATORS",
    "reverse_kl_topk",
    "masked_token_mean",
    "turn_weights",
    "weighted_episode_mean",
    "turnopd_loss",
    "alpha_at",
]


# ----------------------------------------------------------------------------- helpers
def _bool(mask: Tensor) -> Tensor:
    return mask if mask.dtype == torch.bool else mask != 0


def _float(x: Tensor) -> Tensor:
    """Half-precision inputs are upcast: softmax/KL sums lose too much in bf16."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _denominator(count: Count, fallback: Tensor, like: Tensor) -> Tensor:
    """Global denominator as a tensor; a zero denominator becomes 1 (loss of an empty batch is 0)."""
    c = fallback if count is None else torch.as_tensor(count)
    c = c.to(device=like.device, dtype=like.dtype)
    return torch.where(c == 0, torch.ones_like(c), c)


# ----------------------------------------------------------------------------- advantages
def _group_normalise(values: Tensor, group_ids: Tensor, scale_by_std: bool, eps: float,
                     unbiased: bool) -> Tensor:
    """(x - mean_g) / (std_g + eps) per group g, with degenerate groups mapped to exactly 0.

    A group is degenerate when all its values are equal (this includes singleton groups):
    there is no within-group contrast, hence no learning signal. Testing max == min instead of
    relying on ``0 / (0 + eps)`` matters because a float mean of equal values need not equal
    the value exactly, which would leak tiny non-zero advantages.
    """
    if values.numel() == 0:
        return values.clone()
    _, inv = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inv.max()) + 1
    counts = torch.bincount(inv, minlength=n_groups).to(values.dtype)
    mean = values.new_zeros(n_groups).index_add_(0, inv, values) / counts
    centred = values - mean[inv]
    gmax = values.new_full((n_groups,), float("-inf")).scatter_reduce(0, inv, values, "amax")
    gmin = values.new_full((n_groups,), float("inf")).scatter_reduce(0, inv, values, "amin")
    degenerate = (gmax == gmin)[inv]
    if scale_by_std:
        sq = values.new_zeros(n_groups).index_add_(0, inv, centred * centred)
        dof = (counts - 1.0).clamp(min=1.0) if unbiased else counts
        std = torch.sqrt(sq / dof)
        centred = centred / (std[inv] + eps)
    return torch.where(degenerate, torch.zeros_like(centred), centred)


def grpo_advantages(rewards: Tensor, group_ids: Tensor, scale_by_std: bool = True,
                    eps: float = 1e-6, unbiased: bool = False) -> Tensor:
    """Group-relative advantage per episode ``[B]``: reward minus its group's mean reward,
    optionally divided by the group's standard deviation (+ ``eps``).

    The std is the *population* std (divide by n) by default -- the group is the whole set of
    samples we have for that task, not a sample from which we estimate a wider population, and
    it stays defined for groups of one. ``unbiased=True`` gives the sample std (n - 1) used by
    some GRPO implementations. Groups whose rewards are all equal get advantage exactly 0.
    Compute this on the *full* batch before splitting into micro-batches: group statistics
    need every member of the group.
    """
    r = rewards.detach()
    r = r.to(torch.get_default_dtype()) if not torch.is_floating_point(r) else _float(r)
    return _group_normalise(r, group_ids, scale_by_std, eps, unbiased)


def _turn_presence(turn_index: Tensor, agent_mask: Tensor, num_turns: int) -> Tensor:
    """``[B, K]`` bool: does episode b have at least one agent token in turn k."""
    mask = _bool(agent_mask)
    idx = torch.where(mask, turn_index, torch.zeros_like(turn_index)).long()
    if mask.any() and (int(idx[mask].min()) < 0 or int(idx[mask].max()) >= num_turns):
        raise ValueError("agent tokens must have 0 <= turn_index < number of turns")
    hits = torch.zeros(mask.shape[0], num_turns, dtype=torch.long, device=mask.device)
    hits.scatter_add_(1, idx, mask.long())
    return hits > 0


def broadcast_turn_values(values: Tensor, turn_index: Tensor, agent_mask: Tensor) -> Tensor:
    """Spread a per-turn quantity ``[B, K]`` onto that turn's agent tokens ``[B, T]`` (0 elsewhere)."""
    mask = _bool(agent_mask)
    _turn_presence(turn_index, mask, values.shape[1])  # validates the indices
    idx = torch.where(mask, turn_index, torch.zeros_like(turn_index)).long()
    out = values.gather(1, idx)
    return torch.where(mask, out, torch.zeros_like(out))


def process_advantages(step_rewards: Tensor, turn_index: Tensor, agent_mask: Tensor,
                       group_ids: Tensor, scale_by_std: bool = True, eps: float = 1e-6,
                       step_mask: Optional[Tensor] = None) -> Tensor:
    """Group-normalised per-turn process advantage ``[B, K]``.

    ``step_rewards[b, k]`` is the solver's verdict on turn k of episode b (1 if the action
    shortened the remaining shortest plan, else 0). Each turn is judged on its own -- no
    return-to-go sum -- because "did the remaining optimal distance drop" already looks
    ahead. The rewards are pooled over every real turn of every episode in a group and
    normalised like GRPO rewards (population std, all-equal => 0), so a turn is rewarded for
    being better than the group's typical step. Turns that do not exist (``step_mask`` False,
    by default: the episode has no agent token in that turn) get 0.
    """
    k = step_rewards.shape[1]
    valid = _turn_presence(turn_index, agent_mask, k) if step_mask is None else _bool(step_mask)
    r = step_rewards.detach()
    r = r.to(torch.get_default_dtype()) if not torch.is_floating_point(r) else _float(r)
    groups = group_ids.view(-1, 1).expand(-1, k)
    flat = _group_normalise(r[valid], groups[valid], scale_by_std, eps, unbiased=False)
    out = torch.zeros_like(r)
    out[valid] = flat
    return out


def combine_advantages(outcome: Tensor, agent_mask: Tensor, turn_index: Optional[Tensor] = None,
                       process: Optional[Tensor] = None, process_weight: float = 0.0) -> Tensor:
    """Per-token advantage ``[B, T]`` = outcome advantage of the episode + ``process_weight`` x
    process advantage of the token's turn. ``process_weight = 0`` is plain outcome GRPO, so
    the process reward is a strictly additive, switch-off-able control."""
    mask = _bool(agent_mask)
    adv = outcome.view(-1, 1).expand_as(mask).to(outcome.dtype)
    if process is not None and process_weight != 0.0:
        if turn_index is None:
            raise ValueError("turn_index is required to broadcast a process advantage")
        adv = adv + process_weight * broadcast_turn_values(process.to(adv.dtype), turn_index, mask)
    return torch.where(mask, adv, torch.zeros_like(adv))


# ----------------------------------------------------------------------------- policy gradient
def ppo_clip_per_token(new_logp: Tensor, old_logp: Tensor, advantages: Tensor, agent_mask: Tensor,
                       clip_eps: float = 0.2) -> Tensor:
    """Per-token PPO clipped surrogate *loss* ``-min(r A, clip(r, 1-e, 1+e) A)``, 0 off-mask.

    ``advantages`` may be per token ``[B, T]`` or per episode ``[B]`` (broadcast over the row).
    """
    mask = _bool(agent_mask)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.view(-1, 1).expand_as(new_logp)
    log_ratio = torch.where(mask, new_logp - old_logp.detach(), torch.zeros_like(new_logp))
    ratio = torch.exp(log_ratio)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv)
    return torch.where(mask, -surrogate, torch.zeros_like(surrogate))


def masked_token_mean(per_token: Tensor, agent_mask: Tensor, total_agent_tokens: Count = None) -> Tensor:
    """Sum of per-token values over agent tokens / the *global* agent-token count.

    Pass ``total_agent_tokens`` = agent tokens in the whole optimiser batch when this call sees
    only a micro-batch; left ``None`` it counts this call's tokens (correct for a full batch).
    """
    mask = _bool(agent_mask)
    total = torch.where(mask, per_token, torch.zeros_like(per_token)).sum()
    return total / _denominator(total_agent_tokens, mask.sum(), total)


def policy_gradient_loss(new_logp: Tensor, old_logp: Tensor, advantages_per_token: Tensor,
                         agent_mask: Tensor, clip_eps: float = 0.2,
                         total_agent_tokens: Count = None) -> Tensor:
    """PPO/GRPO clipped policy-gradient loss, token-sum normalised by the global agent-token count.

    Global token normalisation weights every generated token equally across the batch (a long
    episode is not down-weighted per token as with per-sequence means) and makes micro-batch
    accumulation exact.
    """
    per_tok = ppo_clip_per_token(new_logp, old_logp, advantages_per_token, agent_mask, clip_eps)
    return masked_token_mean(per_tok, agent_mask, total_agent_tokens)


@torch.no_grad()
def clip_fraction(new_logp: Tensor, old_logp: Tensor, agent_mask: Tensor, clip_eps: float = 0.2) -> float:
    """Share of agent tokens whose ratio left [1-e, 1+e] (a logging diagnostic)."""
    mask = _bool(agent_mask)
    if not mask.any():
        return 0.0
    ratio = torch.exp((new_logp - old_logp)[mask])
    return float(((ratio < 1.0 - clip_eps) | (ratio > 1.0 + clip_eps)).float().mean())


# ----------------------------------------------------------------------------- KL to a reference
def kl_to_reference_per_token(logp: Tensor, ref_logp: Tensor, agent_mask: Tensor,
                              estimator: str = "k3", log_ratio_clip: float = 20.0) -> Tensor:
    """Single-sample estimators of KL(policy || reference) at each sampled token, 0 off-mask.

    With ``log r = ref_logp - logp`` (the token was sampled from the policy):
    ``k1 = -log r`` (unbiased, can be negative), ``k2 = (log r)^2 / 2`` (biased, >= 0),
    ``k3 = (r - 1) - log r`` (unbiased, >= 0, lower variance). For ``k3`` the log-ratio is
    clamped to ``+-log_ratio_clip`` so that ``exp`` cannot overflow; this only bites at
    absurd log-ratios and then zeroes the gradient past the bound.
    """
    mask = _bool(agent_mask)
    log_r = torch.where(mask, ref_logp.detach() - logp, torch.zeros_like(logp))
    if estimator == "k1":
        val = -log_r
    elif estimator == "k2":
        val = 0.5 * log_r * log_r
    elif estimator == "k3":
        log_r = log_r.clamp(-log_ratio_clip, log_ratio_clip)
        val = torch.expm1(log_r) - log_r
    else:
        raise ValueError(f"unknown KL estimator {estimator!r} (use 'k1', 'k2' or 'k3')")
    return torch.where(mask, val, torch.zeros_like(val))


def kl_to_reference_loss(logp: Tensor, ref_logp: Tensor, agent_mask: Tensor, estimator: str = "k3",
                         total_agent_tokens: Count = None) -> Tensor:
    """Reference-KL penalty with the same global agent-token normalisation as the PG loss."""
    return masked_token_mean(kl_to_reference_per_token(logp, ref_logp, agent_mask, estimator),
                             agent_mask, total_agent_tokens)


def token_entropy(logits: Tensor, agent_mask: Tensor) -> Tensor:
    """Entropy of the full next-token distribution at each agent token ``[B, T]`` (0 off-mask)."""
    mask = _bool(agent_mask)
    lp = F.log_softmax(_float(logits[mask]), dim=-1)
    ent = -(lp.exp() * lp).sum(-1)
    return torch.zeros(mask.shape, dtype=ent.dtype, device=ent.device).masked_scatter(mask, ent)


# ----------------------------------------------------------------------------- distillation
def _scatter_rows(mask: Tensor, values: Tensor) -> Tensor:
    """Put per-agent-token values ``[N]`` back into a zero ``[B, T]`` tensor (differentiably)."""
    return torch.zeros(mask.shape, dtype=values.dtype, device=values.device).masked_scatter(mask, values)


def _p_log_ratio(lp: Tensor, lq: Tensor) -> Tensor:
    """``p log(p/q)`` elementwise, differentiated through ``p`` only.

    Over a whole distribution (the vocabulary, or a support plus its tail) the gradient through
    ``log p`` sums to zero analytically (``sum p d log p = d sum p = 0``), so dropping it leaves
    the exact gradient of the KL.  Kept, it is float noise (~1e-9) when student and teacher
    agree, which Adam turns into full learning-rate steps: self-distillation then drifts.
    Dropped, a student equal to its teacher gets a gradient of exactly zero."""
    return lp.exp() * (lp - lq).detach()


def reverse_kl_full(student_logits: Tensor, teacher_logits: Tensor, agent_mask: Tensor) -> Tensor:
    """Exact per-token reverse KL(student || teacher) over the whole vocabulary ``[B, T]``.

    Reverse (mode-seeking) KL is the OPD objective: on the student's own rollouts it penalises
    the student for putting mass where the teacher would not. The teacher is a fixed target
    (detached); gradients reach the student logits analytically through every vocabulary
    entry. Only agent positions are computed (gathered first), so environment positions cost
    nothing and may hold any values.
    """
    mask = _bool(agent_mask)
    ls = F.log_softmax(_float(student_logits[mask]), dim=-1)
    lt = F.log_softmax(_float(teacher_logits.detach()[mask]), dim=-1).to(ls.dtype)
    return _scatter_rows(mask, _p_log_ratio(ls, lt).sum(-1))


from posttrain.config import TOPK_ESTIMATORS, TOPK_SUPPORTS  # noqa: E402  (declared with the config fields)


@torch.no_grad()
def topk_indices(logits: Tensor, k: int) -> Tensor:
    """Vocabulary ids of the k most likely tokens at every position ``[B, T, k]`` (of the student
    or of the teacher: the support of a top-k KL)."""
    if not 1 <= k <= logits.shape[-1]:
        raise ValueError(f"k={k} must lie in [1, vocab size {logits.shape[-1]}]")
    return torch.topk(logits, k, dim=-1).indices


@torch.no_grad()
def teacher_topk_logprobs(teacher_logits: Tensor, indices: Tensor) -> Tensor:
    """The teacher's full-vocabulary log-probs at the given ids ``[B, T, k]``."""
    return F.log_softmax(_float(teacher_logits), dim=-1).gather(-1, indices)


def _log1mexp(x: Tensor) -> Tensor:
    """log(1 - exp(x)) for x <= 0, accurate at both ends; -inf at x = 0."""
    x = x.clamp(max=0.0)
    return torch.where(x > -0.6931, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


_OFF = -1e4   # "log 0" that stays finite: exp() is exactly 0, and no inf - inf in any gradient


def _tail_term(lp_tail: Tensor, lq_tail: Tensor) -> Tensor:
    """P (log P - log Q) of the bucket outside the support (0 when the tail is empty)."""
    return _p_log_ratio(lp_tail.clamp(min=_OFF), lq_tail.clamp(min=_OFF))


def reverse_kl_topk(student_logits: Tensor, agent_mask: Tensor, k: int = 50, *,
                    teacher_logits: Optional[Tensor] = None, teacher_indices: Optional[Tensor] = None,
                    teacher_logprobs: Optional[Tensor] = None, support: str = "teacher",
                    estimator: str = "tail") -> Tensor:
    """Top-k reverse KL(student || teacher) per token ``[B, T]`` on a support S of k tokens.

    ``support``: the teacher's top-k (TurnOPD's Table 7: "the teacher's top-K support"), the
    student's top-k, or their union.  ``estimator``:

    * ``tail`` (default): S plus one *tail bucket* for all the mass outside S,
      ``sum_{v in S} p(v) log(p(v)/q(v)) + P_out log(P_out/Q_out)``.  It is the exact KL between
      the two distributions coarsened to S + tail, so it is >= 0, at most the full KL, equal to
      it when k = V, and it sees disagreement outside S: a student that puts its mass where the
      teacher's top-k is not pays for it (with ``renormalized`` on the student's own top-k such a
      student can have loss and gradient exactly 0 while the true KL is large).  Gradients reach
      every logit through P_out.
    * ``renormalized``: both distributions restricted to S and renormalised (a KL on S; blind
      outside S).
    * ``truncated``: the first terms of the exact sum, full-vocabulary probabilities on S and no
      tail; can be negative (why TurnOPD clips per-turn K_t at 0).

    The teacher is given as full ``teacher_logits``, or as ``teacher_indices`` /
    ``teacher_logprobs`` ``[B, T, k]``: ids chosen by the caller (``support`` is then theirs) and
    the teacher's full-vocabulary log-probs at them (its tail is 1 - their mass).  The support
    choice is not differentiated; the teacher is detached.
    """
    if support not in TOPK_SUPPORTS:
        raise ValueError(f"support must be one of {', '.join(TOPK_SUPPORTS)}, not {support!r}")
    if estimator not in TOPK_ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(TOPK_ESTIMATORS)}, not {estimator!r}")
    mask = _bool(agent_mask)
    s = _float(student_logits[mask])
    k = min(k, s.shape[-1])                  # k >= V: the support is the whole vocabulary
    ls_full = F.log_softmax(s, dim=-1)
    if teacher_logits is not None:
        if teacher_indices is not None or teacher_logprobs is not None:
            raise ValueError("give the teacher either as logits or as (indices, logprobs), not both")
        t_raw = _float(teacher_logits.detach()[mask]).to(s.dtype)
        lt_full = F.log_softmax(t_raw, dim=-1)
        in_s = torch.zeros_like(s, dtype=torch.bool)
        if support in ("student", "union"):
            in_s.scatter_(-1, topk_indices(s.detach(), k), True)
        if support in ("teacher", "union"):
            in_s.scatter_(-1, topk_indices(lt_full, k), True)
        off = torch.full_like(s, _OFF)
        if estimator == "renormalized":
            ls = F.log_softmax(torch.where(in_s, s, off), dim=-1)        # the same ops on both sides
            lt = F.log_softmax(torch.where(in_s, t_raw, off), dim=-1)
            kl = torch.where(in_s, _p_log_ratio(ls, lt), torch.zeros_like(s))
            return _scatter_rows(mask, kl.sum(-1))
        term = ls_full.exp() * (ls_full - lt_full) if estimator == "truncated" else _p_log_ratio(ls_full, lt_full)
        inner = torch.where(in_s, term, torch.zeros_like(s)).sum(-1)
        if estimator == "tail":
            inner = inner + _tail_term(torch.logsumexp(torch.where(in_s, off, ls_full), -1),
                                       torch.logsumexp(torch.where(in_s, off, lt_full), -1))
        return _scatter_rows(mask, inner)
    if teacher_indices is None or teacher_logprobs is None:
        raise ValueError("teacher needs logits or both teacher_indices and teacher_logprobs")
    idx = teacher_indices[mask]
    lt = _float(teacher_logprobs.detach()[mask]).to(s.dtype)
    if estimator == "renormalized":
        ls, lt = F.log_softmax(s.gather(-1, idx), dim=-1), F.log_softmax(lt, dim=-1)
        return _scatter_rows(mask, _p_log_ratio(ls, lt).sum(-1))
    ls = ls_full.gather(-1, idx)
    kl = (ls.exp() * (ls - lt) if estimator == "truncated" else _p_log_ratio(ls, lt)).sum(-1)
    if estimator == "tail":
        out = torch.ones_like(s, dtype=torch.bool).scatter(-1, idx, False)
        lp_tail = torch.logsumexp(torch.where(out, ls_full, torch.full_like(s, _OFF)), -1)
        kl = kl + _tail_term(lp_tail, _log1mexp(torch.logsumexp(lt, -1)))
    return _scatter_rows(mask, kl)


# ----------------------------------------------------------------------------- TurnOPD weighting
def turn_weights(turn_index: Tensor, agent_mask: Tensor, alpha: float,
                 dtype: Optional[torch.dtype] = None) -> Tensor:
    """TurnOPD per-token loss weights ``[B, T]``; each episode's weights sum to 1.

    For an episode with N agent tokens in T_e turns, a token of turn k (n_k tokens) gets
    ``(1 - alpha) / N + alpha / (T_e * n_k)``. The first term (q_traj) is the usual
    trajectory-level token mean: a turn's share of the loss grows with its length, so long
    shallow turns dominate. The second (q_turn) gives every turn the same 1/T_e share, spread
    evenly over its tokens, so deep short decision turns are not starved. Turns are the
    distinct ``turn_index`` values present among the episode's agent tokens (a turn with no
    agent token gets no share). Rows without agent tokens get all-zero weights.

    Reduce with ``weighted_episode_mean`` (sum of weighted per-token loss / number of
    episodes), i.e. a mean over episodes. Note that at alpha = 0 this is the per-episode token
    mean averaged over episodes, not the batch-global token mean used by vanilla OPD.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha={alpha} must lie in [0, 1]")
    mask = _bool(agent_mask)
    dtype = dtype or torch.get_default_dtype()
    if mask.any() and int(turn_index[mask].min()) < 0:
        raise ValueError("agent tokens must have turn_index >= 0")
    idx = torch.where(mask, turn_index, torch.zeros_like(turn_index)).long()
    n_turn_slots = int(idx.max()) + 1 if idx.numel() else 1
    counts = torch.zeros(mask.shape[0], n_turn_slots, dtype=dtype, device=mask.device)
    counts.scatter_add_(1, idx, mask.to(dtype))
    n_tokens = counts.sum(1, keepdim=True).clamp(min=1)
    n_turns = (counts > 0).sum(1, keepdim=True).to(dtype).clamp(min=1)
    tokens_in_turn = counts.gather(1, idx).clamp(min=1)
    w = (1.0 - alpha) / n_tokens + alpha / (n_turns * tokens_in_turn)
    return torch.where(mask, w, torch.zeros_like(w))


def weighted_episode_mean(per_token: Tensor, token_weights: Tensor, num_episodes: Count = None) -> Tensor:
    """``sum(per_token * weights) / num_episodes`` -- the reducer for ``turn_weights``.

    ``num_episodes`` must be the whole optimiser batch's count of episodes with agent tokens
    when called on a micro-batch; ``None`` counts rows with any positive weight here.
    """
    contrib = torch.where(token_weights != 0, per_token * token_weights, torch.zeros_like(per_token))
    fallback = (token_weights > 0).any(dim=1).sum()
    total = contrib.sum()
    return total / _denominator(num_episodes, fallback, total)


def turnopd_loss(per_token: Tensor, turn_index: Tensor, agent_mask: Tensor, alpha: float,
                 total_agent_tokens: Count = None, num_episodes: Count = None) -> Tensor:
    """TurnOPD's progressive loss: ``(1 - alpha) * L_traj + alpha * L_turn``.

    ``L_traj`` is vanilla OPD's reduction (the batch-global agent-token mean), so alpha = 0 is
    *exactly* vanilla OPD on the same batch and the blend ablation changes one thing only.
    ``L_turn`` gives every episode the same share and, within it, every turn the same share
    (`turn_weights` at alpha = 1).  Both denominators are the whole optimiser batch's counts.
    """
    traj = masked_token_mean(per_token, agent_mask, total_agent_tokens)
    if alpha == 0.0:
        return traj
    turn = weighted_episode_mean(per_token, turn_weights(turn_index, agent_mask, 1.0, per_token.dtype), num_episodes)
    return (1.0 - alpha) * traj + alpha * turn


def alpha_at(step: int, total_steps: int, start: float = 0.0, end: float = 1.0) -> float:
    """Linear TurnOPD blend schedule: 0 until ``start`` of training, 1 from ``end`` on.

    ``step`` is 0-based over ``total_steps`` optimiser steps; progress = step / (total_steps - 1)
    so the first step trains with alpha = 0 and the last with alpha = 1 (default window).
    """
    if total_steps < 1 or not 0.0 <= start < end <= 1.0:
        raise ValueError("need total_steps >= 1 and 0 <= start < end <= 1")
    progress = step / (total_steps - 1) if total_steps > 1 else 1.0
    return float(min(1.0, max(0.0, (progress - start) / (end - start))))
