"""The post-training objectives as a registry: one small class per method, one shared loop.

`posttrain.train` rolls out, then hands each objective the batch; an objective says which extra
models it needs, what it scores once per rollout batch (GRPO's advantages), and the loss of one
micro-batch.  Everything an objective needs arrives in a `MicroBatch`, with the *update*
batch's counts as denominators, so micro-batch accumulation is exact (see `posttrain.losses`).

    OBJECTIVES["grpo"]     clipped policy gradient on group-relative advantages (+ process reward,
                           + KL to the start model, + entropy bonus), loss aggregation as in
                           GRPO (seq-mean-token-mean), DAPO (token-mean) or Dr. GRPO
                           (seq-mean-token-sum-norm)
    OBJECTIVES["opd"]      top-k (or full) reverse KL to the teacher, batch token mean
    OBJECTIVES["turnopd"]  opd with the progressive turn-normalised blend (alpha = 0: exactly opd)
    OBJECTIVES["tcod"]     opd (its front-to-back turn window is a rollout cap, in the loop)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from posttrain import losses

from posttrain.config import LOSS_AGGREGATIONS  # noqa: E402,F401  (declared with the config fields)


@dataclass
class MicroBatch:
    logits: Tensor                  # [b, t, V] student logits, position t predicts targets[:, t]
    targets: Tensor                 # [b, t] next tokens
    mask: Tensor                    # [b, t] 1 where the target is a policy token
    turn: Tensor                    # [b, t] agent turn of the target (-1 elsewhere)
    old_logp: Tensor                # [b, t] behaviour log-probs (the rollout's)
    advantages: Optional[Tensor]    # [b, t] GRPO advantages per token
    teacher_logits: Optional[Tensor]
    ref_logp: Optional[Tensor]      # [b, t] the reference (start) model's log-probs of the targets
    tokens: int                     # agent tokens in the whole update batch
    episodes: int                   # episodes in the whole update batch
    alpha: float                    # TurnOPD's blend at this step


def aggregate(per_token: Tensor, mask: Tensor, mode: str, tokens: int, episodes: int, norm_len: int) -> Tensor:
    """Reduce a per-token loss ``[b, t]`` to the update batch's scalar (global denominators).

    ``token-mean`` (DAPO): sum over all agent tokens / their number.  ``seq-mean-token-mean``
    (GRPO): each episode's token mean, averaged over episodes.  ``seq-mean-token-sum-norm``
    (Dr. GRPO): each episode's token sum / a constant length ``norm_len``, averaged over episodes.
    """
    m = mask.bool()
    if mode == "token-mean":
        return losses.masked_token_mean(per_token, m, tokens)
    per_seq = torch.where(m, per_token, torch.zeros_like(per_token)).sum(1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / m.sum(1).clamp(min=1)
    elif mode == "seq-mean-token-sum-norm":
        per_seq = per_seq / norm_len
    else:
        raise ValueError(f"loss aggregation must be one of {', '.join(LOSS_AGGREGATIONS)}, not {mode!r}")
    return per_seq.sum() / max(episodes, 1)


def target_logp(logits: Tensor, targets: Tensor) -> Tensor:
    return torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)


class Objective:
    """The interface the loop uses.  ``needs_teacher`` / ``needs_reference``: extra models."""
    needs_teacher = False

    def __init__(self, cfg):
        self.cfg = cfg

    @property
    def needs_reference(self) -> bool:
        return False

    def advantages(self, batch: dict, records: dict, groups: Tensor, step_rewards) -> Optional[Tensor]:
        return None

    def contributes(self, advantages: Optional[Tensor], mask: Tensor) -> bool:
        """Whether a micro-batch (its ``[b, t]`` advantages and agent mask) can move the weights;
        the loop does not train on one that cannot (a forward pass only measures its entropy)."""
        return True

    def loss(self, mb: MicroBatch) -> tuple[Tensor, Optional[Tensor], Optional[float]]:
        """(scalar loss of the micro-batch, per-token divergence [b, t] to log or None, share of
        tokens the PPO clip acted on or None)."""
        raise NotImplementedError

    def entropy_bonus(self, mb: MicroBatch) -> Tensor:
        if not self.cfg.entropy_coef:
            return torch.zeros(())
        ent = losses.token_entropy(mb.logits, mb.mask)
        return -self.cfg.entropy_coef * losses.masked_token_mean(ent, mb.mask, mb.tokens)


class GRPO(Objective):
    @property
    def needs_reference(self) -> bool:
        return self.cfg.kl_coef > 0

    def advantages(self, batch, records, groups, step_rewards):
        cfg, mask, turn = self.cfg, records["mask"], records["turn"]
        outcome = losses.grpo_advantages(batch["reward"], groups, cfg.scale_by_std)
        process = None
        if step_rewards is not None:
            process = losses.process_advantages(step_rewards, turn, mask, groups, cfg.scale_by_std)
        return losses.combine_advantages(outcome, mask, turn, process, cfg.process_weight)

    def contributes(self, advantages, mask):
        """Episodes whose group all scored alike have advantage 0, and with no KL term and no
        entropy bonus their loss is exactly 0 with a gradient of exactly 0: on CPU, where most
        long-horizon groups fail together, their passes are most of the update. (The optimiser
        still steps; Adam's momentum moves the weights as it would have.)"""
        cfg = self.cfg
        return bool(cfg.kl_coef or cfg.entropy_coef or advantages[mask.bool()].any())

    def loss(self, mb):
        cfg = self.cfg
        norm_len = cfg.max_turn_tokens * cfg.step_limit
        logp = target_logp(mb.logits, mb.targets)
        per_tok = losses.ppo_clip_per_token(logp, mb.old_logp, mb.advantages, mb.mask, cfg.clip_eps)
        loss = aggregate(per_tok, mb.mask, cfg.loss_agg, mb.tokens, mb.episodes, norm_len)
        kl_tok = None
        if mb.ref_logp is not None:
            kl_tok = losses.kl_to_reference_per_token(logp, mb.ref_logp, mb.mask, cfg.kl_estimator)
            loss = loss + cfg.kl_coef * aggregate(kl_tok, mb.mask, cfg.loss_agg, mb.tokens, mb.episodes, norm_len)
        clipped = losses.clip_fraction(logp.detach(), mb.old_logp, mb.mask, cfg.clip_eps)
        return loss + self.entropy_bonus(mb), (None if kl_tok is None else kl_tok.detach()), clipped


class OPD(Objective):
    needs_teacher = True

    def divergence(self, mb: MicroBatch) -> Tensor:
        cfg = self.cfg
        if cfg.topk:
            return losses.reverse_kl_topk(mb.logits, mb.mask, cfg.topk, teacher_logits=mb.teacher_logits,
                                          support=cfg.topk_support, estimator=cfg.topk_estimator)
        return losses.reverse_kl_full(mb.logits, mb.teacher_logits, mb.mask)

    def loss(self, mb):
        kl_tok = self.divergence(mb)
        return losses.masked_token_mean(kl_tok, mb.mask, mb.tokens) + self.entropy_bonus(mb), kl_tok.detach(), None


class TurnOPD(OPD):
    def loss(self, mb):
        if not self.cfg.turn_blend:
            return super().loss(mb)
        kl_tok = self.divergence(mb)
        loss = losses.turnopd_loss(kl_tok, mb.turn, mb.mask, mb.alpha, mb.tokens, mb.episodes)
        return loss + self.entropy_bonus(mb), kl_tok.detach(), None


OBJECTIVES: dict[str, type[Objective]] = {"grpo": GRPO, "opd": OPD, "turnopd": TurnOPD, "tcod": OPD}


def update_batches(n_episodes: int, mini_batches: int, rng) -> list[list[int]]:
    """The episodes of each optimiser step of one epoch: shuffled, split into ``mini_batches``
    nearly equal parts (one part = the whole batch, today's one step per rollout batch)."""
    order = list(range(n_episodes))
    if mini_batches > 1:
        rng.shuffle(order)
    size = -(-n_episodes // max(1, mini_batches))
    return [order[i:i + size] for i in range(0, n_episodes, size)]
