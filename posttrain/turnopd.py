"""TurnOPD adaptive rollout-depth controller and the TCOD-F2B depth baseline.

Why a controller: full-horizon rollouts spend wall-clock on late turns whose teacher
correction has faded (few episodes survive that long, and their KL is small). TurnOPD
measures, every few steps, where the distillation signal actually lives and caps the rollout
depth of the ordinary training steps just beyond that point.

Schedule (0-based optimiser steps). Steps ``0 .. warmup-1`` are probes (full depth); after
that, one probe every ``probe_interval`` steps: steps ``warmup + j * probe_interval`` for
j >= 1. With warmup 3 and interval 8 the probes are 0, 1, 2, 11, 19, 27, ... A probe rollout
runs at ``h_max`` turns and its statistics go to ``update``; all other steps roll out to
``cap`` turns.

Update from one probe (turns t = 1..T, ``K_t`` mean KL at turn t over surviving episodes,
``n_t`` episodes still running at turn t, ``n_0`` episodes in the probe):

* ``m_t = max(K_t, 0) * n_t / n_0`` -- signal at turn t weighted by how many episodes reach
  it; negative K_t (possible with estimators such as truncated top-k KL) counts as no signal.
* ``q_t = m_t / sum(m)``; ``H_eff = round(sum_t t * q_t)`` -- the centroid of the signal.
* ``H_cov`` = 0.8-quantile of the number of turns successful probe episodes needed, so the
  cap does not cut off the depth at which the task is typically solved. The quantile is the
  empirical-CDF inverse (smallest depth d with at least 80% of successes at depth <= d),
  which is always an observed integer depth.
* ``H = max(H_eff, H_cov)``; ``H_bar = a * H + (1 - a) * H_bar`` (a = 0.3, first value
  initialises); ``cap = clip(round(H_bar) + 1, h_min, h_max)``.

Rounding is half-up (``floor(x + 0.5)``), not Python's banker's rounding, so 2.5 -> 3.

Edge cases: non-finite K_t (an empty turn averaged to NaN) counts as 0. If all m_t are 0 (no
positive KL anywhere) H_eff gives no depth demand and H = H_cov. If no probe episode
succeeded, H_cov is absent and H = H_eff. If both are absent the probe carries no
information: the EMA and the cap are left unchanged (before the first informative probe the
cap stays at h_max, i.e. no truncation).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import List, Optional, Sequence

import torch
from torch import Tensor

__all__ = ["round_half_up", "coverage_quantile", "effective_horizon", "DepthController",
           "ProbeStats", "probe_statistics", "tcod_window"]


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def coverage_quantile(depths: Sequence[int], q: float) -> Optional[int]:
    """Smallest observed depth d with at least a fraction q of ``depths`` <= d (None if empty)."""
    if not depths:
        return None
    ordered = sorted(int(d) for d in depths)
    rank = max(1, math.ceil(q * len(ordered) - 1e-12))  # 1-based order statistic
    return ordered[rank - 1]


def effective_horizon(per_turn_kl: Sequence[float], survivors: Sequence[float],
                      num_episodes: float) -> Optional[int]:
    """Survivor-weighted KL centroid ``round(sum_t t q_t)``, turns numbered from 1; None if no signal."""
    if len(per_turn_kl) != len(survivors):
        raise ValueError("per_turn_kl and survivors must have one entry per turn")
    if num_episodes <= 0:
        return None
    mass = []
    for k, n in zip(per_turn_kl, survivors):
        k = float(k) if math.isfinite(float(k)) else 0.0
        mass.append(max(k, 0.0) * float(n) / float(num_episodes))
    total = sum(mass)
    if total <= 0.0:
        return None
    return round_half_up(sum((t + 1) * m / total for t, m in enumerate(mass)))


@dataclass
class DepthController:
    """TurnOPD rollout-depth controller (see module docstring for the rule).

    Config fields come first; ``h_bar``/``cap``/``num_probes``/``last_*`` are state. The whole
    object round-trips through JSON via ``state_dict``/``load_state_dict`` so a resumed run
    makes exactly the same depth decisions.
    """

    h_min: int
    h_max: int
    probe_interval: int = 8
    warmup: int = 3
    ema_alpha: float = 0.3
    quantile: float = 0.8
    h_bar: Optional[float] = None
    cap_value: Optional[int] = None
    num_probes: int = 0
    last_h_eff: Optional[int] = None
    last_h_cov: Optional[int] = None
    history: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.h_min <= self.h_max:
            raise ValueError("need 1 <= h_min <= h_max")
        if self.probe_interval < 1 or self.warmup < 0:
            raise ValueError("need probe_interval >= 1 and warmup >= 0")
        if not 0.0 < self.ema_alpha <= 1.0 or not 0.0 < self.quantile <= 1.0:
            raise ValueError("ema_alpha and quantile must lie in (0, 1]")
        if self.cap_value is None:
            self.cap_value = self.h_max

    @property
    def cap(self) -> int:
        """Turn limit for ordinary (non-probe) training rollouts."""
        return int(self.cap_value)

    def should_probe(self, step: int) -> bool:
        if step < 0:
            raise ValueError("step must be >= 0")
        if step < self.warmup:
            return True
        since = step - self.warmup
        return since > 0 and since % self.probe_interval == 0

    def rollout_depth(self, step: int) -> int:
        """Turn limit for this step's rollouts: ``h_max`` on probe steps, else ``cap``."""
        return self.h_max if self.should_probe(step) else self.cap

    def update(self, per_turn_kl: Sequence[float], survivors: Sequence[float],
               success_depths: Sequence[int], num_episodes: Optional[float] = None) -> int:
        """Fold one probe's statistics into the EMA and return the new cap.

        ``per_turn_kl[t-1]`` and ``survivors[t-1]`` describe turn t. ``num_episodes`` is n_0;
        by default ``survivors[0]`` (every episode takes a first turn). ``success_depths``
        holds the number of turns of each successful probe episode.
        """
        n0 = float(num_episodes) if num_episodes is not None else (float(survivors[0]) if survivors else 0.0)
        h_eff = effective_horizon(per_turn_kl, survivors, n0)
        h_cov = coverage_quantile(list(success_depths), self.quantile)
        self.num_probes += 1
        self.last_h_eff, self.last_h_cov = h_eff, h_cov
        if h_eff is None and h_cov is None:
            return self.cap
        h = max(v for v in (h_eff, h_cov) if v is not None)
        self.h_bar = float(h) if self.h_bar is None else self.ema_alpha * h + (1.0 - self.ema_alpha) * self.h_bar
        self.cap_value = min(self.h_max, max(self.h_min, round_half_up(self.h_bar) + 1))
        self.history.append(self.cap)
        return self.cap

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            if not hasattr(self, key):
                raise KeyError(f"unknown DepthController field {key!r}")
            setattr(self, key, list(value) if key == "history" else value)
        self.__post_init__()

    @classmethod
    def from_state_dict(cls, state: dict) -> "DepthController":
        return cls(**{k: (list(v) if k == "history" else v) for k, v in state.items()})


@dataclass
class ProbeStats:
    per_turn_kl: List[float]
    survivors: List[int]
    num_episodes: int


@torch.no_grad()
def probe_statistics(per_token_kl: Tensor, turn_index: Tensor, agent_mask: Tensor) -> ProbeStats:
    """Per-turn KL K_t and survivors n_t from a probe batch, ready for ``DepthController.update``.

    n_t counts episodes with at least one agent token in turn t. K_t is the mean, over those
    episodes, of each episode's token-mean KL in turn t -- an average per surviving episode,
    so that ``K_t * n_t / n_0`` is the expected signal per probe episode. n_0 is the batch size.
    """
    mask = agent_mask != 0
    b = mask.shape[0]
    if not mask.any():
        return ProbeStats([], [], b)
    idx = torch.where(mask, turn_index, torch.zeros_like(turn_index)).long()
    if int(turn_index[mask].min()) < 0:
        raise ValueError("agent tokens must have turn_index >= 0")
    n_turns = int(idx[mask].max()) + 1
    kl = torch.where(mask, per_token_kl.detach().double(), torch.zeros_like(per_token_kl, dtype=torch.float64))
    tok = torch.zeros(b, n_turns, dtype=torch.float64).scatter_add_(1, idx, mask.double())
    tot = torch.zeros(b, n_turns, dtype=torch.float64).scatter_add_(1, idx, kl)
    alive = tok > 0
    ep_mean = torch.where(alive, tot / tok.clamp(min=1), torch.zeros_like(tot))
    survivors = alive.sum(0)
    k_t = ep_mean.sum(0) / survivors.clamp(min=1)
    return ProbeStats([float(v) for v in k_t], [int(v) for v in survivors], b)


def tcod_window(step: int, checkpoint_steps: int, max_window: Optional[int] = None) -> int:
    """TCOD-F2B baseline: roll out ``1 + step // checkpoint_steps`` turns, optionally capped.

    A fixed front-to-back temporal curriculum: the student is distilled on the first turn
    only, then one more turn every ``checkpoint_steps`` optimiser steps -- depth grows on a
    clock, regardless of where the KL signal is.
    """
    if step < 0 or checkpoint_steps < 1:
        raise ValueError("need step >= 0 and checkpoint_steps >= 1")
    window = 1 + step // checkpoint_steps
    return window if max_window is None else min(window, max_window)
