"""TurnOPD depth controller on hand-computed statistics, its schedule, bounds and resume."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings, strategies as st

from posttrain.turnopd import (DepthController, coverage_quantile, effective_horizon, probe_statistics,
                               round_half_up, tcod_window)

KL = [0.5, 0.4, 0.3, 0.1, -0.05]
SURV = [10, 10, 8, 5, 2]


def test_hand_computed_sequence_of_updates():
    # m = [.5*1, .4*1, .3*.8, .1*.5, 0] = [.5, .4, .24, .05, 0], sum 1.19
    # centroid = (1*.5 + 2*.4 + 3*.24 + 4*.05) / 1.19 = 2.22 / 1.19 = 1.8655 -> H_eff = 2
    assert effective_horizon(KL, SURV, 10) == 2
    c = DepthController(h_min=2, h_max=8)
    assert c.cap == 8  # no truncation before the first probe
    # successes [3,4,4,5,6]: 80% of 5 = 4th smallest = 5 -> H = max(2, 5) = 5, H_bar = 5, cap 6
    assert c.update(KL, SURV, [6, 4, 3, 5, 4]) == 6
    assert (c.last_h_eff, c.last_h_cov, c.h_bar) == (2, 5, 5.0)
    # successes [2,2,3]: ceil(2.4) = 3rd -> 3; H = 3; H_bar = .3*3 + .7*5 = 4.4 -> 4 -> cap 5
    assert c.update(KL, SURV, [2, 3, 2]) == 5
    assert c.h_bar == pytest.approx(4.4)
    # all signal at turn 5 -> H_eff = 5, no successes; H_bar = .3*5 + .7*4.4 = 4.58 -> 5 -> cap 6
    assert c.update([0, 0, 0, 0, 1.0], [10] * 5, []) == 6
    assert (c.last_h_eff, c.last_h_cov) == (5, None)
    assert c.h_bar == pytest.approx(4.58)
    assert c.history == [6, 5, 6] and c.num_probes == 3


def test_survivor_weighting_moves_the_centroid():
    # equal KL at turns 1 and 3; centroid is 2 when everyone survives ...
    assert effective_horizon([1.0, 0.0, 1.0], [4, 4, 4], 4) == 2
    # ... but only a quarter reach turn 3: (1*1 + 3*.25) / 1.25 = 1.4 -> 1
    assert effective_horizon([1.0, 0.0, 1.0], [4, 4, 1], 4) == 1
    # n_0 given explicitly differs from survivors[0]: scales all m_t equally, centroid unchanged
    assert effective_horizon([1.0, 0.0, 1.0], [4, 4, 1], 8) == 1


def test_rounding_is_half_up_not_bankers():
    assert [round_half_up(x) for x in (0.5, 1.5, 2.5, 2.49)] == [1, 2, 3, 2]
    assert effective_horizon([1.0, 1.0], [2, 2], 2) == 2  # centroid 1.5
    c = DepthController(h_min=1, h_max=10, ema_alpha=0.5)
    c.update([1.0, 1.0], [2, 2], [])  # H = 2 -> H_bar 2
    assert c.update([0.0, 0.0, 1.0], [2, 2, 2], []) == 4  # H_bar = 2.5 -> 3 (+1) = 4


def test_coverage_quantile():
    assert coverage_quantile([], 0.8) is None
    assert coverage_quantile([7], 0.8) == 7
    assert coverage_quantile(list(range(1, 11)), 0.8) == 8
    assert coverage_quantile(list(range(1, 11)), 0.7) == 7
    assert coverage_quantile(list(range(1, 26)), 0.28) == 7  # 0.28*25 is 7.000000000000001 in floats
    assert coverage_quantile([1, 1, 1, 1, 9], 0.8) == 1
    assert coverage_quantile([1, 1, 1, 9, 9], 0.8) == 9


def test_clipping_bounds():
    c = DepthController(h_min=2, h_max=4)
    assert c.update(KL, SURV, [9, 9, 9]) == 4  # H = 9 -> 10, clipped to h_max
    low = DepthController(h_min=3, h_max=8)
    assert low.update([1.0], [5], [1]) == 3  # H = 1 -> 2, clipped up to h_min


def test_edge_cases_without_signal():
    c = DepthController(h_min=1, h_max=9)
    # all-zero (or negative / NaN) KL and no success: nothing learned, cap untouched
    assert c.update([0.0, -0.1, float("nan")], [4, 3, 0], []) == 9
    assert c.h_bar is None and c.num_probes == 1 and c.history == []
    # all-zero KL with successes: H = H_cov
    assert c.update([0.0, 0.0], [4, 3], [2, 2, 2, 2]) == 3
    # successes absent, NaN KL on an empty turn ignored: KL only at turn 2 -> H_eff 2
    c2 = DepthController(h_min=1, h_max=9)
    assert c2.update([0.0, 1.0, float("nan")], [4, 3, 0], []) == 3
    assert effective_horizon([1.0], [3], 0) is None
    with pytest.raises(ValueError):
        effective_horizon([1.0, 2.0], [3], 3)


def test_probe_schedule_and_depths():
    c = DepthController(h_min=2, h_max=12, probe_interval=8, warmup=3)
    assert [s for s in range(40) if c.should_probe(s)] == [0, 1, 2, 11, 19, 27, 35]
    c.update(KL, SURV, [3])
    assert c.rollout_depth(2) == 12 and c.rollout_depth(3) == c.cap == 4 and c.rollout_depth(11) == 12
    no_warm = DepthController(h_min=1, h_max=5, probe_interval=4, warmup=0)
    assert [s for s in range(13) if no_warm.should_probe(s)] == [4, 8, 12]
    with pytest.raises(ValueError):
        c.should_probe(-1)


@pytest.mark.parametrize("kwargs", [dict(h_min=0, h_max=3), dict(h_min=4, h_max=3),
                                    dict(h_min=1, h_max=3, ema_alpha=0.0), dict(h_min=1, h_max=3, quantile=1.5),
                                    dict(h_min=1, h_max=3, probe_interval=0)])
def test_invalid_config_rejected(kwargs):
    with pytest.raises(ValueError):
        DepthController(**kwargs)


def test_state_dict_json_round_trip_resumes_exactly():
    a = DepthController(h_min=2, h_max=10, ema_alpha=0.3)
    a.update(KL, SURV, [4, 5, 7])
    a.update([0.2, 0.9, 0.1], [8, 8, 6], [3])
    saved = json.loads(json.dumps(a.state_dict()))
    b = DepthController(h_min=1, h_max=2)  # different config: load must restore it too
    b.load_state_dict(saved)
    c = DepthController.from_state_dict(saved)
    assert b.state_dict() == a.state_dict() == c.state_dict()
    for kl, surv, succ in [([0.1, 0.1, 0.6, 0.6], [8, 8, 7, 7], [4, 4]), ([0.3], [8], []), (KL, SURV, [9])]:
        assert a.update(kl, surv, succ) == b.update(kl, surv, succ) == c.update(kl, surv, succ)
    assert a.state_dict() == b.state_dict() == c.state_dict()
    with pytest.raises(KeyError):
        b.load_state_dict({"bogus": 1})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.2, 3.0), st.integers(0, 20)), min_size=1, max_size=12),
       st.lists(st.integers(1, 15), max_size=8), st.integers(1, 6), st.integers(0, 8))
def test_cap_always_within_bounds_and_centroid_within_turns(turns, succ, h_min, extra):
    kl = [k for k, _ in turns]
    surv = [n for _, n in turns]
    c = DepthController(h_min=h_min, h_max=h_min + extra)
    h = effective_horizon(kl, surv, 20)
    if h is not None:
        assert 1 <= h <= len(turns)
    for _ in range(3):
        cap = c.update(kl, surv, succ, num_episodes=20)
        assert h_min <= cap <= h_min + extra


def test_probe_statistics_by_hand():
    # episode 0: turn 0 tokens KL [1, 3] (mean 2), turn 1 KL [4]; episode 1: turn 0 KL [0.5]
    # episode 2: no agent tokens. K_1 = (2 + .5) / 2, K_2 = 4 / 1; n = [2, 1], n_0 = 3
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    turn = torch.tensor([[-1, 0, 0, -1, 1, -1], [0, -1, -1, -1, -1, -1], [-1] * 6])
    kl = torch.tensor([[9.0, 1, 3, 9, 4, 9], [0.5, 9, 9, 9, 9, 9], [9.0] * 6])
    stats = probe_statistics(kl, turn, mask)
    assert stats.per_turn_kl == pytest.approx([1.25, 4.0])
    assert stats.survivors == [2, 1] and stats.num_episodes == 3
    empty = probe_statistics(kl, turn, torch.zeros_like(mask))
    assert empty.per_turn_kl == [] and empty.survivors == []


def test_tcod_window():
    assert [tcod_window(s, 10) for s in (0, 9, 10, 19, 20, 95)] == [1, 1, 2, 2, 3, 10]
    assert tcod_window(95, 10, max_window=6) == 6
    with pytest.raises(ValueError):
        tcod_window(3, 0)
