"""The horizon x quality region map (paper Fig. 7 / Table 3) of any post-training runs.

    python -m analysis.region_map runs/opd-4opt runs/grpo-4opt runs/opd-1opt --out runs/region-map
    python -m analysis.region_map RUN... --base runs/pretrain-fa-small --label runs/opd-x=4opt --out OUT

For each run (a folder written by ``python -m posttrain.train``) the change of avg@8 from the
student (the base) to the run's last evaluation is measured per task horizon (short / mid / long)
as a paired difference over tasks ± its standard error (`analysis.measures.paired_difference`),
and every cell is labelled unnecessary / effective / unsupported (`analysis.measures.region_labels`):
the same measures as ``make reproduce TABLE=fig7``, on the user's own runs.  Writes
``OUT/region_map.png`` (one panel per method: rows quality, columns horizon), ``OUT/region_map.md``
and ``OUT/region_map.json`` -- the figure is drawn from the numbers in the table -- and
``OUT/training_success.png``, each run's logged training success per step (one panel per quality
and trained horizon, one line per method: Fig. 8 for the user's runs).

Grouping: the method is the run's ``config.method``; the quality (a row) is ``--label RUN=LABEL``
when given, else the student's pre-training corpus ``patterns`` (1opt, 4opt, 4opt4sub, ...), else
the student's folder name.  Runs that land in one cell (seeds, repeats) are pooled: the mean and
standard error over all their (task, run) pairs.

The base evaluation, per run, in this order: the run's own step-0 evaluation (``eval_at_start``,
the same tasks by construction); ``--base RUN=PATH`` for that run, else a plain ``--base PATH``;
the student's own evaluation (``<student>/eval/samples.jsonl``, as ``make eval`` writes it).  A
PATH is an evaluation folder, a ``samples.jsonl`` or a run folder.  The base must hold the same
tasks as the run's evaluation.  Pure measurement: reads run folders, trains and evaluates
nothing.  Bad input: one ``error:`` line and exit status 2.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.figures import plot_region_maps, plot_small_multiples
from analysis.measures import REGIONS, paired_difference, region_labels, task_score
from analysis.report import md_table
from planning_gym.cli import Parser, UsageError, entry, prepare_output, read_jsonl
from pretrain import rundir

DIFFS = ("short", "mid", "long")
QUALITY_ORDER = ("1opt", "4opt", "4opt4sub", "4opt8sub")        # the paper's rows, best data first
METHOD_NAMES = {"grpo": "GRPO", "opd": "OPD", "turnopd": "TurnOPD", "tcod": "TCOD-F2B"}


@dataclass
class Run:
    path: Path
    method: str
    quality: str
    step: int                 # the evaluation measured (the run's last)
    after: list[dict]
    base: list[dict]
    base_from: str            # where the base evaluation was found


# ----------------------------------------------------------------------------- reading run folders
def _samples(path: Path, what: str) -> list[dict]:
    rows = read_jsonl(path)
    if not rows:
        raise UsageError(f"{what} {path} holds no samples")
    missing = {"task", "split", "difficulty", "success"} - set(rows[0])
    if missing:
        raise UsageError(f"{what} {path} is not an evaluation's samples.jsonl (no {', '.join(sorted(missing))})")
    return rows


def step_evaluations(run: Path) -> dict[int, Path]:
    """A post-training run's periodic evaluations: step -> samples.jsonl."""
    found = {}
    for d in sorted((Path(run) / "eval").glob("step_*")):
        f = d / "samples.jsonl"
        if f.is_file() and d.name[5:].isdigit():
            found[int(d.name[5:])] = f
    return found


def samples_file(path: Path) -> Path | None:
    """The samples.jsonl an evaluation PATH names: the file, an evaluation folder, a run folder's
    ``eval/`` (a pre-training run) or its last ``eval/step_*`` (a post-training run)."""
    path = Path(path)
    for f in (path, path / "samples.jsonl", path / "eval" / "samples.jsonl"):
        if f.is_file() and f.name == "samples.jsonl":
            return f
    steps = step_evaluations(path)
    return steps[max(steps)] if steps else None


def read_config(run: Path) -> dict:
    try:
        record = json.loads((Path(run) / "train_config.json").read_text())
        method, student = record["config"]["method"], record["student"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{run} is not a post-training run (no train_config.json with config.method and student, "
                         "as `python -m posttrain.train` writes)") from None
    return {**record, "method": str(method), "student": Path(student)}


def quality_of(record: dict) -> str:
    """The student's pre-training data label: its corpus's ``patterns`` (read from the corpus's
    ``config.json``), else the post-training corpus's, else the student run's folder name."""
    run = rundir.run_of(record["student"])
    corpora = []
    try:
        corpora.append(Path(json.loads((run / "train_config.json").read_text())["data"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if record.get("data"):
        corpora.append(Path(record["data"]))
    for corpus in corpora:
        try:
            return str(json.loads((corpus / "config.json").read_text())["patterns"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return run.name


def student_evaluation(student: Path) -> Path | None:
    """The student's own evaluation: ``<student>/eval`` (``make eval``), a post-trained student's
    last evaluation, or, for the final checkpoint of a run, that run's evaluation."""
    own = samples_file(student)
    if own is not None:
        return own
    run = rundir.run_of(student)
    if run != student:
        try:
            final = Path(json.loads((run / "summary.json").read_text())["checkpoint"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if final.resolve() == student.resolve():
            return samples_file(run)
    return None


def _match(key: str, run: Path) -> bool:
    return Path(key).resolve() == run.resolve() or key == run.name


def _per_run(flags: list[str], runs: list[Path], flag: str) -> tuple[dict[Path, str], list[str]]:
    """``RUN=VALUE`` flags -> {run: value}; other flags (no ``=``, or one naming no run) -> plain."""
    named, plain = {}, []
    for item in flags:
        key, sep, value = item.partition("=")
        hit = [r for r in runs if sep and _match(key, r)]
        if hit:
            named.update({r: value for r in hit})
        elif flag == "--label":
            raise UsageError(f"--label expects RUN=LABEL with RUN one of the runs, got {item!r}")
        else:
            plain.append(item)
    if len(plain) > 1:
        raise UsageError(f"{flag} without RUN= applies to every run, so give it once (got {len(plain)})")
    return named, plain


def load_runs(paths: list[Path], bases: list[str] = (), labels: list[str] = ()) -> list[Run]:
    paths = [Path(p) for p in paths]
    base_for, plain = _per_run(list(bases), paths, "--base")
    label_for, _ = _per_run(list(labels), paths, "--label")
    runs = []
    for path in paths:
        if not path.is_dir():
            raise UsageError(f"{path} is not a folder (a post-training run folder is expected)")
        record = read_config(path)
        evals = step_evaluations(path)
        after = [s for s in evals if s > 0]
        if not after:
            raise UsageError(f"{path} has no evaluation after training (no eval/step_N/samples.jsonl with N > 0)")
        if 0 in evals:
            base, source = evals[0], "the run's step-0 evaluation"
        else:
            given = base_for.get(path) or (plain[0] if plain else None)
            if given is not None:
                base = samples_file(Path(given))
                if base is None:
                    raise UsageError(f"--base {given}: no samples.jsonl there (give an evaluation folder, its "
                                     "samples.jsonl or a run folder with an evaluation)")
                source = f"--base {given}"
            else:
                base = student_evaluation(record["student"])
                if base is None:
                    raise UsageError(f"{path} has no base evaluation: it did not evaluate at step 0 "
                                     f"(eval_at_start) and its student {record['student']} has no eval/samples.jsonl; "
                                     f"run `make eval RUN={record['student']}` or pass --base")
                source = "the student's evaluation"
        runs.append(Run(path, METHOD_NAMES.get(record["method"], record["method"]),
                        label_for.get(path) or quality_of(record), max(after),
                        _samples(evals[max(after)], "evaluation"), _samples(Path(base), "base evaluation"),
                        f"{source} ({base})"))
    return runs


# ----------------------------------------------------------------------------- measuring
def pool(parts: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    """Mean and standard error over the union of several paired samples, from each one's mean,
    standard error and size -- exactly what pooling their per-task differences would give."""
    parts = [(m, s, n) for m, s, n in parts if n > 0]
    total = sum(n for _, _, n in parts)
    if not total:
        return float("nan"), float("nan"), 0
    mean = sum(m * n for m, _, n in parts) / total
    if total < 2:
        return mean, float("nan"), total
    ss = sum((n - 1) * (s * s * n if n > 1 else 0.0) + n * (m - mean) ** 2 for m, s, n in parts)
    return mean, (ss / (total - 1) / total) ** 0.5, total


def measure(runs: list[Run], split: str = "ID") -> pd.DataFrame:
    """One row per (method, quality, horizon) with a measured run: baseline (the base's avg@8),
    delta ± se (paired over tasks, pooled over the cell's runs), tasks, runs."""
    cells: dict[tuple, list] = {}
    for run in runs:
        for d in DIFFS:
            if not any(x["split"] == split and x["difficulty"] == d for x in run.after):
                continue                      # the run was not evaluated on this horizon
            try:
                diff = paired_difference(run.after, run.base, split, d)
            except ValueError as exc:
                raise UsageError(f"{run.path}: its step-{run.step} evaluation and its base ({run.base_from}) "
                                 f"cannot be paired: {exc}") from None
            cells.setdefault((run.method, run.quality, d), []).append((run, diff, task_score(run.base, split, d)))
    rows = []
    for (method, quality, d), got in cells.items():
        delta, se, n = pool([diff for _, diff, _ in got])
        base = pool([b for _, _, b in got])[0]
        rows.append({"method": method, "quality": quality, "horizon": d, "baseline": base, "delta": delta,
                     "se": se, "tasks": n, "runs": ", ".join(f"{r.path.name}@{r.step}" for r, _, _ in got)})
    if not rows:
        raise UsageError(f"no run has {split} evaluations on any horizon ({', '.join(DIFFS)})")
    table = pd.DataFrame(rows)
    order = {q: i for i, q in enumerate(QUALITY_ORDER)}
    seen = list(pd.unique(table["quality"]))            # unknown labels after the paper's, in order of appearance
    qualities = sorted(seen, key=lambda q: (order.get(q, len(order)), seen.index(q)))
    table["quality"] = pd.Categorical(table["quality"], qualities, ordered=True)
    table["horizon"] = pd.Categorical(table["horizon"], list(DIFFS), ordered=True)
    return table.sort_values(["method", "quality", "horizon"], kind="stable").reset_index(drop=True)


def grids(table: pd.DataFrame) -> tuple[dict, dict, dict]:
    """Per method: region labels, deltas and standard errors as quality x horizon pivots over the
    rows and columns any method has (a cell no run measured is NaN)."""
    rows = [q for q in table["quality"].cat.categories if q in set(table["quality"])]
    cols = [d for d in DIFFS if d in set(table["horizon"])]
    maps, deltas, ses = {}, {}, {}
    for method, g in table.groupby("method", sort=False):
        flat = g.assign(quality=g["quality"].astype(str), horizon=g["horizon"].astype(str))
        labels = region_labels(flat, delta="delta")
        maps[method] = labels.reindex(index=rows, columns=cols)
        for out, col in ((deltas, "delta"), (ses, "se")):
            out[method] = flat.pivot(index="quality", columns="horizon", values=col).reindex(index=rows, columns=cols)
        for frame in (maps[method], deltas[method], ses[method]):
            frame.index.name, frame.columns.name = "quality", "horizon"
    return maps, deltas, ses


# ----------------------------------------------------------------------------- writing
def _cell(d: float, se: float) -> str:
    if d != d:
        return "–"
    return f"{d:+.1f}" + (f" ± {se:.1f}" if se == se else "")


def markdown(table: pd.DataFrame, maps: dict, runs: list[Run], split: str) -> str:
    lines = [f"# Region map: Δ{split} avg@8 after post-training (horizon x quality)", "",
             "Δ ± SE: the run's last evaluation minus its base, in avg@8 points, paired by task (runs in one cell "
             "pooled over their task pairs). Regions (the paper's rule, with noise): unnecessary if avg@8 before >= 90; "
             "effective if Δ >= +2 and Δ beyond 2 SE (a gain within task-to-task noise is not a gain); otherwise "
             "unsupported. \"beyond 2 SE\": whether |Δ| exceeds two standard errors.", ""]
    for method, lab in maps.items():
        g = table[table["method"] == method]
        lines += [f"**{method}**", "",
                  md_table(["quality", *lab.columns],
                           [[q, *[_cell(*_lookup(g, q, d)) + (f" ({lab.loc[q, d]})" if isinstance(lab.loc[q, d], str)
                                                             else "") for d in lab.columns]] for q in lab.index])]
    lines += ["**Every cell**", "",
              md_table(["method", "quality", "horizon", "avg@8 before", "Δavg@8", "± SE", "beyond 2 SE", "tasks",
                        "region", "runs@step"],
                       [[r.method, str(r.quality), str(r.horizon), _num(r.baseline), _num(r.delta, "+"), _num(r.se),
                         _beyond(r.delta, r.se), r.tasks, maps[r.method].loc[str(r.quality), str(r.horizon)], r.runs]
                        for r in table.itertuples()]),
              "**Base evaluations**", "",
              md_table(["run", "method", "quality", "base"], [[r.path.name, r.method, r.quality, r.base_from]
                                                               for r in runs])]
    return "\n".join(lines)


def _num(v: float, sign: str = "") -> str:
    return "–" if v != v else f"{v:{sign}.1f}"


def _beyond(d: float, se: float) -> str:
    """Whether the change is told from noise: |Δ| > 2 SE (the reproductions' verdict rule)."""
    return "–" if d != d or se != se else "yes" if abs(d) > 2 * se else "no"


def _lookup(g: pd.DataFrame, q, d) -> tuple[float, float]:
    hit = g[(g["quality"].astype(str) == q) & (g["horizon"].astype(str) == d)]
    return (float(hit["delta"].iloc[0]), float(hit["se"].iloc[0])) if len(hit) else (float("nan"), float("nan"))


def training_curves(runs: list[Run], key: str = "success") -> dict[str, dict[str, tuple[list, list]]]:
    """Each run's logged ``key`` per training step, one panel per (quality, horizons it trained on)
    and one line per method: where a cell's Δ comes from (a collapse on the way shows here)."""
    panels = {}
    for r in runs:
        trained = read_config(r.path).get("config", {}).get("difficulties") or "all"
        rows = [x for x in read_jsonl(r.path / "metrics.jsonl") if not x.get("eval") and x.get(key) is not None]
        lines = panels.setdefault((r.quality, trained), {})
        line = r.method if r.method not in lines else f"{r.method} ({r.path.name})"   # repeats of a cell: each its own
        lines[line] = ([x["step"] for x in rows], [x[key] for x in rows])
    rank, seen = {q: i for i, q in enumerate(QUALITY_ORDER)}, list(dict.fromkeys(q for q, _ in panels))

    def order(cell):                   # the map's order: the paper's qualities, then others as given; short to long
        q, d = cell
        return rank.get(q, len(rank)), seen.index(q), DIFFS.index(d) if d in DIFFS else len(DIFFS), d
    return {f"{q} / {d}": panels[q, d] for q, d in sorted(panels, key=order)}


def write(runs: list[Run], out: Path, split: str = "ID") -> list[Path]:
    table = measure(runs, split)
    maps, deltas, ses = grids(table)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_region_maps(maps, out / "region_map.png", deltas=deltas, ses=ses, unit=" pt",
                           title=f"Δ{split} avg@8 ± SE after post-training")
    curves = [plot_small_multiples(panels, out / "training_success.png", "step", "training success",
                                   ncols=min(3, len(panels)), title="Training success per step (the runs' own logs)")
              for panels in [training_curves(runs)] if any(x for lines in panels.values() for x, _ in lines.values())]
    md = out / "region_map.md"
    md.write_text(markdown(table, maps, runs, split))
    js = out / "region_map.json"
    js.write_text(json.dumps({"split": split, "regions": list(REGIONS),
                              "cells": [{**r, "quality": str(r["quality"]), "horizon": str(r["horizon"]),
                                         "region": maps[r["method"]].loc[str(r["quality"]), str(r["horizon"])],
                                         **{k: (None if r[k] != r[k] else r[k]) for k in ("delta", "se", "baseline")}}
                                        for r in table.to_dict("records")],
                              "runs": [{"run": str(r.path), "method": r.method, "quality": r.quality, "step": r.step,
                                        "base": r.base_from} for r in runs]}, indent=1))
    return [png, *curves, md, js]


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m analysis.region_map", description=__doc__.split("\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="post-training run folders")
    p.add_argument("--out", type=Path, required=True, help="folder for region_map.png / .md / .json")
    p.add_argument("--base", action="append", default=[], metavar="[RUN=]PATH",
                   help="the student's evaluation for runs without a step-0 one (RUN= for one run)")
    p.add_argument("--label", action="append", default=[], metavar="RUN=LABEL",
                   help="the quality row of a run (default: its student's corpus patterns)")
    p.add_argument("--split", default="ID", choices=["ID", "OOD"], help="evaluation split (default ID)")

    def go() -> int:
        args = p.parse_args(argv)
        prepare_output(args.out, exists_ok=True, what="--out folder")
        runs = load_runs(args.runs, args.base, args.label)
        print("\n".join(str(f) for f in write(runs, args.out, args.split)))
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
