"""One command per table or figure of the two papers: ``python -m reproduce TABLE`` (`make reproduce`).

    python -m reproduce fig3-4 --scale tiny      # one table (builds what it needs)
    python -m reproduce all --scale tiny         # every table, in dependency order
    python -m reproduce table4 --scale tiny --seeds 3   # three seeds, mean ± SE
    python -m reproduce all --scale tiny --jobs 2       # two tables at a time, one process each
    python -m reproduce fig7 --scale small --seeds 3 --jobs 3   # one table, its seeds in parallel
    python -m reproduce fig7 --scale small --seed 2     # only seed 2 (another machine's share)
    python -m reproduce fig7,table4,mopd --scale small --workers 2   # these tables, in this order
    python -m reproduce fig7 --scale small --seeds 3 --claims   # seeds 1, 2: only the claims' cell
    python -m reproduce --list

Each table writes ``runs/reproduce/<scale>/<table>/`` with ``table.md`` (our numbers beside the
paper's, SPEC §8), ``results.json``, ``config.json`` and PNG figures.  The models, post-training
runs and evaluations behind the tables are shared artifacts (`reproduce.store`), so `all` builds
each once and a rerun only evaluates what is missing.  Budgets per scale are in
`reproduce.store.BUDGETS`; tiny is a smoke test of the whole pipeline, not a result.

With ``--seeds N`` every model is trained and sampled N times (seed s lives under
``<root>/<scale>-seed<s>``, seed 0 under ``<root>/<scale>``; the corpora are shared), each seed
writes its own table, and ``<root>/<scale>/<table>/seeds.md`` gives every number as mean ± SE over the seeds.
For one table, ``--jobs J`` trains up to J seeds at once (one process per seed, ``--seed s``), then
merges them; seeds share only the corpora, so they never wait on each other's artifacts.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

from analysis.report import Report, json_safe, merge_seeds
from pretrain import rundir
from reproduce import merge, pretraining, shaping, turnopd
from reproduce.store import ReproductionError, Store

# id -> (what it reproduces, function); the order is the dependency order of `all`.
REPRODUCTIONS = {
    "fig3-4": ("Figs. 3-4: world-model CoT vs direct actions", pretraining.world_model_vs_direct),
    "table1": ("Table 1 / Fig. 5: horizon mixtures of the pre-training data", pretraining.horizon_mixtures),
    "fig6": ("Fig. 6: optimal vs suboptimal pre-training trajectories", pretraining.data_quality),
    "fig7": ("Fig. 7 / Table 3: where GRPO and OPD help (horizon x quality)", shaping.region_map),
    "fig9-10": ("Figs. 9-10: update directions of GRPO vs OPD (SVD subspaces)", shaping.update_directions),
    "table4": ("Table 4 / Figs. 11-15: matched vs crossed-recipe teacher", shaping.knowledge_mismatch),
    "mopd": ("Tables 6-7 / Figs. 17-21: cascaded multi-teacher OPD in three regimes", merge.mopd_regimes),
    "fig22": ("Fig. 22: parameter dynamics of MOPD", merge.parameter_dynamics),
    "turnopd": ("TurnOPD main table: OPD vs TCOD-F2B vs TurnOPD at equal steps and equal time",
                turnopd.main_table),
    "turnopd-ablation": ("TurnOPD ablation: adaptive depth and turn-blended loss", turnopd.ablation),
}


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except OSError:
        return None


def _tasks_per_cell(store: Store) -> str:
    n = store.budget["eval_tasks_per_cell"]
    return "all tasks" if not n else f"{n} task{'s' if n != 1 else ''}"


def budgets_line(runs) -> str:
    """The post-training budgets the report's runs were trained with, one entry per distinct
    (method, lr, steps, tasks x samples): methods may train at different budgets (planning_gym.scales)."""
    seen = {}
    for run in dict.fromkeys(map(Path, runs)):      # a run several regimes share counts once
        record = rundir.read_train_config(run) if run.is_dir() else None
        cfg = (record or {}).get("config", {})
        if "method" in cfg and "lr" in cfg:
            key = (cfg["method"].upper(), cfg["lr"], cfg["steps"], cfg["tasks_per_step"], cfg["group_size"])
            seen[key] = seen.get(key, 0) + 1
    if not seen:
        return ""
    parts = [f"{m} lr {lr:g} x {steps} steps of {tasks} tasks x {group} samples ({n} run{'s' if n != 1 else ''})"
             for (m, lr, steps, tasks, group), n in seen.items()]
    return "Post-training: " + "; ".join(parts) + "."


def precision_line(runs) -> str:
    """At what precision the report's runs trained: logged steps that autocast to bf16 (a step's
    ``bf16``; steps logged before the setting existed ran fp32 on this project's CPUs), per kind."""
    from planning_gym.cli import read_jsonl
    counts = {}
    for run in dict.fromkeys(map(rundir.run_of, runs)):
        kind = "pre-training" if run.parent.name == "pretrain" else "post-training"
        rows = [r for r in read_jsonl(run / "metrics.jsonl") if "loss" in r and not r.get("eval")]
        mixed = counts.setdefault(kind, {"bf16": 0, "steps": 0, "runs": []})
        n = sum(bool(r.get("bf16")) for r in rows)
        mixed["bf16"], mixed["steps"] = mixed["bf16"] + n, mixed["steps"] + len(rows)
        if n:
            mixed["runs"].append(f"{run.name} {n} of {len(rows)}")
    parts = [f"{kind} {'fp32' if not c['bf16'] else 'bf16 autocast' if c['bf16'] == c['steps'] else 'mixed'}"
             + (f" ({c['bf16']} of {c['steps']} logged steps in bf16"
                + (f"; {', '.join(c['runs'])}" if c["runs"] else "") + ")" if 0 < c["bf16"] < c["steps"] else "")
             for kind, c in counts.items() if c["steps"]]
    return ("Precision of training: " + "; ".join(parts) + "; rollouts and evaluations fp32.") if parts else ""


def logged_wall(run: Path) -> float:
    """Seconds a run trained, from its own log: a post-training run's ``train_wall_s``; a
    pre-training run's tokens between logged rows over that interval's ``tok_per_s``."""
    from planning_gym.cli import read_jsonl
    summary = rundir.read_summary(run) or {}
    if "train_wall_s" in summary:
        return float(summary["train_wall_s"])
    seen, wall = 0, 0.0
    for row in read_jsonl(run / "metrics.jsonl"):
        if row.get("tok_per_s"):
            wall += (row["tokens_seen"] - seen) / row["tok_per_s"]
            seen = row["tokens_seen"]
    return wall


def artifact_walls(runs, evaluations: dict[str, float]) -> dict[str, float]:
    """Seconds of wall-clock the report's artifacts logged when they were built (here or on an
    earlier day), per kind; each run and evaluation counted once however often the table reads it."""
    walls = {"pre-training": 0.0, "post-training": 0.0}
    for run in dict.fromkeys(map(rundir.run_of, map(Path, runs))):
        if (run / "metrics.jsonl").is_file():
            walls["pre-training" if run.parent.name == "pretrain" else "post-training"] += logged_wall(run)
    walls["evaluation"] = sum(evaluations.values())
    return walls


def compute_line(walls: dict[str, float], seconds: float) -> str:
    """This command's time beside its artifacts' (a table assembled from carried artifacts takes
    minutes, the artifacts took hours)."""
    parts = ", ".join(f"{kind} {wall / 3600:.1f} h" for kind, wall in walls.items() if wall)
    return (f"This command took {seconds / 60:.1f} min; its artifacts logged {parts} of wall-clock when they "
            "were built (one process each)." if parts else f"This command took {seconds / 60:.1f} min.")


def write(report: Report, store: Store, table_id: str, seconds: float, seeds: list[Store] | None = None) -> Path:
    """``table.md``, ``results.json`` and ``config.json`` into the table's folder; for a report
    merged over the stores ``seeds``: ``seeds.md``, ``seeds_results.json`` and ``seeds_config.json``."""
    out = store.out(table_id)
    stem, prefix = ("seeds", "seeds_") if seeds else ("table", "")
    budgets = " ".join(filter(None, (budgets_line(report.runs), precision_line(report.runs))))
    walls = artifact_walls(report.runs, {k: v for st in (seeds or [store]) for k, v in st.evaluations_read.items()})
    head = [f"# {report.title}", "",
            f"Scale `{store.scale}`; evaluation K=8 at temperature 0.4, step limit 20, "
            f"{_tasks_per_cell(store)} per (split, difficulty) cell. "
            + compute_line(walls, seconds) + " "
            "`paper` columns are the papers' numbers where they give them (SPEC §8); `–` where they do not."
            + (f" {budgets}" if budgets else ""), ""]
    body = [s + "\n" for s in report.sections]
    if report.notes:
        body.append("**Notes**\n\n" + "\n".join(f"- {n}" for n in report.notes) + "\n")
    if report.figures:
        body.append(f"**Figures**{' (seed 0)' if seeds else ''}: "
                    + ", ".join(f"[{Path(f).name}]({Path(f).name})" for f in report.figures) + "\n")
    (out / f"{stem}.md").write_text("\n".join(head + body))
    (out / f"{prefix}results.json").write_text(json.dumps(json_safe(report.results), indent=1, default=str))
    (out / f"{prefix}config.json").write_text(json.dumps(
        {"table": table_id, "title": report.title, "commit": git_commit(),
         **({"stores": [s.describe() for s in seeds]} if seeds else {"store": store.describe()}),
         "seconds": round(seconds, 1), "artifact_wall_s": {k: round(v, 1) for k, v in walls.items()},
         "runs": [str(r) for r in report.runs]}, indent=1, default=str))
    return out


def reproduce(table_id: str, store: Store) -> Report:
    title, fn = REPRODUCTIONS[table_id]
    t0 = time.time()
    report = fn(store)
    report.title = report.title or title
    out = write(report, store, table_id, time.time() - t0)
    store.log(f"[reproduce] {table_id}: {out / 'table.md'} ({(time.time() - t0) / 60:.1f} min)")
    return report


def reproduce_seeds(table_id: str, stores: list[Store], rewrite: bool = True) -> Path:
    """The table once per store (seed); with more than one, ``seeds.md`` in the first's folder.
    ``rewrite=False``: each seed's own table was just written by its own process; only merge."""
    t0 = time.time()
    if rewrite:
        reports = [reproduce(table_id, store) for store in stores]
    else:
        reports = [REPRODUCTIONS[table_id][1](store) for store in stores]
        for report in reports:
            report.title = report.title or REPRODUCTIONS[table_id][0]
    if len(stores) == 1:
        return stores[0].out(table_id) / "table.md"
    merged = merge_seeds(reports, [s.seed for s in stores])
    out = write(merged, stores[0], table_id, time.time() - t0, seeds=stores)
    stores[0].log(f"[reproduce] {table_id}: {out / 'seeds.md'} (mean ± SE over {len(stores)} seeds)")
    return out / "seeds.md"


def run_tables(todo: list[str], jobs: int, command: Callable[[str], list[str]], log_dir: Callable[[str], Path],
               say=print) -> list[str]:
    """Run each table's ``command`` as its own process, at most ``jobs`` at once, started in the
    order of ``todo`` (the dependency order).  Tables that need one artifact are safe together: the
    store builds it under a lock and the other process waits, then reuses it.  Each process writes
    ``log_dir(table)/reproduce.log``; returns the tables whose process failed."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))   # cores shared, not oversubscribed

    def one(table_id: str) -> tuple[str, int, float]:
        log = Path(log_dir(table_id)) / "reproduce.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        with open(log, "w") as f:
            rc = subprocess.run(command(table_id), stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        return table_id, rc, time.time() - t0

    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:     # submitted in order, so started in order
        for done in as_completed([pool.submit(one, t) for t in todo]):
            table_id, rc, seconds = done.result()
            say(f"[reproduce] {table_id}: {'done' if rc == 0 else f'FAILED (exit {rc})'} in {seconds / 60:.1f} min, "
                f"log {Path(log_dir(table_id)) / 'reproduce.log'}")
            if rc:
                failed.append(table_id)
    return failed


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ReproductionError(message)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m reproduce", description=__doc__.split("\n")[0])
    p.add_argument("table", nargs="?", help=f"one of {', '.join(REPRODUCTIONS)}, a comma list of them (built in "
                                            "that order), or all")
    p.add_argument("--scale", default=None, help="tiny | small | paper (default: paper with CUDA, else small)")
    p.add_argument("--root", default="runs/reproduce", help="artifact and output folder")
    p.add_argument("--data-dir", default="data")
    p.add_argument("--seeds", type=int, default=1, help="train and sample every model with seeds 0..N-1 (default 1)")
    p.add_argument("--seed", type=int, default=None, help="only this seed (its own table, no merge)")
    p.add_argument("--jobs", type=int, default=1,
                   help="with all: run this many tables at once, one process each (default 1)")
    p.add_argument("--workers", type=int, default=1,
                   help="build a table's pre-trainings and evaluations in this many processes first (default 1)")
    p.add_argument("--only", default="", metavar="GLOBS",
                   help="build only the table's units whose key matches one of these comma-separated globs "
                        "(e.g. 'fig7-grpo-*,*@student'), with --workers processes, and write no table")
    p.add_argument("--claims", action="store_true",
                   help="seeds after 0 build only what the scoreboard's claims read (Fig. 7: its 4opt8sub/long "
                        "cell; Figs. 3-4: no Fig. 4 curve; MOPD: no Type II; TurnOPD: no TCOD-F2B)")
    p.add_argument("--list", action="store_true", help="list the reproductions and exit")
    try:
        args = p.parse_args(argv)
        if args.list or not args.table:
            for key, (title, _) in REPRODUCTIONS.items():
                print(f"{key:18s} {title}")
            return 0
        todo = list(REPRODUCTIONS) if args.table == "all" else \
            list(dict.fromkeys(t.strip() for t in args.table.split(",") if t.strip()))
        unknown = [t for t in todo if t not in REPRODUCTIONS] or ([] if todo else [args.table])
        if unknown:
            raise ReproductionError(f"unknown table {unknown[0]!r} (choose one of {', '.join(REPRODUCTIONS)}, "
                                    "a comma list of them, or all alone)")
        from planning_gym.config import resolve_scale
        scale = resolve_scale(args.scale)
        if args.seeds < 1:
            raise ReproductionError(f"--seeds must be at least 1, not {args.seeds}")
        if args.jobs < 1:
            raise ReproductionError(f"--jobs must be at least 1, not {args.jobs}")
        if args.workers < 1:
            raise ReproductionError(f"--workers must be at least 1, not {args.workers}")
        if args.seed is not None and (args.seed < 0 or args.seeds != 1):
            raise ReproductionError("--seed S runs one seed (S >= 0); it cannot be combined with --seeds")
        if args.only and (len(todo) > 1 or args.jobs > 1):
            raise ReproductionError("--only builds part of one table: name the table, without --jobs")
        seeds = [args.seed] if args.seed is not None else list(range(args.seeds))
        if args.claims and not any(seeds):
            raise ReproductionError("--claims narrows the seeds after 0: give --seeds N (N > 1) or --seed S (S > 0)")
        stores = [Store(scale, Path(args.root), Path(args.data_dir), seed=s, claims_only=args.claims and s > 0)
                  for s in seeds]
        t0 = time.time()
        if args.jobs > 1 and len(todo) == 1 and len(stores) > 1:     # one table: its seeds side by side
            same = ["--scale", scale, "--root", args.root, "--data-dir", args.data_dir, "--workers", str(args.workers)]
            by_seed = {str(s.seed): s for s in stores}
            failed = run_tables(list(by_seed), args.jobs,
                                lambda s: [sys.executable, "-m", "reproduce", todo[0], *same, "--seed", s,
                                           *(["--claims"] if by_seed[s].claims_only else [])],
                                lambda s: by_seed[s].out(todo[0]))
            if failed:
                print(f"error: seed(s) {', '.join(failed)} of {todo[0]} failed (see their reproduce.log)", file=sys.stderr)
                return 1
            reproduce_seeds(todo[0], stores, rewrite=False)    # every artifact is built: read and merge
        elif args.jobs > 1 and len(todo) > 1:
            same = ["--scale", scale, "--root", args.root, "--data-dir", args.data_dir, "--workers", str(args.workers),
                    *(["--claims"] if args.claims else []),
                    *(["--seed", str(args.seed)] if args.seed is not None else ["--seeds", str(args.seeds)])]
            failed = run_tables(todo, args.jobs, lambda t: [sys.executable, "-m", "reproduce", t, *same],
                                stores[0].out)
            if failed:
                print(f"error: {', '.join(failed)} failed (see their reproduce.log)", file=sys.stderr)
                return 1
        else:
            for table_id in todo:
                if args.workers > 1 or args.only:
                    from reproduce.workers import run_workers
                    for store in stores:
                        run_workers(table_id, store, args.workers, say=store.log, only=args.only)
                if not args.only:
                    reproduce_seeds(table_id, stores)
        if len(todo) > 1:
            print(f"reproduced {len(todo)} tables at scale {scale} ({args.seeds} seed(s)) in "
                  f"{(time.time() - t0) / 60:.1f} min under {stores[0].home}")
    except ReproductionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a user mistake deeper down (bad corpus, corrupt checkpoint) has its own type
        from planning_gym.config import ConfigError
        from pretrain.config import UsageError
        if isinstance(e, (UsageError, ConfigError)):
            print(f"error: {e}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
