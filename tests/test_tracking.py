"""The optional tracker: TensorBoard events hold the same scalars as ``metrics.jsonl``, in
pre-training and post-training, and nothing is written with the default ``tracker=none``."""
from __future__ import annotations

import json

import pytest

from planning_gym.config import CorpusConfig
from planning_gym.corpus import write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


def scalars(folder) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(folder))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_tensorboard_events_mirror_the_metrics(tmp_path):
    from posttrain.train import main as posttrain
    from pretrain.train import main as pretrain
    cfg = CorpusConfig.from_scale("tiny", n_pretrain_per_bin=8, n_posttrain_per_bin=2, n_test_per_bin=1)
    corpus = tmp_path / cfg.name
    write_corpus(cfg, corpus, progress=False)
    run = tmp_path / "run"
    assert pretrain(["--data", str(corpus), "--out", str(run), "--scale", "tiny", "--steps", "3", "--log-every", "1",
                     "--eval-every", "3", "--vocab-size", "300", "--set", "tracker=tensorboard"]) == 0
    events = scalars(run / "tensorboard")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows if "loss" in r] == pytest.approx([events["loss"][s] for s in (1, 2, 3)], rel=1e-6)
    assert events["eval_loss"][3] == pytest.approx(rows[-1]["eval_loss"], rel=1e-6)

    out = tmp_path / "grpo"
    assert posttrain(["--method", "grpo", "--student", str(run), "--out", str(out), "--scale", "tiny",
                      *[a for s in ("steps=1", "tasks_per_step=1", "group_size=2", "step_limit=2", "max_turn_tokens=12",
                                    "eval_tasks_per_cell=1", "eval_k=1", "eval_splits=ID", "tracker=tensorboard")
                        for a in ("--set", s)]]) == 0
    events = scalars(out / "tensorboard")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert events["loss"][1] == pytest.approx(rows[0]["loss"], rel=1e-6)
    assert events["eval/ID_avg@1"][1] == pytest.approx(rows[-1]["ID_avg@1"], rel=1e-6)
    assert not (tmp_path / "untracked").exists()


def test_no_tracker_writes_no_events(tmp_path):
    from pretrain.tracking import Tracker
    t = Tracker("none", tmp_path)
    t.log({"step": 1, "loss": 1.0})
    t.close()
    assert not (tmp_path / "tensorboard").exists()


def test_a_missing_tracker_package_is_one_usage_error(monkeypatch):
    import importlib.util

    from pretrain.config import UsageError, make_config
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(UsageError, match="pip install"):
        make_config("tiny", tracker="tensorboard")
