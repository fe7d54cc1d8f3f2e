"""Planning evaluation: avg@K and pass@K per domain x difficulty x ID/OOD, and pattern frequencies.

Why this exists: it is the last stage of ``make pretrain`` and the yardstick of every
post-training method (SPEC section 5): K=8 samples per test task at temperature 0.4 with the
environment's step limit of 20, played by the batched rollout engine (`engine.rollout`).

    python -m engine.evaluate --run RUN_DIR [--data CORPUS_DIR] [--k 8] [--temperature 0.4]
        [--max-tasks-per-cell N] [--step-limit 20] [--batch-size 64] [--out DIR] [--device auto]
    python -m engine.evaluate --model CHECKPOINT_DIR --data CORPUS_DIR ...

A run folder of `pretrain.train` holds ``train_config.json`` (its ``data`` is the corpus),
``summary.json`` (its ``checkpoint`` is the final one) and ``checkpoints/step_*/`` (model and
tokenizer); without ``summary.json`` the newest checkpoint is used. ``--data`` overrides the
corpus. Results go to ``RUN_DIR/eval/`` (or ``--out``): ``results.csv`` and ``results.md`` (one
row per domain x split x difficulty, plus an ``all`` row per domain x split), ``summary.json``
and ``samples.jsonl`` (every episode: task, success, actions, pattern, text).

Scores are percentages: avg@K is the mean success over a task's K samples, pass@K whether any
of them succeeded, both averaged over the cell's tasks. Pattern frequencies are the share of
samples whose text `planning_gym.patterns.classify_trajectory` assigns to each pattern.
Bad input (missing run, corrupt checkpoint, unknown corpus) ends with one ``error:`` line on
stderr and exit status 2.
"""
from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Sequence

from planning_gym import constants as C
from planning_gym.cli import Parser, UsageError, prepare_output
from planning_gym.constants import DIFFICULTIES
from planning_gym.corpus import select_rows, task_key
from planning_gym.patterns import OTHERS, PATTERNS, classify_trajectory
from pretrain import rundir
from pretrain.checkpoint import load_model_and_tokenizer  # noqa: F401  (part of this module's API)

SPLITS = {"test_id": "ID", "test_ood": "OOD"}
PATTERN_COLUMNS = (*PATTERNS, OTHERS)


# ----- inputs --------------------------------------------------------------------------------------
def load_worlds(corpus_dir: Path) -> dict:
    """Every ``rules_*.json`` of a corpus as ``{(domain, recipe): World}``."""
    from planning_gym.corpus import CorpusError, read_worlds
    try:
        return read_worlds(corpus_dir)
    except CorpusError as exc:
        raise UsageError(str(exc)) from None


def load_rows(corpus_dir: Path, split: str) -> list[dict]:
    from planning_gym.corpus import CorpusError, read_split
    try:
        return read_split(corpus_dir, split)
    except CorpusError as exc:
        raise UsageError(str(exc)) from None


def task_for_row(worlds: dict, row: dict):
    from planning_gym.corpus import CorpusError, row_task
    try:
        return row_task(worlds, row)
    except CorpusError as exc:
        raise UsageError(str(exc)) from None


# ----- scoring -------------------------------------------------------------------------------------
STUCK_RUN = 4   # a failed episode whose last 4 actions are one action repeated is "stuck" in a loop


def is_stuck(actions: list[str], success: bool) -> bool:
    """Did the episode fail while repeating one action (the loop small models fall into)?"""
    return not success and len(actions) >= STUCK_RUN and len(set(actions[-STUCK_RUN:])) == 1


def score(outcomes: list[dict], k: int) -> list[dict]:
    """Table rows from per-sample outcomes.

    Each outcome: ``domain, split, difficulty, task`` (any hashable id), ``success`` (bool) and
    optionally ``pattern``, ``n_turns``, ``n_invalid``, ``stuck``. One row per (domain, split,
    difficulty) and one ``all`` row per (domain, split); avg@k / pass@k / stuck / pattern shares in percent.
    """
    by_task: dict[tuple, list[dict]] = {}
    for o in outcomes:
        by_task.setdefault((o["domain"], o["split"], o["difficulty"], o["task"]), []).append(o)
    cells: dict[tuple, list[list[dict]]] = {}
    for (domain, split, diff, _), samples in by_task.items():
        cells.setdefault((domain, split, diff), []).append(samples)
        if diff != "all":
            cells.setdefault((domain, split, "all"), []).append(samples)
    order = {d: i for i, d in enumerate((*DIFFICULTIES, "all"))}
    split_order = {s: i for i, s in enumerate(SPLITS.values())}
    rows = []
    for (domain, split, diff) in sorted(cells, key=lambda c: (c[0], split_order.get(c[1], 9), c[1], order.get(c[2], 8), c[2])):
        tasks = cells[(domain, split, diff)]
        flat = [o for samples in tasks for o in samples]
        row = {"domain": domain, "split": split, "difficulty": diff, "tasks": len(tasks), "samples": len(flat),
               f"avg@{k}": 100.0 * sum(sum(o["success"] for o in s) / len(s) for s in tasks) / len(tasks),
               f"pass@{k}": 100.0 * sum(any(o["success"] for o in s) for s in tasks) / len(tasks),
               "turns": sum(o.get("n_turns", 0) for o in flat) / len(flat),
               "invalid": sum(o.get("n_invalid", 0) for o in flat) / len(flat),
               "stuck": 100.0 * sum(bool(o.get("stuck")) for o in flat) / len(flat)}
        for p in PATTERN_COLUMNS:
            row[p] = 100.0 * sum(o.get("pattern") == p for o in flat) / len(flat)
        rows.append(row)
    return rows


def markdown(rows: list[dict], k: int, header: str = "", baselines: str = "") -> str:
    """The results table, then ``baselines`` (the same cells' baseline scores, if given), then patterns."""
    lines = [header] if header else []
    lines += [f"| domain | split | difficulty | tasks | avg@{k} | pass@{k} | turns | invalid / episode | stuck % |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['domain']} | {r['split']} | {r['difficulty']} | {r['tasks']} | {r[f'avg@{k}']:.2f} "
                     f"| {r[f'pass@{k}']:.2f} | {r['turns']:.2f} | {r['invalid']:.2f} | {r['stuck']:.1f} |")
    if baselines:
        lines += ["", baselines.rstrip("\n")]
    lines += ["", "Planning patterns of the sampled outputs (% of samples):", "",
              "| domain | split | difficulty | " + " | ".join(PATTERN_COLUMNS) + " |",
              "|---|---|---|" + "---|" * len(PATTERN_COLUMNS)]
    for r in rows:
        lines.append(f"| {r['domain']} | {r['split']} | {r['difficulty']} | "
                     + " | ".join(f"{r[p]:.1f}" for p in PATTERN_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


# ----- the evaluation --------------------------------------------------------------------------------
def evaluate(model, tokenizer, corpus_dir, *, k: int = C.EVAL_K, temperature: float = C.EVAL_TEMPERATURE,
             top_p: float = 1.0, step_limit: int = C.STEP_LIMIT, max_tasks_per_cell: int | None = None, batch_size: int = 64,
             max_turn_tokens: int = 192, max_total_tokens: int | None = None, seed: int = 0,
             splits: Sequence[str] = ("ID", "OOD"), difficulties: Sequence[str] | None = None, out_dir=None,
             progress: bool = True, backend: str = "auto") -> dict:
    """Evaluate ``model`` on the corpus's test_id / test_ood tasks (``splits``: the ones to run,
    e.g. only the target split ``("ID",)``, at half the cost; ``difficulties``: only these bins,
    default all); ``backend``: the rollout backend (`engine.backend.make_policy`; ``auto`` = the fastest
    correct one); write files to ``out_dir`` when given; return the summary (also ``summary.json``)."""
    from tqdm import tqdm

    from engine.backend import make_policy
    from engine.rollout import RolloutConfig, rollout
    from pretrain.tokenizer import special_ids

    if k < 1:
        raise UsageError("--k must be at least 1")
    unknown = sorted(set(splits) - set(SPLITS.values()))
    if unknown or not splits:
        raise UsageError(f"unknown split(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(SPLITS.values())}")
    if difficulties is not None:
        bad = sorted(set(difficulties) - set(DIFFICULTIES))
        if bad or not difficulties:
            raise UsageError(f"unknown difficulty {', '.join(bad) or '(none given)'}; choose from {', '.join(DIFFICULTIES)}")
        difficulties = [d for d in DIFFICULTIES if d in difficulties]
        difficulties = None if len(difficulties) == len(DIFFICULTIES) else difficulties
    corpus_dir = Path(corpus_dir)
    worlds = load_worlds(corpus_dir)
    files = [split for split, name in SPLITS.items() if name in splits]
    rows = []
    for split in files:
        if (corpus_dir / f"{split}.jsonl").is_file():
            rows += [(split, r) for r in select_rows(load_rows(corpus_dir, split), max_tasks_per_cell, difficulties)]
    if not rows:
        raise UsageError(f"corpus {corpus_dir} has no {' or '.join(f'{f}.jsonl' for f in files)} rows")
    tasks = [task_for_row(worlds, r) for _, r in rows]
    limit = max_total_tokens or min(4096, getattr(model.config, "max_position_embeddings", 4096))
    cfg = RolloutConfig(temperature=temperature, top_p=top_p, max_turn_tokens=max_turn_tokens, step_limit=step_limit,
                        max_total_tokens=limit, batch_size=batch_size)
    policy = make_policy(model, backend, special_ids(tokenizer).pad, max_num_seqs=batch_size)
    bar = tqdm(total=len(tasks) * k, desc="evaluate", unit="episode", disable=not progress, file=sys.stderr,
               dynamic_ncols=True, mininterval=1.0)
    ro = rollout(policy, tokenizer, [t for t in tasks for _ in range(k)], cfg, seed=seed, progress=bar.update)
    bar.close()
    outcomes = []
    for j, ep in enumerate(ro.episodes):
        split, row = rows[j // k]
        outcomes.append({"domain": row["domain"], "split": SPLITS[split], "difficulty": row["difficulty"],
                         "task": row["id"], "task_key": task_key(row), "sample": j % k, "success": ep.success,
                         "n_turns": ep.n_turns,
                         "n_invalid": ep.n_invalid, "stuck": is_stuck(ep.actions, ep.success),
                         "pattern": classify_trajectory(ep.text), "horizon": row["horizon"],
                         "actions": ep.actions, "stop_reason": ep.stop_reason, "text": ep.text})
    table = score(outcomes, k)
    # Knowledge-free and recall baselines on exactly these tasks and step limit, printed beside the model.
    from planning_gym.baselines import baseline_rows, comparison_markdown
    try:
        base_rows = baseline_rows(corpus_dir, worlds, [(SPLITS[s], r) for s, r in rows], step_limit=step_limit,
                                  k=k, seed=seed)
        base_md = comparison_markdown(table, base_rows, k)
    except Exception as exc:    # never lose a model's evaluation to a baseline failure; say so instead
        base_rows, base_md = None, f"Baselines could not be computed: {type(exc).__name__}: {exc}\n"
    overall = {r["split"]: {f"avg@{k}": r[f"avg@{k}"], f"pass@{k}": r[f"pass@{k}"], "stuck": r["stuck"],
                            "tasks": r["tasks"]}
               for r in score([{**o, "domain": "*", "difficulty": "all"} for o in outcomes], k)}
    summary = {"corpus": str(corpus_dir), "k": k, "temperature": temperature, "top_p": top_p, "step_limit": step_limit,
               "max_turn_tokens": max_turn_tokens, "max_total_tokens": limit, "seed": seed,
               "max_tasks_per_cell": max_tasks_per_cell, "splits": list(splits), "difficulties": difficulties,
               "tasks": len(tasks), "episodes": len(outcomes), "seconds": ro.seconds,
               "backend": type(policy).__name__,
               "generated_tokens": ro.generated_tokens, "overall": overall, "table": table, "baselines": base_rows}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "results.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            for r in table:
                writer.writerow({key: round(v, 4) if isinstance(v, float) else v for key, v in r.items()})
        head = (f"# Evaluation: {len(tasks)} tasks x {k} samples, temperature {temperature}, "
                f"step limit {step_limit}\n\ncorpus `{corpus_dir}`\n")
        (out / "results.md").write_text(markdown(table, k, head, base_md))
        with open(out / "samples.jsonl", "w") as f:
            for o in outcomes:
                f.write(json.dumps(o) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=1))   # last: it marks a finished evaluation
    return summary


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m engine.evaluate", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", help="a pretrain run folder")
    src.add_argument("--model", help="a checkpoint folder (model + tokenizer); needs --data")
    p.add_argument("--data", help="corpus folder (default: the run's training corpus)")
    p.add_argument("--k", type=int, default=8)
    p.add_argument("--temperature", type=float, default=0.4)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--step-limit", type=int, default=20)
    p.add_argument("--max-tasks-per-cell", type=int, help="first N tasks per domain x difficulty of each split")
    p.add_argument("--max-turn-tokens", type=int, default=192)
    p.add_argument("--max-total-tokens", type=int, help="default: min(4096, the model's max positions)")
    p.add_argument("--batch-size", type=int, default=64, help="episodes in flight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--splits", default="ID,OOD", help="comma-separated test splits to run (ID, OOD)")
    p.add_argument("--difficulties", help="comma-separated bins to run (short, mid, long; default all)")
    p.add_argument("--out", help="output folder (default: RUN/eval or MODEL/eval, replaced on a rerun)")
    p.add_argument("--force", action="store_true", help="replace the results in a non-empty --out")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--backend", default="auto", help="rollout backend: auto (fastest correct), lean, hf, vllm")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    try:
        args = p.parse_args(argv)
        import torch
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        for name in ("k", "step_limit", "max_turn_tokens", "batch_size", "max_tasks_per_cell", "max_total_tokens"):
            if getattr(args, name) is not None and getattr(args, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if not 0 <= args.temperature < float("inf") or not 0 < args.top_p <= 1:    # NaN fails both
            raise UsageError("need a finite --temperature >= 0 and 0 < --top-p <= 1")
        if args.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda given but no CUDA device is available")
        from engine.backend import BACKENDS
        if args.backend not in BACKENDS:
            raise UsageError(f"unknown --backend {args.backend!r}; choose from {', '.join(BACKENDS)}")
        if args.backend == "vllm":
            from engine.vllm_backend import VLLMUnavailable, vllm_available
            if not vllm_available():
                raise VLLMUnavailable("--backend vllm needs the vllm extra: run `make vllm` and use .venv-vllm/bin/python")
        if args.model and rundir.kind(args.model) in ("pretrain", "posttrain"):
            raise UsageError(f"{args.model} is a run folder: pass it as --run (--model takes a checkpoint folder)")
        if args.model and not args.data:
            raise UsageError("--model needs --data (a corpus folder)")
        if args.out:     # checked before the evaluation runs, not after
            if rundir.kind(args.out) in ("pretrain", "posttrain"):
                raise UsageError(f"--out {args.out} is a run folder; its summary.json would be overwritten")
            prepare_output(args.out, exists_ok=args.force, what="--out")
        model, tokenizer, data = load_model_and_tokenizer(
            Path(args.run) if args.run else None, Path(args.model) if args.model else None)
        corpus = Path(args.data) if args.data else data
        if corpus is None:
            raise UsageError(f"run {args.run} does not name its corpus (no train_config.json); pass --data")
        cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        model.to("cuda" if cuda else "cpu")
        out = Path(args.out) if args.out else Path(args.run or args.model) / "eval"
        summary = evaluate(model, tokenizer, corpus, k=args.k, temperature=args.temperature, top_p=args.top_p,
                           step_limit=args.step_limit, max_tasks_per_cell=args.max_tasks_per_cell,
                           batch_size=args.batch_size, max_turn_tokens=args.max_turn_tokens,
                           max_total_tokens=args.max_total_tokens, seed=args.seed,
                           splits=tuple(x.strip() for x in args.splits.split(",") if x.strip()), out_dir=out,
                           difficulties=None if args.difficulties is None
                           else tuple(x.strip() for x in args.difficulties.split(",") if x.strip()),
                           progress=not args.quiet, backend=args.backend)
    except (UsageError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    k = summary["k"]
    for split, s in summary["overall"].items():
        print(f"{split}: avg@{k} {s[f'avg@{k}']:.2f}  pass@{k} {s[f'pass@{k}']:.2f}")
    print(f"wrote {out}/results.md, results.csv, summary.json, samples.jsonl "
          f"({summary['episodes']} episodes in {summary['seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
