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
    again = _store(tmp_path / "b")                     # restored and carried on unchanged: the same carry
    carry.restore(where, again.home)
    assert carry.save(again.home, carry.carry_dir(tmp_path / "results-b", again.home)) == manifest


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


def test_a_carried_run_trains_again_on_the_threads_it_was_trained_on(tmp_path, fake_pretrain, monkeypatch):
    """CPU sums come out in an order set by the instruction set and the thread count, so the weights
    match the carried evaluations only with the count the run recorded (the caller's count is kept
    after) and on a CPU of its kernels' instruction sets (else a warning before it trains; torch's
    capability alone does not tell: two AVX512 CPUs gave runs that differed in the last bits)."""
    import pretrain.train
    import torch
    old = _store(tmp_path / "a")
    run = _finished_pretrain(old)
    (run / "train_config.json").write_text(json.dumps({"config": {"steps": 200}, "threads": 3,
                                                       "cpu": "another CPU [AVX2: avx2 fma]"}))
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)
    store, said = _store(tmp_path / "b"), []
    store.log = said.append
    carry.restore(where, store.home)
    seen, fake = [], pretrain.train.main
    monkeypatch.setattr(pretrain.train, "main", lambda argv: seen.append(torch.get_num_threads()) or fake(argv))
    before = torch.get_num_threads()
    store.weights(store.pretrained())
    assert seen == [3] and torch.get_num_threads() == before
    assert any("trained on another CPU [AVX2: avx2 fma] and this CPU is" in line and "not be the same weights" in line
               for line in said)
    from pretrain.model import cpu_description
    for record, warned in (({"cpu_capability": torch.backends.cpu.get_cpu_capability()}, True),   # too little said
                           ({"cpu": cpu_description()}, False)):                                  # this CPU
        fresh, said = _store(tmp_path / f"c{warned}"), []
        fresh.log = said.append
        carry.restore(where, fresh.home)
        (fresh.home / "pretrain" / run.name / "train_config.json").write_text(json.dumps({"config": {}, **record}))
        fresh.weights(fresh.pretrained())
        assert any("may not be the same weights" in line for line in said) == warned


def test_restore_never_overwrites_and_a_model_the_store_was_not_asked_for_is_refused(tmp_path, fake_pretrain):
    old = _store(tmp_path / "a")
    run = _finished_pretrain(old)
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)
    store = _store(tmp_path / "b")
    mine = store.home / "pretrain" / run.name / "metrics.jsonl"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine\n")
    assert carry.restore(where, store.home) == []          # the run was there already, half-built: left alone
    assert mine.read_text() == "mine\n" and not (mine.parent / "summary.json").exists()
    fresh = _store(tmp_path / "c")
    carry.restore(where, fresh.home)
    with pytest.raises(ReproductionError, match="did not ask the store for it"):
        fresh.weights(fresh.home / "pretrain" / run.name)


def test_a_half_written_evaluation_is_not_carried_and_a_carry_never_loses_finished_work(tmp_path, fake_pretrain):
    store = _store(tmp_path / "a")
    run = _finished_pretrain(store)
    _evaluated(store, run)
    out = store._eval_dir(run, None)
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "episodes": 21}))     # 20 samples written so far
    where = carry.carry_dir(tmp_path / "results", store.home)
    assert carry.save(store.home, where)["artifacts"] == [f"pretrain/{run.name}"]
    (out / "summary.json").write_text(json.dumps({**summary, "episodes": 20}))
    assert len(carry.save(store.home, where)["artifacts"]) == 2
    (run / "summary.json").unlink()                        # the run is being trained again here
    manifest = carry.save(store.home, where)
    assert f"pretrain/{run.name}" in manifest["artifacts"]  # its carried copy stays
    assert (where / "pretrain" / run.name / "summary.json").is_file()
    assert f"pretrain/{run.name}/checkpoints/step_000200" in manifest["folders"]


def test_the_cli_refuses_a_missing_carry_and_a_missing_store_with_one_line(tmp_path, capsys):
    assert carry.main(["restore", "--scale", "tiny", "--root", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "results")]) == 2
    assert carry.main(["save", "--scale", "tiny", "--root", str(tmp_path / "runs"),
                       "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "MANIFEST.json" in err[0] and "nothing to carry" in err[1]


def test_a_carried_post_training_run_is_trained_again_from_the_start_when_extended_or_loaded(tmp_path, fake_pretrain,
                                                                                            monkeypatch):
    import dataclasses

    import posttrain.train
    calls = []

    class Recorder:                   # writes what a finished run has: its record, a checkpoint, a summary
        def __init__(self, cfg, student, teacher, out, data, resume):
            calls.append((cfg.steps, resume))
            self.cfg, self.out, self.student = cfg, out, student

        def fit(self):
            ckpt = self.out / "checkpoints" / f"step_{self.cfg.steps:06d}"
            ckpt.mkdir(parents=True, exist_ok=True)
            (ckpt / "trainer_state.json").write_text("{}")
            (ckpt / "model.safetensors").write_bytes(b"\0" * 8)
            (self.out / "train_config.json").write_text(json.dumps(
                {"config": dataclasses.asdict(self.cfg), "student": str(self.student), "teacher": None}))
            (self.out / "summary.json").write_text(json.dumps({"checkpoint": f"checkpoints/{ckpt.name}"}))
    monkeypatch.setattr(posttrain.train, "Trainer", Recorder)
    old = _store(tmp_path / "a")
    student = old.checkpoint(_finished_pretrain(old), 200)
    old.posttrained("x", "grpo", student)
    steps = calls[0][0]
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)

    store = _store(tmp_path / "a")          # the same paths, as a new machine with the same checkout has
    import shutil
    shutil.rmtree(store.home)
    carry.restore(where, store.home)
    assert store.checkpoint(store.pretrained(), 200) == student      # as a table asks for its student
    run = store.posttrained("x", "grpo", student)
    assert len(calls) == 1                                # finished: its evaluations are all a table reads
    store.weights(run)                                    # now something loads it: the store trains it again
    assert calls[1:] == [(steps, False)] and (run / "checkpoints" / f"step_{steps:06d}" / "model.safetensors").is_file()

    shutil.rmtree(store.home)
    carry.restore(where, store.home)
    store.pretrained()
    store.posttrained("x", "grpo", student, steps=steps + 4)     # longer: normally extended from its checkpoint,
    assert calls[2:] == [(steps + 4, False)]                    # but a carried one has no weights to go on from


def test_a_run_another_process_is_training_again_is_awaited_not_handed_on(tmp_path):
    """Two workers both need one carried teacher; the first trains it again (its summary and
    checkpoints gone for now), so the second must wait for it or take other work (`Busy`), not load
    a run that has no checkpoint yet."""
    import fcntl

    from reproduce.store import Busy
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None, wait=False)
    run = store.home / "pretrain" / "teacher"
    (run / "checkpoints").mkdir(parents=True)                      # being retrained: nothing there yet
    with open(run.parent / f".{run.name}.lock", "w") as held:       # the other worker's lock
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(Busy):
            store.weights(run)
        with pytest.raises(Busy):
            store.weights(run / "checkpoints" / "step_000002")
        fcntl.flock(held, fcntl.LOCK_UN)
    assert store.weights(run) == run                                # no one builds it: nothing to wait for


@pytest.mark.parametrize("drift", [0.0, 0.25])
def test_a_run_trained_again_is_compared_with_the_carried_run(tmp_path, drift, monkeypatch):
    """The carried evaluations describe the old weights: training again must give the same losses, and
    a run that does not (another machine's kernels) is recorded and warned about, not passed silently."""
    import pretrain.train
    old = _store(tmp_path / "a")
    carried = _finished_pretrain(old)
    (carried / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 / s}) + "\n" for s in (1, 2, 3)))
    carry.save(old.home, carry.carry_dir(tmp_path / "results", old.home))
    said = []
    store = Store("tiny", tmp_path / "b" / "runs", tmp_path / "b" / "data", log=said.append)
    carry.restore(carry.carry_dir(tmp_path / "results", old.home), store.home)

    def train_again(argv):
        out = Path(argv[argv.index("--out") + 1])
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 / s + drift}) + "\n"
                                                   for s in (1, 2, 3)))
        (out / "summary.json").write_text("{}")
        return 0
    monkeypatch.setattr(pretrain.train, "main", train_again)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / self.corpus_config(**changes).name)
    run = store.weights(store.pretrained())
    record = json.loads((run / "retrained.json").read_text())
    assert record["steps_compared"] == 3 and record["identical"] is (drift == 0)
    assert record["max_abs_loss_difference"] == pytest.approx(drift)
    assert any("warning" in line and "other weights" in line for line in said) is (drift != 0)


def test_a_run_trained_again_into_another_model_sets_aside_what_was_measured_on_or_trained_from_it(
        tmp_path, monkeypatch):
    """Fig. 7 pairs a post-training run with its student's evaluation: a student trained again into
    other weights must not be paired with the old one's. Its evaluations and the runs that started
    from it (and their evaluations, and the next MOPD stage) move to stale/; a run that only used it
    as a teacher, and another model's evaluation whose name shares its prefix, stay; a later carry
    does not bring the stale ones back."""
    import pretrain.train
    old = _store(tmp_path / "a")
    carried = _finished_pretrain(old)
    (carried / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 / s}) + "\n" for s in (1, 2, 3)))
    student = carried / "checkpoints" / "step_000200"
    _evaluated(old, student)
    _evaluated(old, old.home / "pretrain" / (carried.name + "-direct"))         # another model: "fa-tiny-direct"
    where = carry.carry_dir(tmp_path / "results", old.home)
    carry.save(old.home, where)
    said = []
    store = Store("tiny", tmp_path / "b" / "runs", tmp_path / "b" / "data", log=said.append)
    carry.restore(where, store.home)
    home, mine = store.home, store.home / "pretrain" / carried.name / "checkpoints" / "step_000200"

    def finished_posttrain(name: str, student: Path, teacher: Path | None = None) -> Path:
        run = home / "posttrain" / name
        run.mkdir(parents=True)
        (run / "train_config.json").write_text(json.dumps({"kind": "posttrain", "config": {}, "student": str(student),
                                                           "teacher": str(teacher) if teacher else None}))
        (run / "summary.json").write_text("{}")
        _evaluated(store, run)
        return run
    grpo = finished_posttrain("fig7-grpo", mine)
    stage2 = finished_posttrain("mopd-stage2", grpo)
    taught = finished_posttrain("taught", home / "pretrain" / "other", teacher=mine)

    def train_again(argv):
        out = Path(argv[argv.index("--out") + 1])
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0 / s + 0.25}) + "\n"
                                                   for s in (1, 2, 3)))
        (out / "checkpoints" / "step_000200").mkdir(parents=True)
        (out / "checkpoints" / "step_000200" / "trainer_state.json").write_text("{}")
        (out / "checkpoints" / "step_000200" / "model.safetensors").write_bytes(b"\0")
        (out / "summary.json").write_text('{"checkpoint": "checkpoints/step_000200"}')
        return 0

    class Trainer:                                    # writes what the real one records of its inputs
        def __init__(self, cfg, student, teacher, out, data, resume):
            self.out, self.student = out, student

        def fit(self):
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "train_config.json").write_text(json.dumps({"config": {}, "student": str(self.student)}))
            (self.out / "summary.json").write_text("{}")
    import posttrain.train
    monkeypatch.setattr(posttrain.train, "Trainer", Trainer)
    monkeypatch.setattr(pretrain.train, "main", train_again)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / self.corpus_config(**changes).name)
    store.weights(store.pretrained())
    assert not (home / carry.STALE).exists()          # a teacher, or a new evaluation, pairs with nothing old
    store.posttrained("fig7-opd", "opd", mine, teacher=home / "pretrain" / carried.name)
    stale = {str(p.relative_to(home / carry.STALE)) for p in (home / carry.STALE).glob("*/*")}
    assert stale == {f"eval/pretrain__{carried.name}__checkpoints__step_000200", "posttrain/fig7-grpo",
                     "posttrain/mopd-stage2", "eval/posttrain__fig7-grpo", "eval/posttrain__mopd-stage2"}
    assert taught.is_dir() and store._eval_dir(taught, None).is_dir() and not grpo.exists() and not stage2.exists()
    assert (home / "eval" / f"pretrain__{carried.name}-direct").is_dir()
    assert any("set aside" in line for line in said)
    store.posttrained("fig7-grpo", "grpo", mine)      # built again from the new weights; sets nothing more aside
    assert (home / "posttrain" / "fig7-opd").is_dir() and (home / "posttrain" / "fig7-grpo" / "summary.json").is_file()
    manifest = carry.save(home, where)
    assert not [a for a in manifest["artifacts"] if a.startswith(("posttrain/mopd-stage2", "eval/posttrain__fig7-grpo"))
                or a == f"eval/pretrain__{carried.name}__checkpoints__step_000200"]
    assert "posttrain/fig7-grpo" in manifest["artifacts"]      # the one built again, not the one set aside
    assert f"eval/pretrain__{carried.name}-direct" in manifest["artifacts"]
