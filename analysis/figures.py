"""PNG figures for the analyses of both papers.

Why a separate module: measures (`analysis.measures`, `analysis.params`, `analysis.info`) stay
pure and testable without a display, and every figure follows the same conventions:

* Figures are built on `matplotlib.figure.Figure` with the Agg canvas -- no pyplot, no global
  backend switch, no window -- and written with ``savefig(path, dpi=dpi)`` *without* a tight
  bounding box, so a figure's pixel size is exactly ``figsize * dpi`` (tests rely on it).
* Every function takes ``path`` (parent folders are created) plus ``figsize`` (inches; ``None``
  = a size derived from the data) and ``dpi``, and returns the written ``Path``.
* Token text is drawn with math parsing off, so ``$`` or ``_`` in tokens print literally.
* Uncertainty is drawn wherever the caller has it: bars and curves take ``errors`` (standard
  errors in the plotted units, same keys / shape as the data, NaN = none known) and draw error
  bars; a reader must be able to tell a real gap from noise without opening ``table.md``.  The
  callers pass the very numbers they write to ``table.md``, so a figure never shows a number the
  table does not.
* Legends sit outside the axes (right of them, or above a grid of panels), so they never cover
  data; grids of panels (`plot_small_multiples`) carry their names as panel titles.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LinearSegmentedColormap, ListedColormap
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from planning_gym.patterns import PATTERN_NAMES

from .measures import REGIONS, logs_frame

__all__ = ["plot_subspace_curves", "plot_cosine_series", "plot_kl_distributions",
           "plot_token_probabilities", "plot_pattern_heatmap", "plot_checkpoint_dynamics",
           "plot_region_maps", "plot_per_turn_kl", "plot_loss_budget", "plot_frontier", "plot_grouped_bars",
           "plot_lines", "plot_small_multiples"]

REGION_COLORS = {"unnecessary": "#bdbdbd", "effective": "#74c476", "unsupported": "#fb6a4a"}
TOKEN_ROW_COLORS = ("#17becf", "#1f4e9c", "#e6550d")  # student cyan, matched blue, crossed orange
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def _figure(figsize, default, dpi: int) -> Figure:
    fig = Figure(figsize=figsize or default, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path, dpi: int) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=dpi, format="png")
    return p


def _legend(ax) -> None:
    """A framed legend right of the axes (tight_layout makes room for it), never over the data."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=True)


def _finite(v) -> bool:
    try:
        return v is not None and bool(np.isfinite(float(v)))
    except (TypeError, ValueError):
        return False


def _white_to(color: str) -> LinearSegmentedColormap:
    return LinearSegmentedColormap.from_list(f"white_{color}", ["#ffffff", color])


# ----------------------------------------------------------------------------- Figs. 9-10
def plot_subspace_curves(curves: Mapping[str, pd.DataFrame], path, k: int = 5, figsize=None,
                         dpi: int = 100, title: str = "Top-k update subspace similarity to final") -> Path:
    """Lines of mean similarity vs step (``subspace_trajectory`` tables), shaded +- std."""
    fig = _figure(figsize, (6, 4), dpi)
    ax = fig.add_subplot()
    for label, t in curves.items():
        x, m = t["step"].to_numpy(float), t["mean"].to_numpy(float)
        ax.plot(x, m, marker="o", label=label)
        if "std" in t:
            s = np.nan_to_num(t["std"].to_numpy(float))
            ax.fill_between(x, m - s, m + s, alpha=0.2)
    ax.set(xlabel="training step", ylabel=f"top-{k} subspace similarity", ylim=(0, 1.02), title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


def plot_cosine_series(series: Mapping[str, Sequence[float]], path, figsize=None, dpi: int = 100,
                       title: str = "Cosine of consecutive step updates") -> Path:
    """One line per method of step-direction cosines (``consecutive_cosines`` / ``paired_cosines``)."""
    fig = _figure(figsize, (6, 4), dpi)
    ax = fig.add_subplot()
    for label, v in series.items():
        ax.plot(np.arange(1, len(v) + 1), np.asarray(v, float), marker=".", label=label)
    ax.axhline(0.0, color="black", lw=0.6)
    ax.set(xlabel="step pair", ylabel="cosine similarity", ylim=(-1.02, 1.02), title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- Figs. 13-15
def _group_name(key, by) -> str:
    key = key if isinstance(key, tuple) else (key,)
    parts = []
    for col, v in zip(by, key):
        if col == "traj_success" and isinstance(v, (bool, np.bool_)):
            parts.append("traj ok" if v else "traj fail")
        elif col == "step_ok" and isinstance(v, (bool, np.bool_)):
            parts.append("step ok" if v else "step bad")
        else:
            parts.append(f"{col}={v}")
    return "\n".join(parts)


def plot_kl_distributions(frame: pd.DataFrame, path, value: str = "kl",
                          by: Sequence[str] = ("traj_success", "step_ok"), panel: Optional[str] = None,
                          log: bool = True, figsize=None, dpi: int = 100, title: str = "Token-level KL") -> Path:
    """Violins of per-token KL per correctness group; one panel per value of ``panel`` (e.g. teacher
    "matched"/"crossed" or training step). ``log`` plots log10(KL + 1e-8)."""
    by = [c for c in by if c in frame.columns]
    panels = list(pd.unique(frame[panel])) if panel else [None]
    fig = _figure(figsize, (4.5 * len(panels), 4), dpi)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, pv in zip(axes, panels):
        sub = frame if pv is None else frame[frame[panel] == pv]
        groups = [(k, g[value].to_numpy(float)) for k, g in sub.groupby(by, sort=True)] if by else [("all", sub[value].to_numpy(float))]
        groups = [(k, np.log10(np.clip(v, 0, None) + 1e-8) if log else v) for k, v in groups if len(v)]
        if groups:
            data = [v for _, v in groups]
            pos = np.arange(1, len(data) + 1)
            multi = [i for i, d in enumerate(data) if len(d) > 1]
            if multi:
                ax.violinplot([data[i] for i in multi], positions=pos[multi], showmedians=True)
            ax.scatter(pos, [np.median(d) for d in data], color="black", s=12, zorder=3)
            ax.set_xticks(pos, [_group_name(k, by) for k, _ in groups], fontsize=7)
        ax.set(ylabel=f"log10 {value}" if log else value, title=title if pv is None else f"{title}: {pv}")
    fig.tight_layout()
    return _save(fig, path, dpi)


def plot_token_probabilities(tokens: Sequence[str], rows: Mapping[str, Sequence[float]], path,
                             per_line: int = 24, colors: Sequence[str] = TOKEN_ROW_COLORS, figsize=None,
                             dpi: int = 100, title: str = "Token probabilities") -> Path:
    """Stacked probability bars per generated token (paper Figs. 14-15): one row per model in
    ``rows`` order (student, matched teacher, crossed teacher), darker = higher probability.
    Long sequences wrap into blocks of ``per_line`` tokens; token text labels each column."""
    names = list(rows)
    probs = np.asarray([np.asarray(rows[n], float) for n in names])
    if probs.shape[1] != len(tokens):
        raise ValueError("every row needs one probability per token")
    cmaps = [_white_to(colors[i % len(colors)]) for i in range(len(names))]
    blocks = max(1, -(-len(tokens) // per_line))
    fig = _figure(figsize, (max(6.0, 0.42 * min(per_line, max(len(tokens), 1)) + 1.5),
                            0.6 + blocks * (0.35 * len(names) + 0.9)), dpi)
    axes = fig.subplots(blocks, 1, squeeze=False)[:, 0]
    for b, ax in enumerate(axes):
        lo, hi = b * per_line, min(len(tokens), (b + 1) * per_line)
        rgb = np.ones((len(names), per_line, 3))
        for r in range(len(names)):
            rgb[r, :hi - lo] = cmaps[r](np.clip(probs[r, lo:hi], 0, 1))[:, :3]
        ax.imshow(rgb, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(names)), names, fontsize=7)
        labels = ["".join(c if c.isprintable() else repr(c)[1:-1] for c in t) for t in tokens[lo:hi]]
        ax.set_xticks(range(hi - lo))
        ax.set_xticklabels(labels, rotation=90, fontsize=6, parse_math=False)
        ax.xaxis.tick_top()
        ax.set_xlim(-0.5, per_line - 0.5)
        for edge in ("top", "right", "bottom", "left"):
            ax.spines[edge].set_visible(False)
    fig.suptitle(f"{title} (darker = higher)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- Figs. 17-21
def plot_pattern_heatmap(tables, path, figsize=None, dpi: int = 100, title: str = "Planning patterns",
                         fmt: str = "{:.2f}") -> Path:
    """Annotated heatmap(s) of pattern distributions: rows = models, columns = patterns.

    ``tables`` is one ``pattern_table`` or a mapping panel name (e.g. domain) -> table; panels
    are stacked vertically and share the pattern axis (labelled under the last panel)."""
    panels = tables if isinstance(tables, Mapping) else {title: tables}
    n = len(panels)
    first = next(iter(panels.values()))
    fig = _figure(figsize, (0.8 * first.shape[1] + 2.4,
                            sum(0.32 * t.shape[0] + 0.5 for t in panels.values()) + 1.0), dpi)
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    for i, (ax, (name, t)) in enumerate(zip(axes, panels.items())):
        v = t.to_numpy(float)
        top = float(np.nanmax(v)) if v.size and not np.all(np.isnan(v)) else 1.0
        ax.imshow(v, cmap="Blues", vmin=0.0, vmax=max(1.0, top), aspect="auto")
        cols = [f"{c} {PATTERN_NAMES[c]}" if c in PATTERN_NAMES else str(c) for c in t.columns]
        ax.set_xticks(range(len(cols)), cols if i == n - 1 else [], rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(len(t.index)), [str(x) for x in t.index], fontsize=7)
        for (r, c), x in np.ndenumerate(v):
            if not np.isnan(x):
                ax.text(c, r, fmt.format(x), ha="center", va="center", fontsize=6,
                        color="white" if x > 0.6 else "black")
        ax.set_title(str(name), fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- Fig. 22
def _tight_cluster(xy: np.ndarray, frac: float = 0.03) -> list[int]:
    """Indices of the largest group of >= 2 points joined by steps shorter than ``frac`` of the
    plot's span (single linkage), or [] -- the points a full-scale scatter draws on top of each other."""
    n = len(xy)
    span = float(np.ptp(xy, axis=0).max()) if n else 0.0
    if n < 2 or span == 0:
        return []
    near = np.linalg.norm(xy[:, None] - xy[None], axis=-1) < frac * span
    group = list(range(n))
    for i, j in zip(*np.nonzero(near)):
        gi, gj = group[i], group[j]
        group = [gi if g == gj else g for g in group]
    best = max(set(group), key=group.count)
    members = [i for i in range(n) if group[i] == best]
    return members if 2 <= len(members) < n else []


def _pca_points(ax, xy: np.ndarray, labels: Sequence[str], idx: Sequence[int], connect: bool) -> None:
    if connect and len(idx) > 1:
        ax.plot(xy[idx, 0], xy[idx, 1], color="grey", lw=0.8, zorder=1)
    for i in idx:
        ax.scatter([xy[i, 0]], [xy[i, 1]], color=f"C{i % 10}", marker=MARKERS[i % len(MARKERS)], s=40,
                   edgecolors="black", linewidths=0.4, zorder=2 + i, label=str(labels[i]))


def plot_checkpoint_dynamics(coords: np.ndarray, distances: np.ndarray, labels: Sequence[str], path,
                             connect: bool = True, figsize=None, dpi: int = 100,
                             title: str = "Parameter dynamics") -> Path:
    """Left: PCA coordinates (``checkpoint_pca``), joined in order when ``connect``. Right: the
    pairwise distance matrix (``pairwise_distances``), annotated in 3 significant digits.

    Checkpoints are told apart by colour and marker in a legend beside the PCA panel, not by text
    at the points: distillation stages lie almost on top of their start, so text labels there
    overprint each other (as they did in the first Fig. 22).  When some points fall within 3 % of
    the plot's span of each other, a middle panel zooms on them (same colours and markers)."""
    n = len(labels)
    if coords.shape[0] != n or distances.shape != (n, n):
        raise ValueError("coords, distances and labels must describe the same checkpoints")
    xy = np.asarray(coords, float)[:, :2]
    cluster = _tight_cluster(xy)
    fig = _figure(figsize, (16 if cluster else 12, 4.8), dpi)
    axes = fig.subplots(1, 3 if cluster else 2, width_ratios=[1.25, 1, 1] if cluster else [1.25, 1])
    a1, a2 = axes[0], axes[-1]
    _pca_points(a1, xy, labels, list(range(n)), connect)
    a1.set(xlabel="PC1", ylabel="PC2", title=f"{title}: PCA")
    _legend(a1)
    if cluster:
        zoom = axes[1]
        _pca_points(zoom, xy, labels, cluster, connect and cluster == list(range(cluster[0], cluster[-1] + 1)))
        zoom.margins(0.15)
        zoom.locator_params(nbins=4)
        zoom.tick_params(labelsize=7)
        zoom.set(xlabel="PC1", ylabel="PC2", title="zoom: " + ", ".join(str(labels[i]) for i in cluster))
        zoom.title.set_fontsize(8)
    im = a2.imshow(distances, cmap="magma_r")
    a2.set_xticks(range(n), [str(x) for x in labels], rotation=45, ha="right", fontsize=7)
    a2.set_yticks(range(n), [str(x) for x in labels], fontsize=7)
    top = float(distances.max()) if distances.size else 0.0
    for (r, c), x in np.ndenumerate(distances):
        a2.text(c, r, f"{x:.3g}", ha="center", va="center", fontsize=6,
                color="white" if top and x > 0.6 * top else "black")
    fig.colorbar(im, ax=a2, fraction=0.046)
    a2.set_title("pairwise L2 distance")
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- Fig. 7 / Table 3
def _delta_text(d, se, unit: str) -> str:
    if not _finite(d):
        return "–"
    return f"{float(d):+.1f}" + (f" ± {float(se):.1f}" if _finite(se) else "") + unit


def plot_region_maps(maps: Mapping[str, pd.DataFrame], path, deltas: Optional[Mapping[str, pd.DataFrame]] = None,
                     figsize=None, dpi: int = 100, unit: str = "",
                     reference: Optional[Mapping[str, pd.DataFrame]] = None,
                     ses: Optional[Mapping[str, pd.DataFrame]] = None, title: str = "") -> Path:
    """One coloured grid per method of ``region_labels`` tables (rows quality, columns horizon).

    Each cell shows its region and, when ``deltas`` (same-shape pivots) are given, the change
    ``Δ ± SE`` (``ses``: same-shape standard errors; NaN = none), and the paper's change beside it
    where ``reference`` (NaN where the paper gives none) has one.  A cell with no label (no run
    measured it) stays white.  The colour bar on the right is the legend of the three regions."""
    n = len(maps)
    first = next(iter(maps.values()))
    fig = _figure(figsize, (1.9 * first.shape[1] * n + 2.2, 1.0 * first.shape[0] + 1.6), dpi)
    axes = fig.subplots(1, n + 1, squeeze=False, width_ratios=[1.0] * n + [0.05])[0]
    cmap = ListedColormap([REGION_COLORS[r] for r in REGIONS])
    code = {r: i for i, r in enumerate(REGIONS)}
    im = None
    for ax, (method, lab) in zip(axes, maps.items()):
        cells = lab.to_numpy(object)
        grid = np.vectorize(lambda s: code.get(s, np.nan), otypes=[float])(cells)
        im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-0.5, vmax=len(REGIONS) - 0.5, aspect="auto")
        d = deltas.get(method) if deltas else None
        e = ses.get(method) if ses else None
        ref = reference.get(method) if reference else None
        for (r, c), s in np.ndenumerate(cells):
            if s not in code:
                ax.text(c, r, "no run", ha="center", va="center", fontsize=7, color="grey")
                continue
            text = str(s)
            if d is not None:
                text += "\n" + _delta_text(d.iloc[r, c], None if e is None else e.iloc[r, c], unit)
            if ref is not None and _finite(ref.iloc[r, c]):
                text += f"\n(paper {float(ref.iloc[r, c]):+.1f})"
            ax.text(c, r, text, ha="center", va="center", fontsize=7)
        ax.set_xticks(range(lab.shape[1]), [str(x) for x in lab.columns], fontsize=8)
        ax.set_yticks(range(lab.shape[0]), [str(x) for x in lab.index], fontsize=8)
        ax.set(xlabel=lab.columns.name or "horizon", ylabel=lab.index.name or "quality", title=method)
    bar = fig.colorbar(im, cax=axes[-1], ticks=range(len(REGIONS)))
    bar.ax.set_yticklabels(list(REGIONS), fontsize=7)
    bar.ax.set_ylabel("region", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- TurnOPD
def plot_per_turn_kl(curves: Mapping[str, object], path, column: str = "kl", figsize=None, dpi: int = 100,
                     title: str = "Per-turn KL") -> Path:
    """KL vs turn depth per curve; each value is a ``per_turn_kl`` table (uses ``column``) or a
    sequence indexed from depth 1."""
    fig = _figure(figsize, (6, 4), dpi)
    ax = fig.add_subplot()
    for label, c in curves.items():
        if isinstance(c, pd.DataFrame):
            x, y = c.index.to_numpy(float), c[column].to_numpy(float)
        else:
            y = np.asarray(c, float)
            x = np.arange(1, len(y) + 1)
        ax.plot(x, y, marker="o", label=str(label))
    ax.set(xlabel="turn depth", ylabel="mean reverse KL", title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


def plot_loss_budget(table: pd.DataFrame, path, figsize=None, dpi: int = 100,
                     title: str = "Loss-budget share by turn depth") -> Path:
    """Grouped bars: rows of ``table`` are depths, columns weightings (``compare_loss_budgets``)."""
    fig = _figure(figsize, (6, 4), dpi)
    ax = fig.add_subplot()
    x = np.arange(len(table.index))
    w = 0.8 / max(1, table.shape[1])
    for j, col in enumerate(table.columns):
        ax.bar(x + (j - (table.shape[1] - 1) / 2) * w, table[col].to_numpy(float), width=w, label=str(col))
    ax.set_xticks(x, [str(i) for i in table.index])
    ax.set(xlabel="turn depth", ylabel="share of loss weight", title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


def plot_frontier(logs, path, least_time: bool = True, wall_label: str = "wall-clock (s)",
                  figsize=None, dpi: int = 100, title: str = "Accuracy vs wall-clock") -> Path:
    """Evaluated accuracy against wall-clock per method (logs as for ``least_time_table``); a
    dashed line marks the least common wall time."""
    f = logs_frame(logs)
    fig = _figure(figsize, (6, 4), dpi)
    ax = fig.add_subplot()
    for m, g in f.groupby("method", sort=False):
        e = g.dropna(subset=["acc"])
        ax.plot(e["wall"].to_numpy(float), e["acc"].to_numpy(float), marker="o", label=str(m))
    if least_time and len(f):
        ax.axvline(float(f.groupby("method")["wall"].max().min()), color="black", ls="--", lw=0.8,
                   label="least common time")
    ax.set(xlabel=wall_label, ylabel="eval accuracy", title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


# ----------------------------------------------------------------------------- generic (Figs. 3-6, 8, 12)
def plot_grouped_bars(table: pd.DataFrame, path, ylabel: str = "avg@8 (%)", figsize=None, dpi: int = 100,
                      title: str = "", reference: Optional[pd.DataFrame] = None,
                      errors: Optional[pd.DataFrame] = None) -> Path:
    """Grouped bars: one group per row of ``table`` (e.g. difficulty), one bar per column (e.g. model).

    ``errors`` (same rows and columns, NaN where none is known) draws each bar's standard error;
    ``reference`` (same rows and columns, NaN where unknown) puts the paper's value on its bar as a
    black diamond.  Each bar is labelled with its value just beyond the end of its error bar."""
    fig = _figure(figsize, (1.2 * len(table.index) * max(1, table.shape[1]) / 2 + 4, 4), dpi)
    ax = fig.add_subplot()
    x = np.arange(len(table.index))
    w = 0.8 / max(1, table.shape[1])
    marked = False                            # one "paper" legend entry
    for j, col in enumerate(table.columns):
        at = x + (j - (table.shape[1] - 1) / 2) * w
        vals = table[col].to_numpy(float)
        err = None
        if errors is not None and col in errors:
            err = errors[col].reindex(table.index).to_numpy(float)
        ax.bar(at, vals, width=w, label=str(col), yerr=err, capsize=2 if err is not None else 0,
               error_kw={"elinewidth": 0.8, "ecolor": "black"})
        for xi, v, e in zip(at, vals, err if err is not None else [np.nan] * len(vals)):
            if np.isfinite(v):
                end = v + (np.sign(v) or 1.0) * (e if np.isfinite(e) else 0.0)
                ax.annotate(f"{v:.0f}", (xi, end), xytext=(0, 2 if v >= 0 else -2), textcoords="offset points",
                            ha="center", va="bottom" if v >= 0 else "top", fontsize=7)
        if reference is not None and col in reference:
            ref = reference[col].reindex(table.index).to_numpy(float)
            ax.scatter(at, ref, marker="D", s=30, color="black", edgecolors="white", zorder=3,
                       label=None if marked else "paper")
            marked = True
    if (table.to_numpy(float) < 0).any():
        ax.axhline(0.0, color="black", lw=0.6)
    ax.margins(y=0.12)
    ax.set_xticks(x, [str(i) for i in table.index])
    ax.set(ylabel=ylabel, title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


def _draw_curve(ax, x, y, err, **style) -> None:
    """A marked line; with standard errors, error bars at each point (NaN: none)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if err is not None and np.isfinite(np.asarray(err, float)).any():
        ax.errorbar(x, y, yerr=np.asarray(err, float), marker="o", ms=3, capsize=2, elinewidth=0.8, **style)
    else:
        ax.plot(x, y, marker="o", ms=3, **style)


def plot_lines(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], path, xlabel: str, ylabel: str,
               figsize=None, dpi: int = 100, title: str = "",
               errors: Optional[Mapping[str, Sequence[float]]] = None) -> Path:
    """One marked line per label from ``(x, y)`` pairs (training curves, scaling curves); ``errors``
    (label -> one standard error per point) adds error bars.  For more than a handful of lines use
    `plot_small_multiples`."""
    fig = _figure(figsize, (7, 4), dpi)
    ax = fig.add_subplot()
    for label, (x, y) in curves.items():
        _draw_curve(ax, x, y, (errors or {}).get(label), label=str(label))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    _legend(ax)
    fig.tight_layout()
    return _save(fig, path, dpi)


def plot_small_multiples(panels: Mapping[str, object], path, xlabel: str, ylabel: str, ncols: Optional[int] = None,
                         errors: Optional[Mapping[str, object]] = None, figsize=None, dpi: int = 100,
                         title: str = "", sharey: bool = True) -> Path:
    """One small panel per key of ``panels``, on shared axes, each titled with its key.

    A panel's value is one ``(x, y)`` curve (one run per panel) or a mapping line label ->
    ``(x, y)`` (e.g. GRPO and OPD in one cell); a line label keeps its colour in every panel and
    the legend (only when some panel has two or more lines) sits above the grid.  ``errors`` mirrors
    ``panels`` with one standard error per point.  Why: 18 overlaid training curves under one
    legend (the first Fig. 8) cannot be read; a grid in the layout of the region map can."""
    names = list(panels)
    if not names:
        raise ValueError("no panels to draw")
    nested = {k: (dict(v) if isinstance(v, Mapping) else {k: v}) for k, v in panels.items()}
    errs = {k: (dict(v) if isinstance(v, Mapping) else {k: v}) for k, v in (errors or {}).items()}
    lines = list(dict.fromkeys(lab for v in nested.values() for lab in v))
    colour = {lab: f"C{i % 10}" for i, lab in enumerate(lines)}
    ncols = ncols or min(len(names), 3)
    nrows = -(-len(names) // ncols)
    fig = Figure(figsize=figsize or (2.3 * ncols + 1.0, 1.9 * nrows + 1.0), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(nrows, ncols, squeeze=False, sharex=True, sharey=sharey)
    for ax in grid.ravel()[len(names):]:
        fig.delaxes(ax)
    for ax, name in zip(grid.ravel(), names):
        for lab, (x, y) in nested[name].items():
            _draw_curve(ax, x, y, errs.get(name, {}).get(lab), color=colour[lab], label=str(lab))
        ax.set_title(str(name), fontsize=8)
        ax.tick_params(labelsize=7)
    for r in range(nrows):
        for c in range(ncols):
            i = r * ncols + c
            if i < len(names):
                if c == 0:
                    grid[r, c].set_ylabel(ylabel, fontsize=8)
                if i + ncols >= len(names):       # the lowest panel of its column
                    grid[r, c].set_xlabel(xlabel, fontsize=8)
                    grid[r, c].xaxis.set_tick_params(labelbottom=True)
    if any(len(v) > 1 for v in nested.values()):
        handles = [Line2D([], [], color=colour[lab], marker="o", ms=3) for lab in lines]
        fig.legend(handles, [str(lab) for lab in lines], loc="outside right upper", fontsize=7, frameon=True)
    if title:
        fig.suptitle(title, fontsize=9)
    return _save(fig, path, dpi)
