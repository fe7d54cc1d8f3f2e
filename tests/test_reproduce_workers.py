"""Several workers on one table (reproduce.workers): each artifact built once, the family base first,
two at a time, and nothing the plan can only guess."""
import json
import threading
import time

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
        return summary
    monkeypatch.setattr(engine.evaluate, "load_model_and_tokenizer", lambda run_dir: (None, None, run_dir))
    monkeypatch.setattr(engine.evaluate, "evaluate", evaluate)


def test_two_workers_build_a_tables_models_once_each_two_at_a_time_base_first(tmp_path, fake_pretrain, monkeypatch):
    import pretrain.train
    log = []
    fast = pretrain.train.main

    def slow(argv):
        out = argv[argv.index("--out") + 1]
        log.append(("pretrain start", out.rsplit("/", 1)[-1], time.time()))
        time.sleep(0.3)
        return fast(argv)
    monkeypatch.setattr(pretrain.train, "main", slow)
    _fake_evaluation(monkeypatch, log)
    stores = [Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None) for _ in range(2)]
    units, requests = workers.needs("fig6", stores[0])
    assert units[0] == ("pretrain", "fa-tiny") and sum(k == "pretrain" for k, _ in units) == 4
    t0 = time.time()
    threads = [threading.Thread(target=workers.work, args=(s, units, requests, i, 2), kwargs={"poll": 0.05})
               for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    assert sorted(fake_pretrain) == sorted(key for kind, key in units if kind == "pretrain")    # each once
    starts = {name: at for what, name, at in log if what == "pretrain start"}
    base_done = starts["fa-tiny"] + 0.3
    assert all(at >= base_done - 0.05 for name, at in starts.items() if name != "fa-tiny")     # base first
    assert len([e for e in log if e[0] == "eval start"]) == 4                                 # each model once
    assert wall < 0.3 * 4 + 0.2 * 4 - 0.5           # serial: 2.0 s; two at a time after the base: ~1.3 s


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
