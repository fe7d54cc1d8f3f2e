"""Training curves of post-training runs as PNGs: ``python -m analysis.curves RUN [RUN ...]``.

    python -m analysis.curves runs/grpo-a runs/opd-a --out runs/curves [--keys reward,success,kl]
    python -m analysis.curves runs/opd runs/turnopd --reference opd     # + comparison.md

One figure per metric (reward, success, KL, entropy, rollout depth, ...) with one line per run,
read from each run's ``metrics.jsonl``; evaluation records (avg@8 over training) get their own
figure against training wall-clock.  Writes ``<out>/<metric>.png`` and ``<out>/curves.csv``.
With ``--reference RUN`` (a run folder's name) it also writes ``<out>/comparison.md``: accuracy at
the same step, at the least common training time (with the steps each run completed), and the
training wall-clock each run needs to reach the reference's final accuracy, with the speedup.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from analysis.figures import plot_lines
from pretrain import rundir

DEFAULT_KEYS = ("reward", "success", "kl", "entropy", "depth", "loss")


def load(run: Path) -> pd.DataFrame:
    """A run's metrics as a DataFrame (training and evaluation records); one clear error if unreadable."""
    path = rundir.metrics_path(run)
    try:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    return pd.DataFrame(records).assign(run=Path(run).name)


def plot(runs: list[Path], out: Path, keys=DEFAULT_KEYS) -> list[Path]:
    frames = [load(r) for r in runs]
    data = pd.concat(frames, ignore_index=True)
    is_eval = data["eval"].fillna(False).astype(bool) if "eval" in data else pd.Series(False, index=data.index)
    train, evals = data[~is_eval], data[is_eval]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for key in keys:
        if key not in train or train[key].isna().all():
            continue
        curves = {name: (g["step"].tolist(), g[key].astype(float).tolist())
                  for name, g in train.dropna(subset=[key]).groupby("run", sort=False)}
        written.append(plot_lines(curves, out / f"{key}.png", "step", key, title=f"{key} per training step"))
    for col in [c for c in evals.columns if "avg@" in c or c.endswith("_stuck")]:
        curves = {name: (g["train_wall_s"].tolist(), g[col].astype(float).tolist())
                  for name, g in evals.dropna(subset=[col]).groupby("run", sort=False)}
        written.append(plot_lines(curves, out / f"eval_{col.replace('@', '')}.png", "training wall-clock (s)",
                                  f"{col} (%)", title=f"{col} during training"))
    data.to_csv(out / "curves.csv", index=False)
    return written


def comparison(runs: list[Path], reference: str, split: str = "ID") -> str:
    """Markdown: same-step, least-time and time-to-target tables of ``runs`` (``split`` avg@k, with
    the k the runs evaluated with); runs without evaluations only count in the least-time table."""
    from analysis.measures import least_time_table, same_step_table, speedup_table
    from analysis.report import md_table
    from analysis.run_logs import frame, metrics, step_cell
    named = {Path(r).name: Path(r) for r in runs}
    if len(named) < len(runs):
        raise ValueError(f"runs need distinct folder names to be compared ({', '.join(Path(r).name for r in runs)})")
    if reference not in named:
        raise ValueError(f"--reference {reference!r} is not one of the runs ({', '.join(named)})")
    records = {name: metrics(run) for name, run in named.items()}
    ks = {int(key.split("@")[1]) for recs in records.values() for r in recs for key in r
          if key.startswith(f"{split}_avg@")}
    if len(ks) != 1:
        raise ValueError(f"the runs need evaluations with one k to be compared (found {split}_avg@k for k in "
                         f"{sorted(ks) or 'none'})")
    k = ks.pop()
    if not any(f"{split}_avg@{k}" in r for r in records[reference]):
        raise ValueError(f"the reference run {reference} has no {split}_avg@{k} evaluation")
    logs = frame(named, split, k=k)
    same, least, speed = same_step_table(logs), least_time_table(logs), speedup_table(logs, reference)
    acc = f"{split} avg@{k}"
    return "\n".join([
        f"# {' vs '.join(named)}", "", "Training wall-clock is rollout + scoring + update (evaluations excluded).", "",
        f"**Same step ({int(same['step'].iloc[0])}, the last step every run evaluated)**", "",
        md_table(["run", "eval step", acc, "train wall (s)"],
                 [[m, step_cell(r["eval_step"]), r["acc"], r["wall"]] for m, r in same.iterrows()]),
        f"**Least time ({least['wall_budget'].iloc[0]:.1f} s, when the first run finished)**", "",
        md_table(["run", "steps completed", "eval step", acc],
                 [[m, step_cell(r["steps_completed"]), step_cell(r["eval_step"]), r["acc"]]
                  for m, r in least.iterrows()]),
        f"**Time to reach {reference}'s final {acc} ({speed['target'].iloc[0]:.1f})**", "",
        md_table(["run", "train wall (s)", f"speedup over {reference}"],
                 [[m, r["time_to_target"], r["speedup"]] for m, r in speed.iterrows()])])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.curves", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None, help="folder for the PNGs (default: <first run>/curves)")
    p.add_argument("--keys", default=",".join(DEFAULT_KEYS), help="comma list of per-step metrics")
    p.add_argument("--reference", default=None, help="a run's folder name: also write comparison.md against it")
    p.add_argument("--split", default="ID", choices=["ID", "OOD"], help="evaluation split of comparison.md")
    args = p.parse_args(argv)
    out = args.out or args.runs[0] / "curves"
    try:
        written = plot(args.runs, out, [k for k in args.keys.split(",") if k])
        if args.reference:
            (out / "comparison.md").write_text(comparison(args.runs, args.reference, args.split))
            written.append(out / "comparison.md")
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
