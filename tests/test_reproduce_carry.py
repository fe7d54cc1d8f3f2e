"""Carrying a store between machines without weights (reproduce.carry, Store.weights).

What must hold: a carry holds every finished artifact's records and evaluations and no weights; a
restored store reuses them (no training, no evaluation) for anything that only reads numbers; and
anything that loads weights makes the store build that artifact again first.
"""
import gzip
import json
from pathlib import Path

import pytest

from reproduce import carry
from reproduce.store import ReproductionError, Store


def _store(root: Path) -> Store:
    return Store("tiny", root / "runs", root / "data", log=lambda m: None)


def _finished_pretrain(store: Store) -> Path:
    """A finished pre-training run as the store lays it out, with weights, optimiser state and a cache."""
    run = store.home / "pretrain" / store.corpus_config().name
    ckpt = run / "checkpoints" / "step_000200"
    ckpt.mkdir(parents=True)
    for name in ("model.safetensors", "optimizer.safetensors", "rng_rank0.safetensors"):
        (ckpt / name).write_bytes(b"\0" * 64)
    (ckpt / "trainer_state.json").write_text('{"step": 200}')
    (ckpt / "config.json").write_text("{}")
    (run / "cache").mkdir()
    (run / "cache" / "tokens.npy").write_bytes(b"\0" * 64)
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_text('{"trained_for": "carried"}')
    (run / "train_config.json").write_text('{"config": {"steps": 200}}')
    (run / "metrics.jsonl").write_text('{"step": 1, "loss": 5.0}\n' * 50)
    (run / "summary.json").write_text('{"checkpoint": "checkpoints/step_000200"}')
    return run


def _evaluated(store: Store, model: Path) -> dict:
    out = store._eval_dir(model, None)
    out.mkdir(parents=True)
    summary = {"k": 8, "seed": 0, "max_tasks_per_cell": store.budget["eval_tasks_per_cell"], "table": []}
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "samples.jsonl").write_text('{"task": "t", "success": true, "text": "Step 1/6: ..."}\n' * 20)
    return summary


def test_a_carry_keeps_records_and_evaluations_of_finished_artifacts_and_no_weights(tmp_path, fake_pretrain):
    store = _store(tmp_path / "a")
    run = _finished_pretrain(store)
    _evaluated(store, run)
    (store.home / "pretrain" / "cut-off" / "checkpoints" / "step_000100").mkdir(parents=True)   # not finished
    (store.home / "eval" / "half-written").mkdir(parents=True)
    where = carry.carry_dir(tmp_path / "results", store.home)
    manifest = carry.save(store.home, where)
    assert where == tmp_path / "results" / "tiny" / "carry" / "tiny"
    assert manifest["artifacts"] == [f"pretrain/{run.name}", f"eval/{store._eval_dir(run, None).name}"]
    files = {str(p.relative_to(where)) for p in where.rglob("*") if p.is_file()}
    assert not [f for f in files if f.endswith(".safetensors") or "/cache/" in f or "cut-off" in f]
    assert [f for f in files if "/checkpoints/" in f] == [f"pretrain/{run.name}/checkpoints/step_000200/trainer_state.json"]
    assert f"pretrain/{run.name}/metrics.jsonl.gz" in files and f"pretrain/{run.name}/tokenizer/tokenizer.json" in files
    assert manifest["without_weights"] == [f"pretrain/{run.name}/checkpoints/step_000200"]
    samples = where / "eval" / store._eval_dir(run, None).name / "samples.jsonl.gz"
    assert gzip.decompress(samples.read_bytes()).decode().splitlines() == ['{"task": "t", "success": true}'] * 20


def test_a_restored_store_reads_numbers_without_training_and_retrains_before_loading_weights(tmp_path, fake_pretrain,
                                                                                           monkeypatch):
    import engine.evaluate
    old = _store(tmp_path / "a")
    summary = _evaluated(old, _finished_pretrain(old))
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)

    store = _store(tmp_path / "b")
    assert carry.restore(where, store.home) == carry.save(old.home, where)["artifacts"]
    loads = []
    monkeypatch.setattr(engine.evaluate, "load_model_and_tokenizer",
                        lambda run_dir: loads.append((run_dir, list(fake_pretrain))) or (None, None, tmp_path))
    monkeypatch.setattr(engine.evaluate, "evaluate", lambda *a, **kw: {"fresh": True})
    run = store.pretrained()
    assert store.evaluation(run) == summary and store.samples(run)[0]["success"] is True
    student = store.checkpoint(run, 200)
    assert fake_pretrain == [] and loads == []            # numbers only: nothing trained, nothing loaded
    assert store.evaluation(student, corpus=tmp_path / "other") == {"fresh": True}   # a new evaluation loads it:
    assert loads == [(student, [run.name])]              # trained again before its weights are read
    assert json.loads((run / "tokenizer" / "tokenizer.json").read_text()) == {"trained_for": "carried"}
    store.weights(run)
    assert fake_pretrain == [run.name]                    # once


def test_a_carried_student_is_trained_again_before_post_training_reads_it(tmp_path, fake_pretrain, monkeypatch):
    import posttrain.train
    old = _store(tmp_path / "a")
    _finished_pretrain(old)
    carry.save(old.home, carry.carry_dir(tmp_path / "results", old.home))
    store = _store(tmp_path / "b")
    carry.restore(carry.carry_dir(tmp_path / "results", old.home), store.home)
    seen = []

    class Recorder:
        def __init__(self, cfg, student, teacher, out, data, resume):
            seen.append((list(fake_pretrain), student))
            self.out = out

        def fit(self):
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "summary.json").write_text("{}")
    monkeypatch.setattr(posttrain.train, "Trainer", Recorder)
    student = store.checkpoint(store.pretrained(), 200)
    store.posttrained("x", "grpo", student)
    assert seen == [([student.parent.parent.name], student)]


def test_restore_never_overwrites_and_a_model_the_store_was_not_asked_for_is_refused(tmp_path, fake_pretrain):
    old = _store(tmp_path / "a")
    run = _finished_pretrain(old)
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)
    store = _store(tmp_path / "b")
    mine = store.home / "pretrain" / run.name / "metrics.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine\n")
    assert carry.restore(where, store.home) == []          # the run was there already
    assert mine.read_text() == "mine\n"
    with pytest.raises(ReproductionError, match="did not ask the store for it"):
        store.weights(store.home / "pretrain" / run.name)


def test_the_cli_refuses_a_missing_carry_and_a_missing_store_with_one_line(tmp_path, capsys):
    assert carry.main(["restore", "--scale", "tiny", "--root", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "results")]) == 2
    assert carry.main(["save", "--scale", "tiny", "--root", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "MANIFEST.json" in err[0] and "nothing to carry" in err[1]
