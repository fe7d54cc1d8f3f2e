"""Teachers built from the gym: a model pre-trained on the corpus of the behaviour to distil.

The paper's teachers are "ideal": trained on data of the target distribution until they solve
it.  Here a teacher is a `pretrain.train` run on a corpus that differs from the student's in
one controlled way — the recipe (A/B, knowledge mismatch), the planning-pattern set (MOPD
regimes), or the domain — and that reuses the *student's tokenizer*, because on-policy
distillation compares next-token distributions over one shared vocabulary.

    python -m posttrain.teachers --student runs/pretrain-fa-small --recipe B --out runs/teacher-B
    python -m posttrain.teachers --student RUN --regime shared_compatible --domain lf --out runs/teacher-lf

MOPD regimes (paper Tables 6-7, our construction of "which patterns each domain teacher uses").
Every teacher uses optimal templates only (T1-T4), so the regimes differ in how the templates
are shared, never in trajectory quality:
  shared_compatible   Type I: every teacher has T1, plus one other template of its own
  shared_conflict     Type II: neighbours in the cascade share a template, no template is shared by all
  no_shared_conflict  Type III: one template per teacher, none in common
  withheld_shared     control: as shared_compatible, but T1 is withheld from the last teacher
  random_shared       control: which template all teachers share, and their own ones, drawn at random
                      (seeded), so the shared mode is not always the same hand-picked T1
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry, prepare_output
from planning_gym.config import CorpusConfig
from planning_gym.corpus import write_corpus
from planning_gym.patterns import OPTIMAL
from planning_gym.rng import stream
from pretrain import rundir

def _random_shared() -> dict[str, str]:
    rng = stream(0, "mopd", "random_shared")
    shared = rng.choice(OPTIMAL)
    own = rng.sample([p for p in OPTIMAL if p != shared], 3)
    return {d: f"{shared}+{o}" for d, o in zip(("fa", "lf", "ea"), own)}


REGIMES: dict[str, dict[str, str]] = {
    "shared_compatible": {"fa": "T1+T2", "lf": "T1+T3", "ea": "T1+T4"},
    "shared_conflict": {"fa": "T1+T2", "lf": "T2+T3", "ea": "T3+T4"},
    "no_shared_conflict": {"fa": "T2", "lf": "T3", "ea": "T4"},
    "withheld_shared": {"fa": "T1+T2", "lf": "T1+T3", "ea": "T4"},
    "random_shared": _random_shared(),
}


class TeacherError(UsageError):
    """A teacher cannot be built from this student or difference (one ``error:`` line, exit 2)."""


def student_corpus_config(student_run: Path) -> CorpusConfig:
    """The corpus config the student was pre-trained on (read from its run folder)."""
    try:
        saved = rundir.read_train_config(student_run) or {}
        return CorpusConfig.from_dict(json.loads((Path(saved["data"]) / "config.json").read_text()))
    except (OSError, KeyError, TypeError, ValueError) as e:
        raise TeacherError(f"cannot read the student's run/corpus config under {student_run}: {e}") from None


def teacher_corpus(student: CorpusConfig, *, recipe: str | None = None, patterns: str | None = None,
                   domain: str | None = None, regime: str | None = None) -> CorpusConfig:
    """The student's corpus config with the one controlled difference applied."""
    if regime is not None:
        if regime not in REGIMES:
            raise TeacherError(f"unknown regime '{regime}' (choose from {', '.join(REGIMES)})")
        if domain not in REGIMES[regime]:
            raise TeacherError(f"regime {regime} defines teachers for {', '.join(REGIMES[regime])}; pass --domain")
        patterns = REGIMES[regime][domain]
    import dataclasses
    changes = {"recipe": recipe, "patterns": patterns, "domains": (domain,) if domain else None}
    cfg = dataclasses.replace(student, **{k: v for k, v in changes.items() if v is not None})
    cfg.check()
    return cfg


def build_teacher(student_run: Path, out: Path, data_dir: Path, *, steps: int | None = None,
                  resume: bool = False, force: bool = False, **difference) -> Path:
    """Write the teacher's corpus, seed its run folder with the student's tokenizer, pre-train.
    A non-empty ``out`` is refused unless ``resume`` (continue its pre-training) or ``force``."""
    from pretrain.checkpoint import latest_checkpoint
    from pretrain.train import main as pretrain_main

    student_run, out = Path(student_run), Path(out)
    if steps is not None and steps < 1:
        raise TeacherError(f"--steps must be positive, got {steps}")
    if not (student_run / "tokenizer" / "tokenizer.json").is_file():
        raise TeacherError(f"{student_run} has no tokenizer/ folder: is it a pretrain run?")
    cfg = teacher_corpus(student_corpus_config(student_run), **difference)
    prepare_output(out, exists_ok=resume or force, what="teacher folder")
    if force and out.is_dir():
        shutil.rmtree(out)
    corpus_dir = Path(data_dir) / cfg.name
    if not (corpus_dir / "pretrain.jsonl").exists():
        write_corpus(cfg, corpus_dir, workers=1 if cfg.scale == "tiny" else 2)
    if not (out / "tokenizer").exists():
        shutil.copytree(student_run / "tokenizer", out / "tokenizer")
    argv = ["--data", str(corpus_dir), "--out", str(out), "--scale", cfg.scale]
    if steps is not None:
        argv += ["--steps", str(steps)]
    if resume and latest_checkpoint(out) is not None:
        argv = ["--out", str(out), "--resume"] + (["--steps", str(steps)] if steps is not None else [])
    code = pretrain_main(argv)
    if code:
        raise TeacherError(f"teacher pre-training failed with status {code} (rerun with --resume to continue it)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m posttrain.teachers", description=__doc__.split("\n")[0])
    p.add_argument("--student", required=True, help="the student's pretrain run folder")
    p.add_argument("--out", required=True, help="the teacher's run folder")
    p.add_argument("--data-dir", default="data")
    p.add_argument("--recipe", help="teach another recipe (B): the knowledge-mismatch teacher")
    p.add_argument("--patterns", help="teach a pattern set, e.g. 1opt or T1+T2")
    p.add_argument("--domain", help="teacher for one domain (fa, lf, ea)")
    p.add_argument("--regime", help=f"MOPD regime: {', '.join(REGIMES)} (with --domain)")
    p.add_argument("--steps", type=int, help="pre-training steps (default: the scale's)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted teacher build in --out")
    p.add_argument("--force", action="store_true", help="empty a non-empty --out and start over")

    def go() -> int:
        args = p.parse_args(argv)
        build_teacher(Path(args.student), Path(args.out), Path(args.data_dir), steps=args.steps, resume=args.resume,
                      force=args.force, recipe=args.recipe, patterns=args.patterns, domain=args.domain,
                      regime=args.regime)
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
