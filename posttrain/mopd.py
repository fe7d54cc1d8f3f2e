"""Cascaded multi-teacher on-policy distillation (MOPD): one OPD stage per domain teacher.

    python -m posttrain.mopd --student runs/pretrain-fa+lf+ea-small \
        --teacher fa=runs/teacher-fa --teacher lf=runs/teacher-lf --teacher ea=runs/teacher-ea \
        --out runs/mopd [--scale small] [--set steps=40 ...]

Stage i distils teacher i into the output of stage i-1 on the posttrain tasks of teacher i's
domain, then evaluates *every* domain (the paper's Tables 6-7 ask what each stage does to the
domains learnt before and after).  The student must be pre-trained on a corpus holding all the
domains (one tokenizer for all teachers); teachers come from `posttrain.teachers --regime ...`.
Writes ``RUN/stage_<i>_<domain>/`` (a posttrain run each) and ``RUN/mopd.md`` / ``mopd.json``.
Every teacher is checked (a run with a checkpoint and the student's tokenizer) before stage 1
trains; a non-empty ``--out`` is refused unless ``--resume`` (finished stages are kept, a cut-off
stage continues from its checkpoint) or ``--force`` (start over).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry, prepare_output
from posttrain.config import make_config
from posttrain.train import Trainer, parse_overrides
from pretrain import rundir
from pretrain.config import resolve_scale


def domain_table(summary_path: Path, k: int) -> dict[str, float]:
    """avg@k (percent) per (domain, split) over all difficulties, from an evaluation summary."""
    table = json.loads(summary_path.read_text())["table"]
    return {f"{r['domain']}/{r['split']}": r[f"avg@{k}"] for r in table if r["difficulty"] == "all"}


def check_teachers(student: Path, stages: list[tuple[str, Path]]) -> None:
    """Every teacher is a trained run sharing the student's tokenizer -- checked before any stage
    trains, so a typo in the third teacher does not surface after two stages of work."""
    from pretrain.checkpoint import latest_checkpoint, load_model_and_tokenizer

    vocab = load_model_and_tokenizer(run_dir=student)[1].get_vocab()
    for domain, teacher in stages:
        if not teacher.is_dir() or latest_checkpoint(teacher) is None:
            raise UsageError(f"teacher {domain}={teacher} is not a trained run folder")
        if load_model_and_tokenizer(run_dir=teacher)[1].get_vocab() != vocab:
            raise UsageError(f"teacher {domain}={teacher}: its tokenizer differs from the student's")


def run(argv=None) -> list[dict]:
    p = Parser(prog="python -m posttrain.mopd", description=__doc__.split("\n")[0])
    p.add_argument("--student", required=True)
    p.add_argument("--teacher", action="append", default=[], metavar="DOMAIN=RUN", help="in cascade order")
    p.add_argument("--out", required=True)
    p.add_argument("--data")
    p.add_argument("--scale")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a post-training field for every stage (`python -m posttrain.train --help` lists them)")
    p.add_argument("--resume", action="store_true", help="keep finished stages, continue a cut-off one")
    p.add_argument("--force", action="store_true", help="empty a non-empty --out and start over")
    args = p.parse_args(argv)
    if not args.teacher:
        raise UsageError("at least one --teacher DOMAIN=RUN is needed")
    stages = []
    for item in args.teacher:
        domain, sep, run_dir = item.partition("=")
        if not sep:
            raise UsageError(f"--teacher expects DOMAIN=RUN, got {item!r}")
        stages.append((domain, Path(run_dir)))
    scale = resolve_scale(args.scale, log=lambda m: print(m, file=sys.stderr))
    overrides = parse_overrides(args.set)
    if "domains" in overrides:
        raise UsageError("MOPD sets each stage's domains from its --teacher DOMAIN=RUN; drop --set domains")
    cfgs = [make_config("opd", scale, **{**overrides, "domains": domain}) for domain, _ in stages]
    out, student, results = Path(args.out), Path(args.student), []
    prepare_output(out, exists_ok=args.resume or args.force, what="MOPD folder")
    check_teachers(student, stages)
    if args.force and out.is_dir():
        shutil.rmtree(out)
    from pretrain.checkpoint import latest_checkpoint
    for i, ((domain, teacher), cfg) in enumerate(zip(stages, cfgs), start=1):
        stage_dir = out / f"stage_{i}_{domain}"
        if rundir.is_finished(stage_dir):
            summary = rundir.read_summary(stage_dir)
            print(f"stage {i} ({domain}): finished earlier, kept")
        else:
            trainer = Trainer(cfg, student, teacher, stage_dir, Path(args.data) if args.data else None,
                              resume=latest_checkpoint(stage_dir) is not None)
            summary = trainer.fit()
        evals = sorted((stage_dir / "eval").iterdir())
        scores = domain_table(evals[-1] / "summary.json", cfg.eval_k)
        results.append({"stage": i, "teacher": domain, "run": str(stage_dir.relative_to(out)), **scores,
                        "train_wall_s": summary["train_wall_s"]})
        print(f"stage {i} ({domain}): " + ", ".join(f"{k} {v:.1f}" for k, v in scores.items()))
        student = stage_dir
    keys = sorted({k for r in results for k in r if "/" in k})
    lines = ["| stage | teacher | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    lines += [f"| {r['stage']} | {r['teacher']} | " + " | ".join(f"{r.get(k, float('nan')):.1f}" for k in keys) + " |"
              for r in results]
    (out / "mopd.md").write_text("\n".join(lines) + "\n")
    (out / "mopd.json").write_text(json.dumps(results, indent=1))
    return results


def main(argv=None) -> int:
    def go() -> int:
        run(argv)
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
