"""The post-training budget sweep: which lr / steps / KL / entropy settings do no harm at a scale.

Why this exists: at the old `small` budget every post-training run *lowered* avg@8, even OPD from
the student's own final model; the optimiser, not the method, decided the result. A budget is
fit for the reproductions only when, on the same tasks and sampling seeds,

* ``self``: OPD with teacher = student moves avg@8 by less than two standard errors (the optimiser
  alone does no harm),
* ``opd``: OPD from a stronger teacher gains by more than two standard errors,
* ``grpo``: GRPO on a student with non-zero success gains by more than two standard errors;
* ``turnopd`` (optional): TurnOPD from the same teacher -- depth control and the turn blend, the
  TurnOPD paper's remedy for deep turns where the teacher's correction decays (beside ``opd``).

Every arm x grid point is one ordinary post-training run under ``--out`` (checkpointed every 5
steps and resumed, so the sweep continues where a killed or earlier session left it); the
student's own evaluation with the same settings is computed once (``base/``). Differences are
paired by task (`analysis.measures.paired_difference`) over the evaluation's tasks.

    python -m reproduce.budget_sweep --student runs/pretrain-fa-small --teacher runs/teacher-fa-small \\
        --out runs/sweep-small [--lrs 1e-5,5e-5] [--steps 20] [--kl 0] [--entropy 0] [--arms self,opd,grpo]
        [--set eval_tasks_per_cell=16] [--report]       # --report: only tabulate what has finished

Writes ``OUT/sweep.md`` and ``OUT/sweep.json``.  Exit status 2 with one ``error:`` line on bad input.
"""
from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
from pathlib import Path

from analysis.measures import paired_difference
from planning_gym.cli import Parser
from pretrain import rundir
from pretrain.config import UsageError

ARMS = {"self": "opd", "opd": "opd", "turnopd": "turnopd", "grpo": "grpo"}   # arm -> method
DISTILLED = ("opd", "turnopd")       # arms that learn from --teacher
SPLITS = ("ID", "OOD")


def floats(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--{name} must be a comma list of numbers, not {text!r}") from None
    if not values or any(not v >= 0 or v == float("inf") for v in values):
        raise UsageError(f"--{name} needs finite values >= 0")
    return values


def grid(args) -> list[dict]:
    keys = ("lr", "steps", "kl_coef", "entropy_coef")
    values = (args.lrs, [int(s) for s in args.steps], args.kl, args.entropy)
    return [dict(zip(keys, point)) for point in itertools.product(*values)]


def run_name(arm: str, point: dict) -> str:
    return f"{arm}-lr{point['lr']:g}-steps{point['steps']}-kl{point['kl_coef']:g}-ent{point['entropy_coef']:g}"


RUN_NAME = re.compile(r"(?P<arm>[a-z]+)-lr(?P<lr>[^-]+(?:-\d+)?)-steps(?P<steps>\d+)-kl(?P<kl_coef>[^-]+(?:-\d+)?)"
                      r"-ent(?P<entropy_coef>.+)")


def parse_run_name(name: str) -> tuple[str, dict] | None:
    """``run_name``'s inverse: (arm, point), or None for a folder the sweep did not name."""
    m = RUN_NAME.fullmatch(name)
    if m is None or m["arm"] not in ARMS:
        return None
    try:
        point = {k: float(m[k]) for k in ("lr", "kl_coef", "entropy_coef")}
    except ValueError:
        return None
    return m["arm"], {"lr": point["lr"], "steps": int(m["steps"]), "kl_coef": point["kl_coef"],
                      "entropy_coef": point["entropy_coef"]}


def sweep_runs(out: Path) -> list[tuple[str, dict, Path]]:
    """Every arm run under ``out``, in table order (arm, then lr, steps, KL, entropy)."""
    runs = [(*parsed, d) for d in out.iterdir() if d.is_dir() and (parsed := parse_run_name(d.name))]
    order = list(ARMS)
    return sorted(runs, key=lambda r: (order.index(r[0]), r[1]["lr"], r[1]["steps"], r[1]["kl_coef"],
                                       r[1]["entropy_coef"]))


def samples(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines() if line.strip()]


def final_eval_dir(run: Path) -> Path | None:
    """The run's last evaluation folder once the run has finished (``summary.json`` written)."""
    if not rundir.is_finished(run):
        return None
    evals = sorted((run / rundir.EVAL).glob("step_*/samples.jsonl"))
    return evals[-1].parent if evals else None


def base_evaluation(model_run: Path, out: Path, cfg, name: str = "base", tasks_of: Path | None = None) -> Path:
    """A model's evaluation with exactly the settings a post-training run's evaluation uses: the
    student's (``base/``, what every arm is paired against) and the teacher's (``teacher/``, the
    ceiling OPD is distilling towards: a gain is only possible where the teacher is ahead)."""
    from engine.evaluate import evaluate, load_model_and_tokenizer
    from pretrain.checkpoint import run_corpus

    folder = out / name
    if (folder / "samples.jsonl").is_file():
        return folder
    model, tokenizer, data = load_model_and_tokenizer(model_run)
    if tasks_of is not None:                 # the teacher plays the student's tasks
        data = run_corpus(tasks_of)
    evaluate(model, tokenizer, data, k=cfg.eval_k, max_tasks_per_cell=cfg.eval_tasks_per_cell, seed=cfg.seed,
             step_limit=cfg.step_limit, max_turn_tokens=cfg.max_turn_tokens, splits=cfg.eval_split_list,
             difficulties=cfg.eval_difficulty_list, out_dir=folder, backend=cfg.backend)
    return folder


def train_arm(arm: str, point: dict, args, out: Path) -> Path:
    from posttrain.train import run as posttrain
    from pretrain.checkpoint import latest_checkpoint

    run = out / run_name(arm, point)
    if final_eval_dir(run) is not None:
        return run
    if latest_checkpoint(run) is None and (shorter := shorter_run(arm, point, out)) is not None:
        shutil.rmtree(run, ignore_errors=True)
        shutil.copytree(shorter, run, ignore=shutil.ignore_patterns(rundir.SUMMARY))
    sets = [f"{k}={v}" for k, v in point.items()] + ["ckpt_every=5", "eval_every=0"] + args.set
    argv = ["--out", str(run), "--scale", args.scale, *sum((["--set", s] for s in sets), [])]
    if latest_checkpoint(run) is not None:
        argv += ["--resume"]
    else:
        shutil.rmtree(run, ignore_errors=True)          # a run killed before its first checkpoint starts over
        teacher = args.student if arm == "self" else args.teacher
        argv += ["--method", ARMS[arm], "--student", str(args.student)]
        if ARMS[arm] != "grpo":
            argv += ["--teacher", str(teacher)]
    posttrain(argv)
    return run


def shorter_run(arm: str, point: dict, out: Path) -> Path | None:
    """The longest finished run of the same arm and settings with fewer steps. The learning rate
    is constant, so a longer run continues it (12 steps, then 24 more, is the 36-step run) and keeps
    its evaluation as a point on the way."""
    same = [(p["steps"], d) for a, p, d in sweep_runs(out)
            if a == arm and p["steps"] < point["steps"] and final_eval_dir(d) is not None
            and all(p[k] == point[k] for k in ("lr", "kl_coef", "entropy_coef"))]
    return max(same)[1] if same else None


def report(out: Path) -> list[dict]:
    """The teacher's reference row (when evaluated), then one row per finished run in ``out`` (this
    call's grid and every earlier one), each paired against the student's evaluation; also written
    to ``sweep.json`` and ``sweep.md``."""
    rows = reference_rows(out) + arm_rows(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(rows, indent=1))
    (out / "sweep.md").write_text(markdown(rows))
    return rows


def arm_rows(out: Path) -> list[dict]:
    base = out / "base"
    if not (base / "samples.jsonl").is_file():
        return []
    before = samples(base)
    return [paired_row({"arm": arm, **point}, samples(final), before) for arm, point, run in sweep_runs(out)
            if (final := final_eval_dir(run)) is not None]


def paired_row(row: dict, after: list[dict], before: list[dict]) -> dict:
    """``row`` with, per split the evaluations hold, ``after`` minus ``before`` paired by task: the
    success rate, and where the failures went (episodes stuck repeating one action, in points;
    invalid actions per episode)."""
    for split in SPLITS:
        if any(s["split"] == split for s in before):
            mean, se, n = paired_difference(after, before, split)
            row[split] = {"delta": mean, "se": se, "tasks": n}
            for field in ("stuck", "n_invalid"):
                if all(field in s for s in (*after, *before)):
                    row[split][field] = dict(zip(("delta", "se"), paired_difference(after, before, split,
                                                                                    field=field)[:2]))
    return row


def verdict(arm: str, delta: float, se: float) -> str:
    if se != se:        # NaN: a single task
        return "cannot tell"
    if arm == "self":
        return "no harm" if abs(delta) <= 2 * se else ("harms" if delta < 0 else "moves")
    return "gains" if delta > 2 * se else ("harms" if delta < -2 * se else "cannot tell")


def reference_rows(out: Path) -> list[dict]:
    """The teacher minus the student on the same tasks: how much an OPD arm could gain at most."""
    base, teacher = out / "base", out / "teacher"
    if not ((base / "samples.jsonl").is_file() and (teacher / "samples.jsonl").is_file()):
        return []
    return [paired_row({"arm": "teacher (reference)"}, samples(teacher), samples(base))]


def markdown(rows: list[dict]) -> str:
    lines = ["| arm | lr | steps | KL | entropy | ΔID avg@8 ± SE | ΔOOD avg@8 ± SE | tasks | verdict (ID) "
             "| ΔID stuck % ± SE | ΔID invalid / episode ± SE |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]

    def cell(d: dict | None, digits: int = 1) -> str:
        return f"{d['delta']:+.{digits}f} ± {d['se']:.{digits}f}" if d else "-"
    for r in rows:
        cells = [cell(r.get(s)) for s in SPLITS]
        idv = verdict(r["arm"], r["ID"]["delta"], r["ID"]["se"]) if "ID" in r and "lr" in r else "-"
        budget = (f"{r['lr']:g} | {r['steps']} | {r['kl_coef']:g} | {r['entropy_coef']:g}" if "lr" in r
                  else "- | - | - | -")
        failures = r.get("ID", {})
        lines.append(f"| {r['arm']} | {budget} | {cells[0]} | {cells[1]} | {failures.get('tasks', '-')} | {idv} "
                     f"| {cell(failures.get('stuck'))} | {cell(failures.get('n_invalid'), 2)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m reproduce.budget_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--student", required=True)
    p.add_argument("--teacher", help="a stronger teacher (needed by the opd arm)")
    p.add_argument("--out", required=True)
    p.add_argument("--scale", default="small", choices=("tiny", "small", "paper"))
    p.add_argument("--arms", default="self,opd,grpo")
    p.add_argument("--lrs", default="1e-5,5e-5")
    p.add_argument("--steps", default="20")
    p.add_argument("--kl", default="0")
    p.add_argument("--entropy", default="0")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="any post-training field")
    p.add_argument("--report", action="store_true", help="only tabulate the finished runs")
    try:
        args = p.parse_args(argv)
        args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
        if not args.arms or set(args.arms) - set(ARMS):
            raise UsageError(f"--arms must be a comma list of {', '.join(ARMS)}")
        if set(DISTILLED) & set(args.arms) and not args.teacher:
            raise UsageError("the opd and turnopd arms need --teacher (a stronger model sharing the student's "
                             "tokenizer)")
        args.lrs, args.kl, args.entropy = floats(args.lrs, "lrs"), floats(args.kl, "kl"), floats(args.entropy, "entropy")
        args.steps = [int(s) for s in floats(args.steps, "steps")]
        if min(args.steps) < 1 or min(args.lrs) <= 0:
            raise UsageError("--steps and --lrs must be positive")
        args.student = Path(args.student)
        if not args.student.is_dir():
            raise UsageError(f"student run {args.student} does not exist")
        out, points = Path(args.out), grid(args)
        if not args.report:
            from posttrain.config import make_config
            from posttrain.train import parse_overrides

            cfg = make_config("opd", args.scale, **parse_overrides(args.set))
            out.mkdir(parents=True, exist_ok=True)
            base_evaluation(args.student, out, cfg)
            if args.teacher and set(DISTILLED) & set(args.arms):
                base_evaluation(Path(args.teacher), out, cfg, name="teacher", tasks_of=args.student)
            for arm, point in itertools.product(args.arms, points):
                train_arm(arm, point, args, out)
                report(out)
        rows = report(out)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
