"""Optional experiment tracking: the scalars of ``metrics.jsonl``, also as TensorBoard events.

Why: ``RUN/metrics.jsonl`` is the record every analysis reads; a tracker is a live view of the same
numbers for a person watching a run. One config field, ``tracker`` (``none`` by default, or
``tensorboard``), in pre-training and post-training; events go to ``RUN/tensorboard/`` (local,
no account): ``tensorboard --logdir runs``. Only numbers are logged, under the same names as in
``metrics.jsonl`` (evaluation rows of post-training under ``eval/``), at the row's ``step``.
"""
from __future__ import annotations

import importlib.util
import numbers
from pathlib import Path

from planning_gym.cli import UsageError

TRACKERS = ("none", "tensorboard")


def check_tracker(kind: str) -> None:
    """UsageError before any work when the tracker's package is missing."""
    if kind == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise UsageError("tracker tensorboard needs the tensorboard package: pip install 'planning-gym[tracking]'")


class Tracker:
    """``log(row)`` mirrors one metrics row; a no-op for ``none``."""

    def __init__(self, kind: str, run_dir: Path):
        check_tracker(kind)
        self.writer = None
        if kind == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))

    def log(self, row: dict) -> None:
        if self.writer is None or "step" not in row:
            return
        prefix = "eval/" if row.get("eval") is True else ""
        for key, value in row.items():
            if key in ("step", "eval") or isinstance(value, bool) or not isinstance(value, numbers.Real):
                continue
            self.writer.add_scalar(prefix + key, float(value), int(row["step"]))
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
