"""The run folder: the one module that knows its layout.

Why: pre-training, post-training, evaluation, MOPD, teachers, the reproduction store and the
analyses all read and write run folders; with the file names restated in each of them, a change
of layout (or a guess about what a path is) goes wrong somewhere. A run folder is::

    RUN/
      train_config.json   how the run was made, written before training: {"kind": "pretrain" | "posttrain",
                          "config": {...every field...}, "data": corpus folder, "corpus_digest": ...}
      metrics.jsonl       one JSON row per logged step, appended a line at a time
      summary.json        written last, when the run has finished: {"checkpoint": "checkpoints/step_N", ...}
      checkpoints/step_N/ Hugging Face model + tokenizer + optimizer / RNG / trainer state (`pretrain.checkpoint`)
      tokenizer/          (pre-training) the run's tokenizer
      eval/               evaluations (`engine.evaluate`): eval/ or eval/step_N/ with results.md, samples.jsonl
      tensorboard/        events of the optional tracker (`pretrain.tracking`)
      retrained.json      (`reproduce.store`) a run carried without its weights and trained again: its
                          logged losses against the carried run's, which its carried evaluations describe

Every record refers to files inside the run (checkpoints by their relative name), so a moved or
copied run folder is self-contained.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from planning_gym.cli import UsageError

TRAIN_CONFIG = "train_config.json"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
TOKENIZER = "tokenizer"
EVAL = "eval"
RETRAINED = "retrained.json"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_train_config(run: str | Path) -> dict | None:
    """The run's ``train_config.json`` (None when it has none); a corrupt one is a UsageError."""
    path = Path(run) / TRAIN_CONFIG
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UsageError(f"corrupt run config {path}: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise UsageError(f"corrupt run config {path}: no config object")
    return record


def write_train_config(run: str | Path, record: dict) -> None:
    _write_atomic(Path(run) / TRAIN_CONFIG, json.dumps(record, indent=1))


def read_summary(run: str | Path) -> dict | None:
    """The finished run's ``summary.json`` (None while it runs or when it was cut off)."""
    try:
        return json.loads((Path(run) / SUMMARY).read_text())
    except (OSError, ValueError):
        return None


def write_summary(run: str | Path, summary: dict) -> None:
    _write_atomic(Path(run) / SUMMARY, json.dumps(summary, indent=1))


def is_finished(run: str | Path) -> bool:
    return (Path(run) / SUMMARY).is_file()


def run_of(model: str | Path) -> Path:
    """The run folder of a model given as the run or as one of its checkpoints (``RUN/checkpoints/step_N``)."""
    model = Path(model)
    return model.parent.parent if model.parent.name == CHECKPOINTS else model


def metrics_path(run: str | Path) -> Path:
    return Path(run) / METRICS


def kind(path: str | Path) -> str | None:
    """What a folder is: ``"pretrain"`` / ``"posttrain"`` (a run folder), ``"checkpoint"``
    (``RUN/checkpoints/step_N`` or a bare model folder), or None."""
    path = Path(path)
    if (path / TRAIN_CONFIG).is_file():
        try:
            return json.loads((path / TRAIN_CONFIG).read_text()).get("kind", "pretrain")
        except (OSError, ValueError, AttributeError):
            return "pretrain"
    if (path / "config.json").is_file() and (path / "model.safetensors").is_file():
        return "checkpoint"
    return None
