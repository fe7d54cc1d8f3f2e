"""Several workers on one table (reproduce.workers): each artifact built once, the family base first,
two at a time, and nothing the plan can only guess."""
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from reproduce import workers
from reproduce.store import Busy, Store


def _fake_evaluation(monkeypatch, log):
    """Evaluations that take a while and write a summary under the store's protocol."""
    import engine.evaluate

    def evaluate(net, tok, corpus, k, max_tasks_per_cell, seed, out_dir, **kw):
        log.append(("eval start", out_dir.name, time.time()))
        out_dir.mkdir(parents=True, exist_ok=True)
        time.sleep(0.2)
        summary = {"k": k, "seed": seed, "max_tasks_per_cell": max_tasks_per_cell, "table": []}
        (out_dir / "summary.json").write_text(json.dumps(summary))
        (out_dir / "samples.jsonl").write_text("")
        return summary
    monkeypatch.setattr(engine.evaluate, "load_model_and_tokenizer", lambda run_dir: (None, None, run_dir))
    monkeypatch.setattr(engine.evaluate, "evaluate", evaluate)


def _slow_pretraining(monkeypatch, log):
    """Pre-trainings that take 0.3 s, logged as ("pretrain start" | "pretrain end", run name, time)."""
    import pretrain.train
    fast = pretrain.train.main

    def slow(argv):
        out = argv[argv.index("--out") + 1].rsplit("/", 1)[-1]
        log.append(("pretrain start", out, time.time()))
        time.sleep(0.3)
        log.append(("pretrain end", out, time.time()))
        return fast(argv)
    monkeypatch.setattr(pretrain.train, "main", slow)


def _two_workers(stores, units, requests) -> None:
    """Workers 0 and 1 of 2 on one table, side by side (each with its own store, as two processes)."""
    threads = [threading.Thread(target=workers.work, args=(s, units, requests, i, 2), kwargs={"poll": 0.05})
               for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_two_workers_build_a_tables_models_once_each_two_at_a_time_base_first(tmp_path, fake_pretrain, monkeypatch):
    log = []
    _slow_pretraining(monkeypatch, log)
    _fake_evaluation(monkeypatch, log)
    stores = [Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None) for _ in range(2)]
    units, requests = workers.needs("fig6", stores[0])
    assert units[0] == ("pretrain", "fa-tiny") and sum(k == "pretrain" for k, _ in units) == 4
    _two_workers(stores, units, requests)
    assert sorted(fake_pretrain) == sorted(key for kind, key in units if kind == "pretrain")    # each once
    starts = {name: at for what, name, at in log if what == "pretrain start"}
    base_done = starts["fa-tiny"] + 0.3
    assert all(at >= base_done - 0.05 for name, at in starts.items() if name != "fa-tiny")     # base first
    assert len([e for e in log if e[0] == "eval start"]) == 4                                 # each model once
    ends = {name: at for what, name, at in log if what == "pretrain end"}
    members = sorted(name for name in starts if name != "fa-tiny")
    assert any(starts[a] < ends[b] and starts[b] < ends[a] for a in members for b in members if a < b)  # two at a time


def test_a_family_member_starts_beside_its_base_once_the_base_has_a_tokenizer(tmp_path, fake_pretrain,
                                                                           monkeypatch):
    """A member needs only its base's tokenizer: a base that already has one (carried without its
    weights, training again) does not hold its members back, and they take that tokenizer."""
    log = []
    _slow_pretraining(monkeypatch, log)
    _fake_evaluation(monkeypatch, [])
    stores = [Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None) for _ in range(2)]
    units, requests = workers.needs("fig6", stores[0])
    tokenizer = stores[0].home / "pretrain" / "fa-tiny" / "tokenizer" / "tokenizer.json"
    tokenizer.parent.mkdir(parents=True)
    tokenizer.write_text(json.dumps({"trained_for": "the base"}))      # the base's, before it has trained
    assert workers.ready(stores[0], units[1], requests)
    _two_workers(stores, units, requests)
    starts = {name: at for what, name, at in log if what == "pretrain start"}
    ends = {name: at for what, name, at in log if what == "pretrain end"}
    assert any(starts[m] < ends["fa-tiny"] for m in starts if m != "fa-tiny")       # beside the base
    for member in (k for kind, k in units if kind == "pretrain" and k != "fa-tiny"):
        copied = stores[0].home / "pretrain" / member / "tokenizer" / "tokenizer.json"
        assert json.loads(copied.read_text()) == {"trained_for": "the base"}


def test_a_store_that_does_not_wait_says_busy_and_the_plan_leaves_out_its_guesses(tmp_path):
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None, wait=False)
    other = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    held = threading.Event()
    release = threading.Event()

    def hold():
        with other._exclusive(tmp_path / "runs" / "x"):
            held.set()
            release.wait(5)
    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        raised = False
        try:
            with store._exclusive(tmp_path / "runs" / "x"):
                pass
        except Busy:
            raised = True
        assert raised
    finally:
        release.set()
        t.join()
    units, _ = workers.needs("fig3-4", store)
    assert ("pretrain", "fa-tiny-direct") in units
    assert not [key for _, key in units if "steps" in key]       # the equal-trajectory arm's steps are a guess
    for key, tokens in (("fa-tiny", 1000), ("fa-tiny-direct", 400)):  # ... until both arms record their corpora
        (store.home / "pretrain" / key).mkdir(parents=True)
        (store.home / "pretrain" / key / "train_config.json").write_text(json.dumps(
            {"corpus_tokens": tokens, "config": {"steps": 300}}))
    units, requests = workers.needs("fig3-4", store)
    assert ("pretrain", "fa-tiny-direct-120steps") in units and requests["fa-tiny-direct-120steps"]["steps"] == 120


class _Asked(Exception):
    """Raised by the recording `Store.posttrained`: the table's first post-training request is all we want."""


def _record_posttraining(monkeypatch, calls):
    def posttrained(self, name, method, student, teacher=None, **overrides):
        calls.append((name, method, str(student), str(teacher) if teacher else None, overrides))
        raise _Asked(name)
    monkeypatch.setattr(Store, "posttrained", posttrained)


@pytest.mark.parametrize("table", ["fig7", "fig9-10", "table4", "turnopd", "mopd"])
def test_a_worker_asks_for_a_post_training_run_exactly_as_the_table_does(table, tmp_path, fake_pretrain, monkeypatch):
    """The plan mirrors the table by hand; were its student, teacher or settings off by one detail,
    the table would rebuild every run the workers built (a budget or checkpoint changed)."""
    import pretrain.train
    from reproduce.cli import REPRODUCTIONS
    fast = pretrain.train.main

    def with_checkpoints(argv):          # the fake trainer leaves the student checkpoint the table asks for
        fast(argv)
        step = Store("tiny").budget["student_step"]
        ckpt = Path(argv[argv.index("--out") + 1]) / "checkpoints" / f"step_{step:06d}"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "trainer_state.json").write_text("{}")
        return 0
    monkeypatch.setattr(pretrain.train, "main", with_checkpoints)
    monkeypatch.setattr("analysis.params.load_state_dict", lambda folder: {})      # Figs. 9-10 read the student
    _fake_evaluation(monkeypatch, [])
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    table_calls, worker_calls = [], []
    _record_posttraining(monkeypatch, table_calls)
    with pytest.raises(_Asked):
        REPRODUCTIONS[table][1](store)
    units, requests = workers.needs(table, store)
    name = table_calls[0][0]
    assert ("posttrain", name) in units and workers.ready(store, ("posttrain", name), requests)
    _record_posttraining(monkeypatch, worker_calls)
    with pytest.raises(_Asked):
        workers.build(store, ("posttrain", name), requests)
    assert worker_calls == table_calls
    assert sum(kind == "posttrain" for kind, _ in units) == {"fig7": 18, "fig9-10": 2, "table4": 2, "turnopd": 3,
                                                               "mopd": 12}[table]


def test_only_picks_units_by_glob_with_the_pre_trainings_they_need(tmp_path):
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    units, requests = workers.needs("fig7", store)
    assert workers.chosen(store, units, requests, "") == units
    picked = workers.chosen(store, units, requests, "fig7-grpo-4opt8sub-*, *-4opt4sub@student")
    assert [key for kind, key in picked if kind != "pretrain"] == [
        "fa-tiny-4opt4sub@student", "fig7-grpo-4opt8sub-short", "fig7-grpo-4opt8sub-mid", "fig7-grpo-4opt8sub-long"]
    # the two students' models and the family base that trains the tokenizer; GRPO needs no teacher
    assert [key for kind, key in picked if kind == "pretrain"] == ["fa-tiny", "fa-tiny-4opt4sub", "fa-tiny-4opt8sub"]
    assert workers.chosen(store, units, requests, "nothing") == []


def test_an_mopd_stage_waits_for_the_stage_before_it(tmp_path):
    """A stage's student is the stage before it (``posttrain:<name>``): it is not ready until that run
    has finished, and picking it picks the stages before it and their teachers."""
    from pretrain import rundir
    from reproduce.estimate import model_path
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    units, requests = workers.needs("mopd", store)
    fig22, _ = workers.needs("fig22", store)      # Fig. 22 reads the weights of Type I's cascade, no evaluation
    assert [u for u in fig22 if u[0] == "eval"] == [] and ("posttrain", "mopd-fa.T1+T2") in fig22
    first, second = ("posttrain", "mopd-fa.T1+T2"), ("posttrain", "mopd-fa.T1+T2-lf.T1+T3")
    assert requests[second[1]]["student"] == "posttrain:mopd-fa.T1+T2"
    assert model_path(store, "posttrain:mopd-fa.T1+T2") == store.home / "posttrain" / "mopd-fa.T1+T2"
    picked = workers.chosen(store, units, requests, second[1])
    assert first in picked and ("pretrain", "lf-tiny-T1+T3@fa+lf+ea") in picked
    assert ("posttrain", "mopd-fa.T1+T2-lf.T1+T3-ea.T1+T4") not in picked
    for run in {r for kind, r in picked if kind == "pretrain"}:             # every pre-training finished
        (store.home / "pretrain" / run).mkdir(parents=True)
        (store.home / "pretrain" / run / rundir.SUMMARY).write_text("{}")
    assert workers.ready(store, first, requests) and not workers.ready(store, second, requests)
    (store.home / "posttrain" / first[1]).mkdir(parents=True)
    (store.home / "posttrain" / first[1] / rundir.SUMMARY).write_text("{}")
    assert workers.ready(store, second, requests)


def test_a_worker_asks_for_a_units_inputs_before_the_unit(tmp_path, monkeypatch):
    """Building MOPD's third stage asks the store for the family base, the student, both stages before
    it and the teacher first, as the table does: a finished input returns at once, but the store then
    knows how it was made (one carried without weights is rebuilt before it is loaded; a stage of
    other settings is rebuilt before the next trains on it)."""
    from reproduce.estimate import model_path
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    units, requests = workers.needs("mopd", store)
    asked = []
    monkeypatch.setattr(Store, "pretrained", lambda self, **request: asked.append(("pretrain", request)))

    def posttrained(self, name, method, student, teacher=None, **overrides):
        asked.append(("posttrain", name))
        return self.home / "posttrain" / name
    monkeypatch.setattr(Store, "posttrained", posttrained)
    third = "mopd-fa.T1+T2-lf.T1+T3-ea.T1+T4"
    workers.build(store, ("posttrain", third), requests)
    stages = [a[1] for a in asked if a[0] == "posttrain"]
    assert stages == ["mopd-fa.T1+T2", "mopd-fa.T1+T2-lf.T1+T3", third]
    assert asked.index(("posttrain", stages[0])) > asked.index(("pretrain", requests["fa+lf+ea-tiny-4opt4sub"]))
    teacher = requests[third]["teacher"]
    assert ("pretrain", requests[teacher]) in asked[:asked.index(("posttrain", third))]
    assert model_path(store, requests[third]["student"]) == store.home / "posttrain" / stages[1]


def test_a_claims_seed_plans_only_the_claims_cell(tmp_path):
    """The workers' plan narrows with the table (`shaping.region_cells`): a seed built with
    ``--claims`` has Fig. 7's 4opt8sub/long runs, their student and the teacher's evaluation (OPD's
    ceiling), nothing else, and Figs. 3-4 without Fig. 4's checkpoint evaluations."""
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None, seed=1, claims_only=True)
    units, _ = workers.needs("fig7", store)
    assert [key for kind, key in units if kind != "pretrain"] == [
        "fa-tiny", "fa-tiny-4opt8sub@student", "fig7-grpo-4opt8sub-long", "fig7-opd-4opt8sub-long"]
    assert [key for kind, key in units if kind == "pretrain"] == ["fa-tiny", "fa-tiny-4opt8sub"]
    full, _ = workers.needs("fig3-4", Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None))
    claims, _ = workers.needs("fig3-4", store)
    assert [u for u in full if u not in claims] and all("@" not in key for kind, key in claims if kind == "eval")
    full, _ = workers.needs("mopd", Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None))
    claims, _ = workers.needs("mopd", store)       # MOPD without Type II: its lf and ea stages, its lf teacher
    assert sorted(u for u in full if u not in claims) == [
        ("eval", "lf-tiny-T2+T3@fa+lf+ea"), ("posttrain", "mopd-fa.T1+T2-lf.T2+T3"),
        ("posttrain", "mopd-fa.T1+T2-lf.T2+T3-ea.T3+T4"), ("pretrain", "lf-tiny-T2+T3@fa+lf+ea")]
    full, _ = workers.needs("turnopd", Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None))
    claims, _ = workers.needs("turnopd", store)    # the TurnOPD claim compares TurnOPD with OPD: no TCOD-F2B
    assert [u for u in full if u not in claims] == [("posttrain", "turnopd-main-tcod")]


def test_a_claims_seeds_workers_build_for_a_claims_store(tmp_path, monkeypatch):
    """`run_workers` starts each worker with the store's claims, and a worker's store has them."""
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None, seed=1, claims_only=True)
    argv = workers.worker_command("fig7", store, 2)
    assert argv[:3] == [sys.executable, "-m", "reproduce.workers"] and "--claims" in argv
    assert "--claims" not in workers.worker_command("fig7", Store("tiny", tmp_path / "runs", tmp_path / "data"), 2)
    seen = []
    monkeypatch.setattr(workers, "needs", lambda table, s: seen.append((s.seed, s.claims_only)) or ([], {}))
    assert workers.main([*argv[3:], "--index", "0"]) == 0 and seen == [(1, True)]


def test_a_unit_that_fails_is_left_with_what_needs_it_and_the_rest_is_built(tmp_path, fake_pretrain, monkeypatch):
    import pretrain.train
    from reproduce.estimate import run_key
    fast = pretrain.train.main
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    units, requests = workers.needs("fig6", store)
    broken = [key for kind, key in units if kind == "pretrain"][1]

    def fails_once(argv):
        return 1 if argv[argv.index("--out") + 1].endswith("/" + broken) else fast(argv)
    monkeypatch.setattr(pretrain.train, "main", fails_once)
    _fake_evaluation(monkeypatch, [])
    result = []
    worker = threading.Thread(target=lambda: result.append(workers.work(store, units, requests, 0, 1, poll=0.01)),
                              daemon=True)
    worker.start()
    worker.join(30)
    assert result, "the worker waits forever for a unit whose input failed"
    done, failed = result[0]
    evaluation_of_broken = [u for u in units if u[0] == "eval" and run_key(u[1]) == broken]
    assert failed == [("pretrain", broken), *evaluation_of_broken] and evaluation_of_broken
    assert done == len(units) - len(failed)                                 # the others are all built
    assert broken not in fake_pretrain and len(fake_pretrain) == sum(k == "pretrain" for k, _ in units) - 1


def _carried_without_weights(run: Path, steps: list[int]) -> None:
    """A finished pre-training run as a carry restores it: its tokenizer, records and checkpoint
    states, and no weights."""
    for step in steps:
        (run / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").write_text(json.dumps({"step": step}))
    (run / "tokenizer").mkdir()
    (run / "tokenizer" / "tokenizer.json").write_text(json.dumps({"trained_for": run.name}))
    (run / "summary.json").write_text(json.dumps({"checkpoint": f"checkpoints/step_{steps[-1]:06d}"}))


def test_a_post_trainings_carried_student_and_teacher_train_again_side_by_side(tmp_path, fake_pretrain, monkeypatch):
    """An OPD run whose student and teacher were both restored without weights: the store trains each
    again only when the run loads it, so one worker would train them one after the other while the
    other idled. They are units of their own: two workers train them at once, then the run trains."""
    import posttrain.train
    import pretrain.train
    log = []
    steps = [Store("tiny").budget["student_step"], 2 * Store("tiny").budget["student_step"]]

    def train_again(argv):
        out = Path(argv[argv.index("--out") + 1])
        log.append(("pretrain start", out.name, time.time()))
        time.sleep(0.3)
        for step in steps:
            (out / "checkpoints" / f"step_{step:06d}").mkdir(parents=True)
            (out / "checkpoints" / f"step_{step:06d}" / "trainer_state.json").write_text("{}")
            (out / "checkpoints" / f"step_{step:06d}" / "model.safetensors").write_bytes(b"\0")
        (out / "summary.json").write_text(json.dumps({"checkpoint": f"checkpoints/step_{steps[-1]:06d}"}))
        log.append(("pretrain end", out.name, time.time()))
        return 0
    monkeypatch.setattr(pretrain.train, "main", train_again)

    class Trainer:
        def __init__(self, cfg, student, teacher, out, data, resume):
            self.out = out

        def fit(self):
            log.append(("posttrain", self.out.name, time.time()))
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / "summary.json").write_text("{}")
    monkeypatch.setattr(posttrain.train, "Trainer", Trainer)
    stores = [Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None) for _ in range(2)]
    units, requests = workers.needs("fig7", stores[0])
    units = workers.chosen(stores[0], units, requests, "fig7-opd-4opt8sub-short")
    carried = [key for kind, key in units if kind == "pretrain"]
    assert carried == ["fa-tiny", "fa-tiny-4opt8sub"]               # the teacher (and family base), the student
    for key in carried:
        _carried_without_weights(stores[0].home / "pretrain" / key, steps)
    assert workers.trained_again(stores[0], units, requests) == set(carried)
    _two_workers(stores, units, requests)
    starts = {name: at for what, name, at in log if what == "pretrain start"}
    ends = {name: at for what, name, at in log if what == "pretrain end"}
    assert sorted(starts) == carried and len(log) == 5                   # each trained again once, the run once
    assert starts["fa-tiny"] < ends["fa-tiny-4opt8sub"] and starts["fa-tiny-4opt8sub"] < ends["fa-tiny"]
    assert log[-1][:2] == ("posttrain", "fig7-opd-4opt8sub-short") and log[-1][2] >= max(ends.values())
    assert workers.trained_again(stores[0], units, requests) == set()   # built: nothing loads them any more
