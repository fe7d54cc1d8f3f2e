"""Every plotting function writes a PNG that matplotlib reads back at figsize * dpi pixels and that
is not blank, and the figures show what a reader needs: error bars where the caller has standard
errors, a colour legend on the region map, one panel per run in small multiples, legends off the
data. Small figures at low dpi keep this fast."""
from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
import torch
from matplotlib.container import ErrorbarContainer

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


# ----------------------------------------------------------------------------- what the figures show
# Each test looks at the drawn artists (the figure is caught as it is saved), so dropping an
# ``errors`` argument, a colour bar or a panel fails here, not only in a reader's eyes.
@pytest.fixture
def drawn(monkeypatch):
    """The Figure objects saved by analysis.figures, in order."""
    figs, real = [], Fg._save

    def spy(fig, path, dpi):
        figs.append(fig)
        return real(fig, path, dpi)
    monkeypatch.setattr(Fg, "_save", spy)
    return figs


def error_bars(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def bar_extents(container) -> list[tuple[float, float]]:
    """(low, high) of each vertical error bar of an ErrorbarContainer (a NaN error draws none)."""
    segments = [np.asarray(s, float).reshape(-1, 2) for s in container.lines[2][0].get_segments()]
    return sorted((float(s[:, 1].min()), float(s[:, 1].max())) for s in segments
                  if len(s) and np.isfinite(s).all())


def assert_legend_outside(fig, ax):
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend()
    assert legend is not None
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


def test_grouped_bars_draw_each_standard_error_and_keep_the_legend_off_the_data(tmp_path, drawn):
    bars = pd.DataFrame({"ours": [5.0, 30.0], "other": [1.0, -2.0]}, index=["short", "long"])
    errors = pd.DataFrame({"ours": [2.0, 3.0], "other": [float("nan"), 0.5]}, index=bars.index)
    check_png(Fg.plot_grouped_bars(bars, tmp_path / "b.png", errors=errors, figsize=SIZE, dpi=DPI,
                                   reference=pd.DataFrame({"ours": [float("nan"), 45.8]}, index=bars.index)))
    ax = drawn[-1].axes[0]
    ours, other = error_bars(ax)
    assert bar_extents(ours) == [(3.0, 7.0), (27.0, 33.0)]
    assert bar_extents(other) == [(-2.5, -1.5)]                      # NaN: no bar drawn for "short"
    assert_legend_outside(drawn[-1], ax)
    Fg.plot_grouped_bars(bars, tmp_path / "plain.png", figsize=SIZE, dpi=DPI)
    assert not error_bars(drawn[-1].axes[0])


def test_lines_draw_error_bars_where_a_curve_has_them(tmp_path, drawn):
    curves = {"world model": ([100, 200, 300], [10.0, 20.0, 30.0]), "direct": ([100, 200, 300], [5.0, 5.0, 6.0])}
    Fg.plot_lines(curves, tmp_path / "l.png", "step", "avg@8", errors={"world model": [1.0, 2.0, float("nan")]},
                  figsize=SIZE, dpi=DPI)
    ax = drawn[-1].axes[0]
    (bars,) = error_bars(ax)
    assert bar_extents(bars) == [(9.0, 11.0), (18.0, 22.0)]
    assert_legend_outside(drawn[-1], ax)


def test_small_multiples_draw_one_titled_panel_per_run_on_shared_axes(tmp_path, drawn):
    runs = {f"run {i}": ([1, 2, 3], [i, i + 1.0, i + 2.0]) for i in range(5)}
    check_png(Fg.plot_small_multiples(runs, tmp_path / "sm.png", "step", "success", ncols=3, figsize=SIZE, dpi=DPI))
    fig = drawn[-1]
    assert len(fig.axes) == len(runs)                                 # the sixth grid slot is removed
    assert [ax.get_title() for ax in fig.axes] == list(runs)
    assert len({ax.get_ylim() for ax in fig.axes}) == 1               # shared y: panels compare by eye
    assert not fig.legends                                            # one line per panel: the title says it
    cells = {f"{q} / {d}": {"GRPO": ([1, 2], [0.1, 0.2]), "OPD": ([1, 2], [0.3, 0.1])}
             for q in ("4opt", "4opt8sub") for d in ("short", "mid", "long")}
    se = {"4opt / long": {"OPD": [0.05, 0.05]}}
    Fg.plot_small_multiples(cells, tmp_path / "cells.png", "step", "success", ncols=3, errors=se, dpi=DPI)
    fig = drawn[-1]
    assert len(fig.axes) == 6 and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["GRPO", "OPD"]
    assert [len(error_bars(ax)) for ax in fig.axes] == [0, 0, 1, 0, 0, 0]
    with pytest.raises(ValueError):
        Fg.plot_small_multiples({}, tmp_path / "none.png", "x", "y")


def test_region_map_has_a_colour_legend_and_delta_with_se_in_each_cell(tmp_path, drawn):
    table = pd.DataFrame({"quality": ["4opt", "4opt", "4opt8sub", "4opt8sub"], "horizon": ["short", "long"] * 2,
                          "baseline": [95, 60, 40, 5], "delta": [0.2, 4.0, 1.0, 18.59]})
    lab = M.region_labels(table)
    dl = table.pivot(index="quality", columns="horizon", values="delta").reindex(index=lab.index, columns=lab.columns)
    se = dl * 0 + 2.5
    se.iloc[0, 0] = float("nan")
    missing = lab.copy()
    missing.iloc[1, 0] = float("nan")                                # no run measured this cell
    Fg.plot_region_maps({"GRPO": lab, "OPD": missing}, tmp_path / "reg.png", deltas={"GRPO": dl, "OPD": dl},
                        ses={"GRPO": se, "OPD": se}, unit=" pt", reference={"OPD": dl.where(dl > 10)}, dpi=DPI)
    fig = drawn[-1]
    grpo, opd, cbar = fig.axes
    assert opd.images[0].colorbar is not None and opd.images[0].colorbar.ax is cbar   # one legend for both
    assert grpo.images[0].norm.vmin == opd.images[0].norm.vmin and grpo.images[0].cmap is opd.images[0].cmap
    assert [t.get_text() for t in cbar.get_yticklabels()] == list(M.REGIONS)
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in opd.texts}
    assert texts[0, 0] == "unnecessary\n+0.2 pt"                      # NaN SE: the change alone
    assert texts[0, 1] == "effective\n+4.0 ± 2.5 pt"
    assert texts[1, 1] == "effective\n+18.6 ± 2.5 pt\n(paper +18.6)"
    assert texts[1, 0] == "no run"


def test_pca_names_points_in_a_legend_and_zooms_on_a_tight_cluster(tmp_path, drawn):
    pts = np.array([[0.0, 0.0, 0.0], [0.01, 0.001, 0.0], [0.02, 0.0, 0.003], [50.0, 0.0, 0.0], [0.0, 40.0, 0.0]])
    labels = ["Instruct", "MOPD 1", "MOPD 2", "Teacher FA", "Teacher LF"]
    coords, _ = P.checkpoint_pca(pts)
    Fg.plot_checkpoint_dynamics(coords, P.pairwise_distances(pts), labels, tmp_path / "dyn.png", dpi=DPI)
    fig = drawn[-1]
    pca, zoom = fig.axes[:2]
    assert not pca.texts                                              # no text at the points to overprint
    assert [t.get_text() for t in pca.get_legend().get_texts()] == labels
    assert_legend_outside(fig, pca)
    assert zoom.get_title() == "zoom: Instruct, MOPD 1, MOPD 2" and len(zoom.collections) == 3
    spread = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    Fg.plot_checkpoint_dynamics(spread, P.pairwise_distances(spread), ["a", "b", "c"], tmp_path / "d2.png", dpi=DPI)
    assert len(drawn[-1].axes) == 3                                   # PCA, distances, their colour bar: no zoom
