"""Training curves of post-training runs as PNGs: ``python -m analysis.curves RUN [RUN ...]``.

    python -m analysis.curves runs/grpo-a runs/opd-a --out runs/curves [--keys reward,success,kl]

One figure per metric (reward, success, KL, entropy, rollout depth, ...) with one line per run,
read from each run's ``metrics.jsonl``; evaluation records (avg@8 over training) get their own
figure against training wall-clock.  Writes ``<out>/<metric>.png`` and ``<out>/curves.csv``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from analysis.figures import plot_lines

DEFAULT_KEYS = ("reward", "success", "kl", "entropy", "depth", "loss")


def load(run: Path) -> pd.DataFrame:
    """A run's metrics as a DataFrame (training and evaluation records); one clear error if unreadable."""
    path = Path(run) / "metrics.jsonl"
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
    for col in [c for c in evals.columns if "avg@" in c]:
        curves = {name: (g["train_wall_s"].tolist(), g[col].astype(float).tolist())
                  for name, g in evals.dropna(subset=[col]).groupby("run", sort=False)}
        written.append(plot_lines(curves, out / f"eval_{col.replace('@', '')}.png", "training wall-clock (s)",
                                  f"{col} (%)", title=f"{col} during training"))
    data.to_csv(out / "curves.csv", index=False)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.curves", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None, help="folder for the PNGs (default: <first run>/curves)")
    p.add_argument("--keys", default=",".join(DEFAULT_KEYS), help="comma list of per-step metrics")
    args = p.parse_args(argv)
    try:
        written = plot(args.runs, args.out or args.runs[0] / "curves", [k for k in args.keys.split(",") if k])
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(str(w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
