"""Every plotting function writes a PNG that matplotlib reads back at figsize * dpi pixels and that
is not blank. Small figures at low dpi keep this fast."""
from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import torch

from analysis import figures as Fg
from analysis import measures as M
from analysis import params as P

SIZE, DPI = (5.0, 3.0), 40


def check_png(path, size=SIZE, dpi=DPI):
    assert path.is_file() and path.stat().st_size > 0
    img = mpimg.imread(str(path))
    assert img.shape[:2] == (round(size[1] * dpi), round(size[0] * dpi))
    assert float(img[..., :3].std()) > 0.01  # something was drawn


def test_direction_figures(tmp_path):
    curve = pd.DataFrame({"step": [10, 20, 30], "mean": [0.2, 0.5, 0.9], "std": [0.1, 0.1, np.nan]})
    check_png(Fg.plot_subspace_curves({"OPD long": curve, "GRPO long": curve.assign(mean=[0.1, 0.2, 0.4])},
                                      tmp_path / "a" / "svd.png", figsize=SIZE, dpi=DPI))
    check_png(Fg.plot_cosine_series({"GRPO": [0.1, -0.2, 0.05], "OPD": [0.6, 0.7, 0.65]}, tmp_path / "cos.png",
                                    figsize=SIZE, dpi=DPI))


def test_kl_and_token_probability_figures(tmp_path):
    rng = np.random.default_rng(0)
    f = pd.DataFrame({"kl": rng.exponential(size=80), "traj_success": rng.random(80) > 0.5,
                      "step_ok": rng.random(80) > 0.3, "teacher": ["matched", "crossed"] * 40})
    f.loc[0, "kl"] = 0.0
    check_png(Fg.plot_kl_distributions(f, tmp_path / "kl.png", panel="teacher", figsize=SIZE, dpi=DPI))
    single = f.iloc[:3].assign(step_ok=[True, False, True], traj_success=[True, True, False])  # one-value groups
    check_png(Fg.plot_kl_distributions(single, tmp_path / "kl1.png", log=False, figsize=SIZE, dpi=DPI))
    tokens = ["Goal", " check", ":", " $x_1", "\n", "Action", ":", " gather", " ore"] * 3
    rows = {"student A": rng.random(len(tokens)), "teacher A": rng.random(len(tokens)),
            "teacher B": rng.random(len(tokens))}
    check_png(Fg.plot_token_probabilities(tokens, rows, tmp_path / "tok.png", per_line=10, figsize=SIZE, dpi=DPI))
    auto = Fg.plot_token_probabilities(tokens[:5], {k: v[:5] for k, v in rows.items()}, tmp_path / "tok2.png", dpi=DPI)
    assert mpimg.imread(str(auto)).shape[1] > 0
    with pytest.raises(ValueError):
        Fg.plot_token_probabilities(tokens, {"s": [0.5]}, tmp_path / "bad.png")


def test_pattern_dynamics_and_region_figures(tmp_path):
    tab = M.pattern_table({"Instruct": ["T1", "D1", "Others"], "Teacher FA": ["T1"], "After FA": ["T1", "T2"]})
    check_png(Fg.plot_pattern_heatmap(tab, tmp_path / "pat.png", figsize=SIZE, dpi=DPI))
    check_png(Fg.plot_pattern_heatmap({"Fantasy Alchemy": tab, "Livestock Farming": tab}, tmp_path / "pat2.png",
                                      figsize=SIZE, dpi=DPI))
    pts = np.array([[0.0, 0.0, 0.0], [1.0, 0.1, 0.0], [2.0, 0.0, 0.3], [50.0, 0.0, 0.0]])
    coords, _ = P.checkpoint_pca(pts)
    check_png(Fg.plot_checkpoint_dynamics(coords, P.pairwise_distances(pts), ["Instruct", "MOPD 1", "MOPD 2", "Teacher"],
                                          tmp_path / "dyn.png", figsize=SIZE, dpi=DPI))
    with pytest.raises(ValueError):
        Fg.plot_checkpoint_dynamics(coords, np.zeros((2, 2)), ["a", "b", "c", "d"], tmp_path / "x.png")
    table = pd.DataFrame({"quality": ["4opt", "4opt", "4opt8sub", "4opt8sub"], "horizon": ["short", "long"] * 2,
                          "baseline": [95, 60, 40, 5], "delta": [0.2, 4.0, 1.0, 18.59]})
    lab = M.region_labels(table)
    dl = table.pivot(index="quality", columns="horizon", values="delta").reindex(index=lab.index, columns=lab.columns)
    check_png(Fg.plot_region_maps({"GRPO": lab, "OPD": lab}, tmp_path / "reg.png", deltas={"GRPO": dl, "OPD": dl},
                                  figsize=SIZE, dpi=DPI, reference={"OPD": dl.where(dl > 10)}))   # NaN: none known
    bars = pd.DataFrame({"ours": [5.0, 30.0], "other": [1.0, 2.0]}, index=["short", "long"])
    check_png(Fg.plot_grouped_bars(bars, tmp_path / "bars.png", figsize=SIZE, dpi=DPI,
                                   reference=pd.DataFrame({"ours": [float("nan"), 45.8]}, index=bars.index)))


def test_turnopd_figures(tmp_path):
    turn = torch.tensor([[0, 0, 1, 2, -1], [0, 1, 1, -1, -1]])
    mask = (turn >= 0).long()
    kl = torch.tensor([[1.0, 0.8, 0.5, 0.2, 0.0], [0.9, 0.4, 0.3, 0.0, 0.0]])
    check_png(Fg.plot_per_turn_kl({"probe 1": M.per_turn_kl(kl, turn, mask), "raw": [0.9, 0.5, 0.1]},
                                  tmp_path / "ptk.png", figsize=SIZE, dpi=DPI))
    check_png(Fg.plot_loss_budget(M.compare_loss_budgets(turn, mask, (0.0, 0.5, 1.0)), tmp_path / "lb.png",
                                  figsize=SIZE, dpi=DPI))
    logs = {"OPD": {"step": [0, 10, 20], "wall": [0, 50, 100], "acc": [0.1, 0.4, 0.5]},
            "TurnOPD": {"step": [0, 10, 20, 30], "wall": [0, 20, 40, 60], "acc": [0.1, 0.45, float("nan"), 0.6]}}
    check_png(Fg.plot_frontier(logs, tmp_path / "front.png", figsize=SIZE, dpi=DPI))
