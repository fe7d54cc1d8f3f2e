"""Cascaded multi-teacher on-policy distillation (MOPD): one OPD stage per domain teacher.

    python -m posttrain.mopd --student runs/pretrain-fa+lf+ea-small \
        --teacher fa=runs/teacher-fa --teacher lf=runs/teacher-lf --teacher ea=runs/teacher-ea \
        --out runs/mopd [--scale small] [--set steps=40 ...]

Stage i distils teacher i into the output of stage i-1 on the posttrain tasks of teacher i's
domain, then evaluates *every* domain (the paper's Tables 6-7 ask what each stage does to the
domains learnt before and after).  The student must be pre-trained on a corpus holding all the
domains (one tokenizer for all teachers); teachers come from `posttrain.teachers --regime ...`.
Writes ``RUN/stage_<i>_<domain>/`` (a posttrain run each) and ``RUN/mopd.md`` / ``mopd.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from posttrain.config import make_config
from posttrain.train import Trainer, guarded, parse_overrides
from pretrain.config import UsageError, resolve_scale


def domain_table(summary_path: Path, k: int) -> dict[str, float]:
    """avg@k (percent) per (domain, split) over all difficulties, from an evaluation summary."""
    table = json.loads(summary_path.read_text())["table"]
    return {f"{r['domain']}/{r['split']}": r[f"avg@{k}"] for r in table if r["difficulty"] == "all"}


def run(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(prog="python -m posttrain.mopd", description=__doc__.split("\n")[0])
    p.add_argument("--student", required=True)
    p.add_argument("--teacher", action="append", default=[], metavar="DOMAIN=RUN", help="in cascade order")
    p.add_argument("--out", required=True)
    p.add_argument("--data")
    p.add_argument("--scale")
    p.add_argument("--set", action="append", default=[])
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
    out, student, results = Path(args.out), Path(args.student), []
    for i, (domain, teacher) in enumerate(stages, start=1):
        cfg = make_config("opd", scale, **{**overrides, "domains": domain})
        stage_dir = out / f"stage_{i}_{domain}"
        trainer = Trainer(cfg, student, teacher, stage_dir, Path(args.data) if args.data else None, resume=False)
        summary = trainer.fit()
        evals = sorted((stage_dir / "eval").iterdir())
        scores = domain_table(evals[-1] / "summary.json", cfg.eval_k)
        results.append({"stage": i, "teacher": domain, "run": str(stage_dir), **scores,
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
    return guarded(run, argv)


if __name__ == "__main__":
    sys.exit(main())
