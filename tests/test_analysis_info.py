"""Information measures: entropies and MI with exact answers, Miller-Madow bias behaviour, and the
forced-mass proxy on a hand-built batch."""
from __future__ import annotations

import math
import random

import pytest
import torch

from analysis import info as I


def test_entropy_exact_and_miller_madow_term():
    assert I.entropy(["a", "b", "c", "d"] * 5) == pytest.approx(2.0)
    assert I.entropy(["a", "b", "c", "d"] * 5, base=math.e) == pytest.approx(math.log(4))
    assert I.entropy(["a"] * 7) == 0.0
    # (m - 1) / (2N) nats added: m = 4 bins, N = 20
    assert I.entropy(list("abcd") * 5, miller_madow=True) == pytest.approx(2.0 + 3 / 40 / math.log(2))
    assert math.isnan(I.entropy([]))


def test_mi_of_balanced_independent_grid_is_zero_and_bijection_is_entropy():
    xs = [x for x in range(4) for _ in range(3)]
    ys = [y for _ in range(4) for y in range(3)]
    assert I.mutual_information(xs, ys) == pytest.approx(0.0, abs=1e-12)
    r = random.Random(1)
    x = [r.randrange(6) for _ in range(300)]
    y = [f"label-{(v * 5 + 2) % 6}" for v in x]  # a bijection of x
    assert I.mutual_information(x, y) == pytest.approx(I.entropy(x), abs=1e-12)
    assert I.mutual_information(x, y, miller_madow=True) == pytest.approx(I.entropy(x, miller_madow=True), abs=1e-12)
    assert I.mutual_information(x, x) > 2.0  # ~log2(6) = 2.58
    with pytest.raises(ValueError):
        I.mutual_information([1, 2], [1])


def test_miller_madow_reduces_the_upward_bias_of_independent_mi():
    plug, corrected = [], []
    for seed in range(8):
        r = random.Random(seed)
        x = [r.randrange(5) for _ in range(600)]
        y = [r.randrange(5) for _ in range(600)]
        plug.append(I.mutual_information(x, y))
        corrected.append(I.mutual_information(x, y, miller_madow=True))
    expected_bias = 16 / (2 * 600) / math.log(2)  # (m_x - 1)(m_y - 1) / 2N, in bits
    assert sum(plug) / 8 == pytest.approx(expected_bias, rel=0.5)
    assert abs(sum(corrected) / 8) < 0.3 * expected_bias


def test_task_information_separates_shared_patterns_from_task_knowledge():
    tasks = [t for t in range(8) for _ in range(4)]
    patterns = ["T1"] * len(tasks)                                   # one shared skeleton
    knowledge = [[f"make item{t}", "gather ore"] for t in tasks]     # an action list per task
    tab = I.task_information(tasks, patterns, knowledge, miller_madow=False)
    assert tab.loc["pattern", "mi"] == pytest.approx(0.0)
    assert tab.loc["knowledge", "mi"] == pytest.approx(3.0)
    assert tab.loc["knowledge", "mi_over_h_var"] == pytest.approx(1.0)
    assert math.isnan(tab.loc["pattern", "mi_over_h_var"])
    assert I.signature({"b": [1, 2], "a": 3}) == (("a", 3), ("b", (1, 2)))


def test_forced_mass_hand_case():
    # 2 episodes x 7 positions; -1 = env/prompt. Episode 0 turns: 0,0,0 | 1,1 ; episode 1: 0,0 | 1
    turn = torch.tensor([[-1, 0, 0, 0, -1, 1, 1],
                         [-1, 0, 0, -1, 1, -1, -1]])
    mask = (turn >= 0).long()
    sid = torch.tensor([[9, 1, 2, 3, 9, 4, 5], [9, 1, 2, 9, 3, 9, 9]])
    tid = torch.tensor([[0, 1, 2, 7, 0, 4, 5], [0, 1, 8, 0, 3, 0, 0]])
    sp = torch.tensor([[1.0, .95, .50, .99, 1., .91, .95], [1., .99, .99, 1., .95, 1., 1.]])
    tp = torch.tensor([[1.0, .95, .99, .99, 1., .99, .90], [1., .93, .99, 1., .97, 1., 1.]])
    # forced: e0 t0: pos1 yes, pos2 no (student .5), pos3 no (ids differ); e0 t1: pos5 yes, pos6 no (teacher .90 not > .9)
    #         e1 t0: pos1 yes, pos2 no (ids differ);                         e1 t1: pos4 yes
    out = I.forced_mass(sid, sp, tid, tp, turn, mask)
    assert out["depth"].tolist() == [1, 2]
    assert out["positions"].tolist() == [5, 3]
    assert out["forced"].tolist() == [2, 2]
    assert out["lambda"].tolist() == pytest.approx([2 / 5, 2 / 3])
    by = I.forced_mass(sid, sp, tid, tp, turn, mask, episode_group=["fail", "ok"]).set_index(["group", "depth"])
    assert by.loc[("fail", 2), "lambda"] == pytest.approx(0.5)
    assert by.loc[("ok", 2), "lambda"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        I.forced_mass(sid, sp, tid, tp, turn, mask, episode_group=["x"])
    logits = torch.log(torch.tensor([[[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]]]))
    ids, probs = I.top1_from_logits(logits)
    assert ids.tolist() == [[1, 0]] and probs[0].tolist() == pytest.approx([0.7, 0.5])
