"""Table-level measures for the reproductions: token KL groups, planning-pattern distributions,
region maps, TurnOPD diagnostics, same-budget comparisons and seed statistics.

Why one place: every reproduction reports these numbers in the same way, so the definitions
(which tokens count, which thresholds label a region, which cutoff "least time" means) live
here once, with their tests, instead of inside each script. Functions take tensors in the
trainers' layout (``[B, T]`` with ``agent_mask`` 1 on policy tokens and ``turn_index`` the 0-based
agent turn, -1 elsewhere) or pandas tables, and return pandas tables. Turn depths are reported
1-based (``depth = turn_index + 1``) as in the TurnOPD paper. Plotting is in `analysis.figures`,
parameter-space measures in `analysis.params`, information measures in `analysis.info`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from planning_gym.patterns import OTHERS, PATTERN_NAMES, PATTERNS, classify_trajectory

__all__ = ["token_kl_frame", "kl_group_summary", "per_turn_kl", "loss_budget_share",
           "compare_loss_budgets", "PATTERN_COLUMNS", "pattern_labels", "pattern_distribution",
           "pattern_table", "REGIONS", "region_labels", "region_counts", "same_step_table",
           "least_time_table", "speedup_table", "logs_frame", "SeedStat", "seed_stat", "summarise_seeds",
           "per_task_scores", "paired_differences", "paired_difference", "contrast", "pool_contrasts", "task_score", "verdict"]


# ----------------------------------------------------------------------------- token KL (Fig. 13)
def _agent_positions(agent_mask: torch.Tensor, turn_index: torch.Tensor):
    mask = agent_mask != 0
    if mask.any() and int(turn_index[mask].min()) < 0:
        raise ValueError("agent tokens must have turn_index >= 0")
    return mask.nonzero(as_tuple=True)


def token_kl_frame(per_token_kl: torch.Tensor, agent_mask: torch.Tensor, turn_index: torch.Tensor,
                   traj_success: Sequence[bool], step_ok: Optional[torch.Tensor] = None) -> pd.DataFrame:
    """One row per agent token: episode, depth, kl, traj_success and (if given) step_ok.

    ``step_ok`` is ``[B, K]`` (per episode and 0-based turn: was that step valid / optimal)."""
    b, t = _agent_positions(agent_mask, turn_index)
    turns = turn_index[b, t]
    frame = pd.DataFrame({"episode": b.tolist(), "depth": (turns + 1).tolist(),
                          "kl": per_token_kl.detach().double()[b, t].tolist(),
                          "traj_success": [bool(traj_success[i]) for i in b.tolist()]})
    if step_ok is not None:
        frame["step_ok"] = step_ok.bool()[b, turns].tolist()
    return frame


def kl_group_summary(frame: pd.DataFrame, by: Sequence[str] = ("traj_success", "step_ok"),
                     value: str = "kl", quantiles: Sequence[float] = (0.1, 0.25, 0.5, 0.75, 0.9)) -> pd.DataFrame:
    """count, mean, std and quantiles (columns ``q10``, ``q50``, ...) of ``value`` per group."""
    by = [c for c in by if c in frame.columns]
    if not by:  # no grouping column present: one row over all tokens
        frame, by = frame.assign(group="all"), ["group"]
    g = frame.groupby(by, sort=True)[value]
    out = g.agg(["count", "mean", "std"])
    for q in quantiles:
        out[f"q{round(q * 100):d}"] = g.quantile(q)
    return out


# ----------------------------------------------------------------------------- TurnOPD diagnostics
def per_turn_kl(per_token_kl: torch.Tensor, turn_index: torch.Tensor, agent_mask: torch.Tensor) -> pd.DataFrame:
    """Per turn depth: ``kl`` (mean over surviving episodes of their token-mean KL in that turn,
    TurnOPD's K_t), ``token_kl`` (mean over all tokens of that turn), ``survivors`` (n_t), ``tokens``."""
    b, t = _agent_positions(agent_mask, turn_index)
    f = pd.DataFrame({"episode": b.tolist(), "depth": (turn_index[b, t] + 1).tolist(),
                      "kl": per_token_kl.detach().double()[b, t].tolist()})
    ep = f.groupby(["depth", "episode"])["kl"].mean().groupby("depth")
    tok = f.groupby("depth")["kl"]
    return pd.DataFrame({"kl": ep.mean(), "token_kl": tok.mean(), "survivors": ep.size(),
                         "tokens": tok.size()}).rename_axis("depth")


def loss_budget_share(token_weights: torch.Tensor, turn_index: torch.Tensor, agent_mask: torch.Tensor,
                      per_token_loss: Optional[torch.Tensor] = None) -> pd.Series:
    """Share of the total loss weight (or of ``weight * loss`` when ``per_token_loss`` is given)
    that falls on each turn depth; sums to 1 (NaN everywhere if the total is 0)."""
    b, t = _agent_positions(agent_mask, turn_index)
    w = token_weights.detach().double()[b, t]
    if per_token_loss is not None:
        w = w * per_token_loss.detach().double()[b, t]
    s = pd.Series(w.numpy(), index=pd.Index((turn_index[b, t] + 1).tolist(), name="depth"))
    s = s.groupby(level=0).sum()
    total = s.sum()
    return (s / total if total != 0 else s * float("nan")).rename("share")


def compare_loss_budgets(turn_index: torch.Tensor, agent_mask: torch.Tensor,
                         alphas: Sequence[float] = (0.0, 1.0)) -> pd.DataFrame:
    """Loss-budget share per depth under TurnOPD's blend ``(1-a) q_traj + a q_turn`` for each a.

    a = 0 is token-proportional weighting (long shallow turns dominate), a = 1 turn-normalised."""
    from posttrain.losses import turn_weights

    cols = {f"alpha={a:g}": loss_budget_share(turn_weights(turn_index, agent_mask, a, torch.float64),
                                              turn_index, agent_mask) for a in alphas}
    return pd.DataFrame(cols)


# ----------------------------------------------------------------------------- patterns (Figs. 17-21)
PATTERN_COLUMNS = list(PATTERNS) + [OTHERS]


def pattern_labels(texts: Sequence[str]) -> list[str]:
    return [classify_trajectory(t) for t in texts]


def _as_labels(items: Sequence[str]) -> list[str]:
    # Labels are the short codes; a trajectory text is never exactly "T1" or "Others".
    known = set(PATTERN_COLUMNS)
    return list(items) if all(i in known for i in items) else pattern_labels(items)


def pattern_distribution(items: Sequence[str], normalize: bool = True) -> pd.Series:
    """Frequency of T1..T4, D1..D4, Others among pattern labels or trajectory texts."""
    labels = _as_labels(items)
    s = pd.Series(labels, dtype=object).value_counts().reindex(PATTERN_COLUMNS, fill_value=0)
    s = s.astype(float)
    if normalize:
        s = s / len(labels) if labels else s * float("nan")
    return s.rename(None)


def pattern_table(samples: Mapping[str, Sequence[str]], normalize: bool = True,
                  long_names: bool = False) -> pd.DataFrame:
    """Rows = models (insertion order, e.g. Instruct, Teacher FA, After FA), columns = patterns."""
    t = pd.DataFrame({m: pattern_distribution(v, normalize) for m, v in samples.items()}).T
    if long_names:
        t.columns = [f"{c} {PATTERN_NAMES[c]}" if c in PATTERN_NAMES else c for c in t.columns]
    return t


# ----------------------------------------------------------------------------- regions (Fig. 7, Table 3)
REGIONS = ("unnecessary", "effective", "unsupported")


def region_labels(table: pd.DataFrame, high: float = 90.0, margin: float = 2.0, row: str = "quality",
                  col: str = "horizon", delta: str = "delta", baseline: Optional[str] = "baseline",
                  se: Optional[str] = "se") -> pd.DataFrame:
    """Label each (row, col) cell of a long table of Delta-avg@8 values.

    Rules, applied in order (values in the table's units; defaults assume percentage points):
    ``unnecessary`` if the pre-post-training ``baseline`` is already >= ``high`` (little headroom);
    ``effective`` if ``delta >= margin`` and, where the table has a standard-error column ``se``
    with a finite value, ``delta > 2 se`` (a gain within noise is not a gain); ``unsupported``
    otherwise. Without a baseline column only the last two apply. Row/column order follows first
    appearance in ``table``.
    """
    if table.duplicated([row, col]).any():
        raise ValueError("one value per (row, col) cell expected")
    has_base = baseline is not None and baseline in table.columns
    has_se = se is not None and se in table.columns
    lab = []
    for _, r in table.iterrows():
        noise = 2 * r[se] if has_se and np.isfinite(r[se]) else -np.inf
        if has_base and r[baseline] >= high:
            lab.append("unnecessary")
        elif r[delta] >= margin and r[delta] > noise:
            lab.append("effective")
        else:
            lab.append("unsupported")
    t = table.assign(region=lab).pivot(index=row, columns=col, values="region")
    return t.reindex(index=pd.unique(table[row]), columns=pd.unique(table[col]))


def region_counts(labels: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Cells per region for each method (rows = methods, columns = REGIONS)."""
    return pd.DataFrame({m: pd.Series(t.to_numpy().ravel()).value_counts().reindex(list(REGIONS), fill_value=0)
                         for m, t in labels.items()}).T.astype(int)


# ----------------------------------------------------------------------------- same budget (TurnOPD Table 2)
def logs_frame(logs) -> pd.DataFrame:
    """Training logs as one DataFrame (method, step, wall, acc, ...), methods in first-seen order,
    steps ascending within each method."""
    if isinstance(logs, pd.DataFrame):
        f = logs.copy()
    else:
        f = pd.concat([pd.DataFrame(v).assign(method=m) for m, v in logs.items()], ignore_index=True)
    missing = {"method", "step", "wall", "acc"} - set(f.columns)
    if missing:
        raise ValueError(f"logs need columns method, step, wall, acc (missing {sorted(missing)})")
    order = {m: i for i, m in enumerate(pd.unique(f["method"]))}  # keep the caller's method order
    f = f.assign(_order=f["method"].map(order)).sort_values(["_order", "step"], kind="stable")
    return f.drop(columns="_order").reset_index(drop=True)


def same_step_table(logs, step: Optional[int] = None) -> pd.DataFrame:
    """Accuracy of each method at one optimiser step (default: the largest evaluated step every
    method reached). ``logs``: DataFrame with method, step, wall, acc (acc NaN on rows without an
    evaluation) or a mapping method -> such rows. Uses the last evaluation at or before ``step``."""
    f = logs_frame(logs)
    ev = f.dropna(subset=["acc"])
    if step is None:
        step = int(ev.groupby("method")["step"].max().min())
    rows = []
    for m, g in ev.groupby("method", sort=False):
        g = g[g["step"] <= step]
        last = g.iloc[-1] if len(g) else None
        rows.append({"method": m, "step": step, "eval_step": None if last is None else int(last["step"]),
                     "acc": float("nan") if last is None else float(last["acc"]),
                     "wall": float("nan") if last is None else float(last["wall"])})
    return pd.DataFrame(rows).set_index("method")


def least_time_table(logs, wall: Optional[float] = None) -> pd.DataFrame:
    """Accuracy of each method at one wall-clock budget (default: the least common wall time, i.e.
    the earliest time at which some method finished its run). Reports ``steps_completed`` (last
    logged step within the budget) beside the evaluated accuracy, so a least-time advantage that
    comes only from more steps is visible (the TurnOPD review's request)."""
    f = logs_frame(logs)
    if wall is None:
        wall = float(f.groupby("method")["wall"].max().min())
    rows = []
    for m, g in f.groupby("method", sort=False):
        within = g[g["wall"] <= wall + 1e-9]
        ev = within.dropna(subset=["acc"])
        last = ev.iloc[-1] if len(ev) else None
        rows.append({"method": m, "wall_budget": wall,
                     "steps_completed": int(within["step"].max()) if len(within) else 0,
                     "eval_step": None if last is None else int(last["step"]),
                     "acc": float("nan") if last is None else float(last["acc"])})
    return pd.DataFrame(rows).set_index("method")


def speedup_table(logs, reference: str, target: Optional[float] = None) -> pd.DataFrame:
    """Wall time each method needs to first reach ``target`` accuracy (default: the reference's
    final accuracy) and the speedup ``reference_time / method_time`` (NaN if never reached)."""
    f = logs_frame(logs).dropna(subset=["acc"])
    if target is None:
        target = float(f[f["method"] == reference]["acc"].iloc[-1])
    times = {}
    for m, g in f.groupby("method", sort=False):
        hit = g[g["acc"] >= target]
        times[m] = float(hit["wall"].min()) if len(hit) else float("nan")
    ref = times[reference]
    return pd.DataFrame({"target": target, "time_to_target": times,
                         "speedup": {m: ref / t if t and not math.isnan(t) else float("nan")
                                     for m, t in times.items()}}).rename_axis("method")


# ----------------------------------------------------------------------------- paired tasks
PERCENT_FIELDS = ("success", "stuck")     # per-sample booleans, averaged per task as percentages


def per_task_scores(samples: Sequence[Mapping], split: str, difficulty: str = "all", field: str = "success",
                    metric: str = "avg") -> pd.Series:
    """Per task id (index), one evaluation's mean of ``field`` over the task's samples (the success
    rate by default, in percent; ``stuck`` also in percent, ``n_invalid`` in invalid actions per
    episode); ``metric="pass"`` takes the maximum instead (pass@k for ``success``).
    ``difficulty="all"`` pools the bins."""
    if metric not in ("avg", "pass"):
        raise ValueError(f"metric must be 'avg' or 'pass', not {metric!r}")
    unit = 100.0 if field in PERCENT_FIELDS else 1.0
    rows = pd.DataFrame([{"task": x["task"], "value": float(x[field])} for x in samples
                         if x["split"] == split and difficulty in ("all", x["difficulty"])])
    return rows.groupby("task")["value"].agg("mean" if metric == "avg" else "max") * unit if len(rows) \
        else pd.Series(dtype=float)


def _task_keys(samples: Sequence[Mapping]) -> dict:
    """Task id -> what the task is (``task_key``: domain, goal and inventory), where samples record it."""
    return {x["task"]: x["task_key"] for x in samples if "task_key" in x}


def paired_differences(a: Sequence[Mapping], b: Sequence[Mapping], split: str, difficulty: str = "all",
                       field: str = "success", metric: str = "avg") -> pd.Series:
    """Per task (index), ``a``'s minus ``b``'s `per_task_scores`, from two evaluations' per-sample
    records (``samples.jsonl``) on the same tasks. Task ids are positions in a corpus's test split,
    so where the samples say what each task is (``task_key``) a pair must be the same task: corpora
    of different horizon mixtures hold different mid and long test tasks under the same ids (use
    `contrast(..., paired=False)` for those)."""
    ra, rb = per_task_scores(a, split, difficulty, field, metric), per_task_scores(b, split, difficulty, field, metric)
    if set(ra.index) != set(rb.index):
        raise ValueError(f"paired_difference: the evaluations cover different {split}/{difficulty} tasks "
                         f"({len(ra)} vs {len(rb)}, {len(set(ra.index) & set(rb.index))} in common)")
    ka, kb = _task_keys(a), _task_keys(b)
    differ = [t for t in ra.index if t in ka and t in kb and ka[t] != kb[t]]
    if differ:
        raise ValueError(f"paired_difference: {len(differ)} of {len(ra)} {split}/{difficulty} task ids name different "
                         f"tasks in the two evaluations (e.g. {differ[0]}); compare them unpaired")
    return ra - rb.reindex(ra.index)


def _mean_se(diff: pd.Series) -> tuple[float, float, int]:
    if diff.empty:
        return float("nan"), float("nan"), 0
    se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else float("nan")
    return float(diff.mean()), se, len(diff)


def _unpaired(ra: pd.Series, rb: pd.Series) -> tuple[float, float, int]:
    """Difference of two means over different tasks, with the two-sample standard error."""
    (ma, sa, na), (mb, sb, nb) = _mean_se(ra), _mean_se(rb)
    return ma - mb, math.sqrt(sa ** 2 + sb ** 2), min(na, nb)


def paired_difference(a: Sequence[Mapping], b: Sequence[Mapping], split: str,
                      difficulty: str = "all", field: str = "success", metric: str = "avg") -> tuple[float, float, int]:
    """Mean and standard error over tasks of `paired_differences`, and the number of tasks.

    Pairing by task removes the task-to-task spread that dominates when a cell holds a few tasks;
    the standard error is NaN for a single task."""
    return _mean_se(paired_differences(a, b, split, difficulty, field, metric))


def contrast(a: Sequence[Mapping], b: Sequence[Mapping], split: str, difficulty: str, sign: float,
             metric: str = "avg", paper: float | None = None, paired: bool = True) -> dict:
    """One comparison of a table, ready for the scoreboard: ``a`` minus ``b`` paired by task (``delta``
    ± ``se`` over ``tasks``), the ``verdict`` against the ``sign`` the paper claims, the paper's own
    difference where it gives one, and the per-task numbers `pool_contrasts` needs to put seeds
    together: each task's difference (``per_task``), or, unpaired (``paired=False``: the two
    evaluations ran different tasks), each side's task scores (``per_task_a``, ``per_task_b``) and
    the two-sample standard error."""
    if paired:
        diff = paired_differences(a, b, split, difficulty, metric=metric)
        delta, se, n = _mean_se(diff)
        tasks = {"per_task": {str(t): float(v) for t, v in diff.items()}}
    else:
        ra, rb = per_task_scores(a, split, difficulty, metric=metric), per_task_scores(b, split, difficulty, metric=metric)
        delta, se, n = _unpaired(ra, rb)
        tasks = {"per_task_a": {str(t): float(v) for t, v in ra.items()},
                 "per_task_b": {str(t): float(v) for t, v in rb.items()}}
    return {"delta": delta, "se": se, "tasks": n, "seeds": 1, "sign": sign, "paper": paper, "paired": paired,
            "verdict": verdict(delta, se, sign), **tasks}


def pool_contrasts(per_seed: Sequence[Mapping]) -> dict:
    """One `contrast` over seeds: each task's difference (or, unpaired, each side's task score)
    averaged over the seeds that evaluated it (every seed evaluates the same test tasks of a
    corpus), then mean ± SE over tasks and the verdict. The standard error so holds both the task
    spread and, through each task's mean, the seed noise."""
    first = per_seed[0]
    kept = {k: v for k, v in first.items() if not k.startswith("per_task")}
    if first.get("paired", True):
        diff = pd.DataFrame([c["per_task"] for c in per_seed]).mean(axis=0)
        delta, se, n = _mean_se(diff)
        tasks = {"per_task": {t: float(v) for t, v in diff.items()}}
    else:
        ra, rb = (pd.DataFrame([c[side] for c in per_seed]).mean(axis=0) for side in ("per_task_a", "per_task_b"))
        delta, se, n = _unpaired(ra, rb)
        tasks = {"per_task_a": ra.to_dict(), "per_task_b": rb.to_dict()}
    return {**kept, "delta": delta, "se": se, "tasks": n, "seeds": len(per_seed),
            "verdict": verdict(delta, se, first["sign"]), **tasks}


def verdict(delta: float, se: float, paper_sign: float) -> str:
    """The scoreboard's rule for a paired difference ``delta`` ± ``se``: "agrees" when it lies beyond
    two standard errors on the paper's side (``paper_sign``: the sign the paper's difference has),
    "disagrees" beyond two on the other side, else "cannot tell" (so too with no standard error,
    i.e. a single task)."""
    if delta != delta or se != se or abs(delta) <= 2 * se:
        return "cannot tell"
    return "agrees" if (delta > 0) == (paper_sign > 0) else "disagrees"


def task_score(samples: Sequence[Mapping], split: str, difficulty: str = "all",
               metric: str = "avg") -> tuple[float, float, int]:
    """Mean and standard error over tasks of one evaluation's score (percent) from its per-sample
    records: ``metric="avg"`` is avg@k (a task's success rate), ``"pass"`` pass@k (any success).

    The mean equals the summary's avg@k / pass@k of the cell; the standard error (NaN for one
    task) is what an error bar on that number shows: how much it would move with other tasks."""
    if metric not in ("avg", "pass"):
        raise ValueError(f"metric must be 'avg' or 'pass', not {metric!r}")
    rows = pd.DataFrame([{"task": x["task"], "success": float(x["success"])} for x in samples
                         if x["split"] == split and difficulty in ("all", x["difficulty"])])
    if rows.empty:
        return float("nan"), float("nan"), 0
    per_task = rows.groupby("task")["success"].agg("mean" if metric == "avg" else "max").to_numpy() * 100
    se = float(per_task.std(ddof=1) / math.sqrt(len(per_task))) if len(per_task) > 1 else float("nan")
    return float(per_task.mean()), se, len(per_task)


# ----------------------------------------------------------------------------- seeds
# two-sided 95% Student-t quantiles for 1..30 degrees of freedom (no scipy dependency)
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042]


@dataclass(frozen=True)
class SeedStat:
    mean: float
    std: float      # sample standard deviation (ddof=1); NaN for one seed
    n: int
    ci95: float     # half-width of the Student-t 95% interval of the mean; NaN for one seed

    @property
    def se(self) -> float:
        """Standard error of the mean over seeds (std / sqrt(n)); NaN for one seed."""
        return self.std / math.sqrt(self.n) if self.n > 1 else float("nan")

    def format(self, digits: int = 2, ci: bool = False) -> str:
        spread = self.ci95 if ci else self.std
        if self.n < 2 or math.isnan(spread):
            return f"{self.mean:.{digits}f} (n={self.n})"
        sym = "± CI95 " if ci else "± "
        return f"{self.mean:.{digits}f} {sym}{spread:.{digits}f} (n={self.n})"

    def __str__(self) -> str:
        return self.format()


def seed_stat(values: Sequence[float]) -> SeedStat:
    """Mean, std, n and 95% CI half-width of per-seed values (NaNs dropped)."""
    v = np.asarray([x for x in values if not (isinstance(x, float) and math.isnan(x))], dtype=float)
    n = len(v)
    if n == 0:
        return SeedStat(float("nan"), float("nan"), 0, float("nan"))
    if n == 1:
        return SeedStat(float(v[0]), float("nan"), 1, float("nan"))
    std = float(v.std(ddof=1))
    t = _T975[n - 2] if n - 1 <= len(_T975) else 1.96
    return SeedStat(float(v.mean()), std, n, t * std / math.sqrt(n))


def summarise_seeds(frame: pd.DataFrame, by: Sequence[str], value: str, digits: int = 2) -> pd.DataFrame:
    """Per group of ``by``: mean, std, n, ci95 and the text ``"m ± s (n=3)"`` of ``value`` over rows (seeds)."""
    rows = []
    for key, g in frame.groupby(list(by), sort=False):
        s = seed_stat(g[value].tolist())
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(by, key)), "mean": s.mean, "std": s.std, "n": s.n, "ci95": s.ci95,
                     "text": s.format(digits)})
    return pd.DataFrame(rows).set_index(list(by))
