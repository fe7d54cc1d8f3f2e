"""Table measures on hand-made inputs: KL groups, per-turn KL, loss-budget shares, pattern tables,
region labels, same-step / least-time / speedup tables and seed statistics."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import measures as M
from planning_gym.text import join_turns
from posttrain.turnopd import probe_statistics

# two episodes; -1 = prompt / env / padding. e0: turn0 x3 tokens, turn1 x1; e1: turn0 x1, turn1 x1, turn2 x2
TURN = torch.tensor([[-1, 0, 0, 0, -1, 1, -1, -1, -1],
                     [-1, 0, -1, 1, -1, 2, 2, -1, -1]])
MASK = (TURN >= 0).long()
KL = torch.tensor([[9., 1., 2., 3., 9., 4., 9., 9., 9.],
                   [9., 6., 9., 2., 9., 1., 3., 9., 9.]])


def test_token_kl_frame_and_group_summary():
    step_ok = torch.tensor([[True, False, True], [False, True, True]])
    f = M.token_kl_frame(KL, MASK, TURN, traj_success=[True, False], step_ok=step_ok)
    assert len(f) == 8 and 9.0 not in set(f["kl"])
    s = M.kl_group_summary(f)
    # (success, ok): e0 turn0 -> 1,2,3 ; (success, bad): e0 turn1 -> 4 ; (fail, bad): e1 turn0 -> 6 ;
    # (fail, ok): e1 turns 1,2 -> 2,1,3
    assert s.loc[(True, True), "count"] == 3 and s.loc[(True, True), "mean"] == pytest.approx(2.0)
    assert s.loc[(True, False), "mean"] == pytest.approx(4.0)
    assert s.loc[(False, False), "mean"] == pytest.approx(6.0)
    assert s.loc[(False, True), "q50"] == pytest.approx(2.0)
    assert {"q10", "q25", "q75", "q90", "std"} <= set(s.columns)
    only_traj = M.kl_group_summary(f.drop(columns="step_ok"))
    assert list(only_traj.index) == [False, True]
    overall = M.kl_group_summary(f[["kl"]])
    assert overall.loc["all", "count"] == 8 and overall.loc["all", "mean"] == pytest.approx(22 / 8)


def test_per_turn_kl_by_hand_and_against_the_trainer_probe():
    t = M.per_turn_kl(KL, TURN, MASK)
    assert list(t.index) == [1, 2, 3]
    # depth 1: episode means 2 (e0) and 6 (e1) -> 4; tokens 1,2,3,6 -> 3
    assert t["kl"].tolist() == pytest.approx([4.0, 3.0, 2.0])
    assert t["token_kl"].tolist() == pytest.approx([3.0, 3.0, 2.0])
    assert t["survivors"].tolist() == [2, 2, 1] and t["tokens"].tolist() == [4, 2, 2]
    probe = probe_statistics(KL, TURN, MASK)
    assert t["kl"].tolist() == pytest.approx(probe.per_turn_kl)
    assert t["survivors"].tolist() == probe.survivors


def test_loss_budget_shares_sum_to_one_and_match_hand_computation():
    ones = MASK.double()
    s = M.loss_budget_share(ones, TURN, MASK)
    assert s.sum() == pytest.approx(1.0)
    assert s.tolist() == pytest.approx([4 / 8, 2 / 8, 2 / 8])  # token-proportional: tokens per depth
    w = M.loss_budget_share(ones, TURN, MASK, per_token_loss=KL)
    assert w.tolist() == pytest.approx([12 / 22, 6 / 22, 4 / 22])
    c = M.compare_loss_budgets(TURN, MASK, alphas=(0.0, 1.0))
    assert np.allclose(c.sum(), 1.0)
    # alpha=0: each episode's weights sum to 1 spread per token: e0 (4 tokens) 3/4, 1/4; e1 (4 tokens) 1/4,1/4,2/4
    assert c["alpha=0"].tolist() == pytest.approx([(0.75 + 0.25) / 2, (0.25 + 0.25) / 2, 0.5 / 2])
    # alpha=1: each turn of an episode gets 1/T_e: e0 1/2,1/2 ; e1 1/3,1/3,1/3
    assert c["alpha=1"].tolist() == pytest.approx([(1 / 2 + 1 / 3) / 2, (1 / 2 + 1 / 3) / 2, (1 / 3) / 2])
    zero = M.loss_budget_share(torch.zeros_like(ones), TURN, MASK)
    assert zero.isna().all()


def _text(prefixes):
    obs = ["Goal: x"] + ["ok"] * len(prefixes)
    return join_turns(obs, [f"{p}\nAction: gather ore" for p in prefixes])


def test_pattern_distribution_from_texts_and_labels():
    texts = [_text(["Goal check: x needs ore now"] * 2),
             _text(["Step 1/2: gather ore", "Step 2/2: make x"]),
             _text(["Quick: make x", "Goal check: x needs ore now", "Reason: ore is a base item, so gather it"]),
             _text(["just acting", "still acting"])]
    d = M.pattern_distribution(texts)
    assert list(d.index) == M.PATTERN_COLUMNS
    assert d["T1"] == pytest.approx(0.25) and d["T2"] == pytest.approx(0.25) and d["Others"] == pytest.approx(0.5)
    assert d.sum() == pytest.approx(1.0)
    counts = M.pattern_distribution(["T1", "T1", "D3"], normalize=False)
    assert counts["T1"] == 2 and counts["D3"] == 1 and counts.sum() == 3
    tab = M.pattern_table({"Instruct": ["T1", "D1"], "Teacher FA": ["T1"], "After FA": texts[:1]})
    assert list(tab.index) == ["Instruct", "Teacher FA", "After FA"]
    assert tab.loc["Instruct", "D1"] == 0.5 and tab.loc["After FA", "T1"] == 1.0
    assert np.allclose(tab.sum(axis=1), 1.0)
    assert "T1 Goal" in M.pattern_table({"m": ["T1"]}, long_names=True).columns


def test_region_labels_on_a_hand_table():
    rows = []
    base = {"4opt": [96, 80, 60], "4opt4sub": [85, 55, 30], "4opt8sub": [70, 20, 2]}
    delta = {"4opt": [0.5, 6.0, 1.0], "4opt4sub": [3.0, 2.0, -1.0], "4opt8sub": [5.0, 18.59, 1.99]}
    for q in base:
        for j, h in enumerate(["short", "mid", "long"]):
            rows.append({"quality": q, "horizon": h, "baseline": base[q][j], "delta": delta[q][j]})
    lab = M.region_labels(pd.DataFrame(rows))
    assert list(lab.index) == ["4opt", "4opt4sub", "4opt8sub"] and list(lab.columns) == ["short", "mid", "long"]
    assert lab.loc["4opt"].tolist() == ["unnecessary", "effective", "unsupported"]
    assert lab.loc["4opt4sub"].tolist() == ["effective", "effective", "unsupported"]
    assert lab.loc["4opt8sub"].tolist() == ["effective", "effective", "unsupported"]
    no_base = M.region_labels(pd.DataFrame(rows).drop(columns="baseline"))
    assert no_base.loc["4opt", "short"] == "unsupported"
    counts = M.region_counts({"OPD": lab, "plain": no_base})
    assert counts.loc["OPD"].tolist() == [1, 5, 3] and counts.loc["plain", "unnecessary"] == 0
    with pytest.raises(ValueError):
        M.region_labels(pd.DataFrame(rows + rows[:1]))
    # with standard errors, a gain within two of them is not effective; a NaN SE (one task) falls back to the margin
    se = pd.DataFrame(rows).assign(se=[0.1, 2.9, 0.1, 1.0, 1.1, 0.1, float("nan"), 9.0, 0.1])
    with_se = M.region_labels(se)
    assert with_se.loc["4opt", "mid"] == "effective"            # 6.0 > 2 x 2.9
    assert with_se.loc["4opt4sub"].tolist() == ["effective", "unsupported", "unsupported"]   # 2.0 < 2 x 1.1
    assert with_se.loc["4opt8sub"].tolist() == ["effective", "effective", "unsupported"]     # 18.59 > 18; NaN SE


LOGS = {  # wall in seconds; acc NaN = no evaluation at that step
    "OPD": pd.DataFrame({"step": [0, 10, 20, 30, 40], "wall": [0, 100, 200, 300, 400],
                         "acc": [0.1, 0.3, np.nan, 0.5, 0.6]}),
    "TurnOPD": pd.DataFrame({"step": [0, 10, 20, 30, 40, 50, 60], "wall": [0, 40, 80, 120, 160, 200, 240],
                             "acc": [0.1, 0.35, 0.45, 0.5, 0.62, np.nan, 0.7]}),
}


def test_same_step_least_time_and_speedup_tables():
    same = M.same_step_table(LOGS)
    assert list(same.index) == ["OPD", "TurnOPD"]
    assert (same["step"] == 40).all()  # largest evaluated step both reached
    assert same.loc["OPD", "acc"] == 0.6 and same.loc["TurnOPD", "acc"] == 0.62
    s20 = M.same_step_table(LOGS, step=20)
    assert s20.loc["OPD", "eval_step"] == 10 and s20.loc["OPD", "acc"] == 0.3  # step 20 not evaluated
    least = M.least_time_table(LOGS)
    assert (least["wall_budget"] == 240).all()  # TurnOPD finished first
    assert least.loc["OPD", "steps_completed"] == 20 and least.loc["OPD", "acc"] == 0.3
    assert least.loc["OPD", "eval_step"] == 10
    assert least.loc["TurnOPD", "steps_completed"] == 60 and least.loc["TurnOPD", "acc"] == 0.7
    sp = M.speedup_table(LOGS, reference="OPD")
    assert sp.loc["OPD", "target"] == 0.6
    assert sp.loc["TurnOPD", "time_to_target"] == 160 and sp.loc["TurnOPD", "speedup"] == pytest.approx(400 / 160)
    assert math.isnan(M.speedup_table(LOGS, reference="OPD", target=0.9).loc["OPD", "speedup"])
    long = pd.concat([v.assign(method=k) for k, v in LOGS.items()])
    assert M.least_time_table(long).equals(least)
    with pytest.raises(ValueError):
        M.same_step_table(pd.DataFrame({"method": ["a"], "step": [1]}))


def test_seed_statistics_and_formatting():
    s = M.seed_stat([1.0, 2.0, 3.0])
    assert (s.mean, s.std, s.n) == (2.0, 1.0, 3)
    assert s.ci95 == pytest.approx(4.303 / math.sqrt(3))
    assert str(s) == "2.00 ± 1.00 (n=3)"
    assert s.format(1, ci=True) == "2.0 ± CI95 2.5 (n=3)"
    one = M.seed_stat([5.0, float("nan")])
    assert one.n == 1 and math.isnan(one.std) and one.format() == "5.00 (n=1)"
    assert M.seed_stat([]).n == 0
    many = M.seed_stat(list(range(40)))
    assert many.ci95 == pytest.approx(1.96 * np.std(range(40), ddof=1) / math.sqrt(40))
    f = pd.DataFrame({"method": ["a", "a", "a", "b", "b"], "cell": ["x"] * 5, "acc": [1, 2, 3, 10, 14], "seed": [0, 1, 2, 0, 1]})
    t = M.summarise_seeds(f, by=["method", "cell"], value="acc")
    assert t.loc[("a", "x"), "text"] == "2.00 ± 1.00 (n=3)"
    assert t.loc[("b", "x"), "std"] == pytest.approx(math.sqrt(8))


def test_task_score_is_the_summary_cell_with_its_standard_error_over_tasks():
    from engine.evaluate import score
    successes = {"t0": 8, "t1": 2, "t2": 0}                  # of 8 samples; per-task avg 100, 25, 0
    samples = [{"domain": "fa", "split": "ID", "difficulty": "long", "task": t, "success": s < n}
               for t, n in successes.items() for s in range(8)]
    samples.append({"domain": "fa", "split": "OOD", "difficulty": "long", "task": "o", "success": True})
    row = next(r for r in score([x for x in samples if x["split"] == "ID"], 8) if r["difficulty"] == "long")
    avg, se, n = M.task_score(samples, "ID", "long")
    assert (avg, n) == (pytest.approx(row["avg@8"]), 3)
    assert se == pytest.approx(np.std([100, 25, 0], ddof=1) / np.sqrt(3))
    pas, pse, _ = M.task_score(samples, "ID", "all", "pass")
    assert pas == pytest.approx(row["pass@8"]) and pse == pytest.approx(np.std([100, 100, 0], ddof=1) / np.sqrt(3))
    assert M.task_score(samples, "OOD")[1] != M.task_score(samples, "OOD")[1]          # one task: NaN
    assert M.task_score(samples, "ID", "short")[2] == 0
    with pytest.raises(ValueError):
        M.task_score(samples, "ID", metric="median")
