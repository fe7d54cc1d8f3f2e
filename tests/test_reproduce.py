"""The reproduction machinery: artifact reuse, family tokenizers, table cells, the CLI's errors.

Training itself is replaced by a recorder here (the stages have their own tests); what is tested
is the bookkeeping that makes `make reproduce-all` build each artifact once and correctly.
"""
import json
import sys
from pathlib import Path

import pytest

from analysis.run_logs import cell
from reproduce.store import ReproductionError, Store
from analysis.report import Report, md_table


def test_family_members_share_the_base_tokenizer_and_are_built_once(tmp_path, fake_pretrain):
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    sub = store.pretrained(patterns="4opt8sub")
    assert fake_pretrain == ["fa-tiny", "fa-tiny-4opt8sub"]          # the base first, for its tokenizer
    assert json.loads((sub / "tokenizer" / "tokenizer.json").read_text()) == {"trained_for": "fa-tiny"}
    assert store.pretrained() == tmp_path / "runs" / "tiny" / "pretrain" / "fa-tiny"
    store.pretrained(patterns="4opt8sub")
    assert fake_pretrain == ["fa-tiny", "fa-tiny-4opt8sub"]          # reused, not retrained


def test_two_reproductions_sharing_a_store_build_each_model_once(tmp_path, fake_pretrain, monkeypatch):
    import threading
    import time

    import pretrain.train
    fast_main = pretrain.train.main

    def slow_main(argv):          # long enough that the second builder arrives mid-build
        time.sleep(0.3)
        return fast_main(argv)
    monkeypatch.setattr(pretrain.train, "main", slow_main)
    logs, results = [], []
    stores = [Store("tiny", tmp_path / "runs", tmp_path / "data", log=logs.append) for _ in range(2)]
    threads = [threading.Thread(target=lambda s=s: results.append(s.pretrained(patterns="4opt8sub"))) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake_pretrain == ["fa-tiny", "fa-tiny-4opt8sub"]          # each built once, not twice
    assert results == [tmp_path / "runs" / "tiny" / "pretrain" / "fa-tiny-4opt8sub"] * 2
    assert any(m.startswith("[reproduce] waiting for another process") for m in logs)


def test_a_failed_stage_is_an_error_not_a_silent_artifact(tmp_path, monkeypatch):
    import pretrain.train
    monkeypatch.setattr(pretrain.train, "main", lambda argv: 3)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / "x")
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    with pytest.raises(ReproductionError, match="pre-training"):
        store.pretrained()
    with pytest.raises(ReproductionError, match="no checkpoint at step 200"):
        store.checkpoint(tmp_path / "runs" / "tiny" / "pretrain" / "fa-tiny")


def _summary(rows):
    return {"table": [{"domain": d, "split": s, "difficulty": k, "tasks": n, "avg@8": a, "pass@8": p}
                      for d, s, k, n, a, p in rows]}


def test_cell_weights_domains_by_their_task_counts():
    s = _summary([("fa", "ID", "long", 3, 10.0, 50.0), ("lf", "ID", "long", 1, 50.0, 100.0),
                  ("fa", "OOD", "long", 4, 0.0, 0.0)])
    assert cell(s, "ID", "long") == pytest.approx(20.0)
    assert cell(s, "ID", "long", "pass@8") == pytest.approx(62.5)
    assert cell(s, "ID", "long", domain="lf") == 50.0
    assert cell(s, "ID", "short") != cell(s, "ID", "short")        # NaN for a missing cell


def test_a_posttrain_runs_own_final_evaluation_is_reused_only_under_the_same_protocol(tmp_path):
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    run = tmp_path / "runs" / "tiny" / "posttrain" / "x"
    (run / "eval" / "step_000006").mkdir(parents=True)
    (run / "eval" / "step_000006" / "summary.json").write_text(json.dumps(_summary([])))
    (run / "summary.json").write_text(json.dumps({"checkpoint": str(run / "c"), "final_eval": {"step": 6}}))
    cfg = {"eval_k": 8, "eval_tasks_per_cell": store.budget["eval_tasks_per_cell"], "seed": 0}
    (run / "train_config.json").write_text(json.dumps({"config": cfg}))
    assert store.evaluation(run)["_dir"] == str(run / "eval" / "step_000006")
    (run / "train_config.json").write_text(json.dumps({"config": {**cfg, "eval_k": 2}}))
    assert store._final_eval(run) is None          # another protocol: it would be evaluated afresh
    (run / "train_config.json").write_text(json.dumps({"config": {**cfg, "seed": 1}}))
    assert store._final_eval(run) is None          # another seed's sampling: not this store's evaluation
    (run / "train_config.json").write_text(json.dumps({"config": cfg}))
    narrow = {**_summary([]), "splits": ["ID"], "difficulties": ["long"]}
    (run / "eval" / "step_000006" / "summary.json").write_text(json.dumps(narrow))
    assert store._final_eval(run, splits=("ID",), difficulties=("long",))["difficulties"] == ["long"]
    assert store._final_eval(run, splits=("ID",)) is None                       # every bin was asked for
    assert store._final_eval(run, difficulties=("long",)) is None              # and OOD too


def test_a_cached_evaluation_is_reused_only_under_the_stores_protocol(tmp_path, monkeypatch):
    import engine.evaluate
    calls = []
    monkeypatch.setattr(engine.evaluate, "load_model_and_tokenizer", lambda run_dir: (None, None, tmp_path))
    monkeypatch.setattr(engine.evaluate, "evaluate", lambda *a, **kw: calls.append(kw) or {"fresh": True})
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    model = tmp_path / "model"
    out = store._eval_dir(model, None)
    out.mkdir(parents=True)
    per_cell = store.budget["eval_tasks_per_cell"]
    old = {"k": 8, "seed": 0, **_summary([("fa", "ID", "short", per_cell, 50.0, 100.0),
                                           ("fa", "ID", "all", 3 * per_cell, 50.0, 100.0)])}
    (out / "summary.json").write_text(json.dumps(old))          # written before max_tasks_per_cell existed
    assert store.evaluation(model) == old and not calls
    (out / "summary.json").write_text(json.dumps({**old, "max_tasks_per_cell": per_cell + 1}))
    assert store.evaluation(model) == {"fresh": True} and calls[-1]["max_tasks_per_cell"] == per_cell
    (out / "summary.json").write_text(json.dumps({**old, "k": 2}))
    store.evaluation(model)
    assert len(calls) == 2
    (out / "summary.json").write_text(json.dumps({**old, "splits": ["ID"]}))   # `evaluate --splits ID`
    store.evaluation(model)
    assert len(calls) == 3
    (out / "summary.json").write_text(json.dumps({**old, "splits": ["ID"]}))
    assert store.evaluation(model, splits=("ID",)) == {**old, "splits": ["ID"]} and len(calls) == 3
    assert store.evaluation(model, splits=("ID",), difficulties=("mid",)) == {**old, "splits": ["ID"]}
    (out / "summary.json").write_text(json.dumps({**old, "splits": ["ID"], "difficulties": ["mid"]}))
    store.evaluation(model, splits=("ID",), difficulties=("long",))
    assert len(calls) == 4 and calls[-1]["difficulties"] == ("long",) and calls[-1]["splits"] == ("ID",)


def test_a_run_recorded_before_a_setting_existed_is_not_rebuilt_for_its_default(tmp_path):
    from reproduce.store import _changes
    record = tmp_path / "train_config.json"
    record.write_text(json.dumps({"student": "s", "config": {"lr": 1e-4}}))
    wanted = {"student": "s", "config": {"lr": 1e-4, "eval_splits": "ID,OOD"}}
    assert _changes(record, wanted, {"eval_splits": "ID,OOD"}) == ""
    assert "eval_splits" in _changes(record, {**wanted, "config": {"lr": 1e-4, "eval_splits": "ID"}},
                                     {"eval_splits": "ID,OOD"})
    assert "lr=" in _changes(record, {**wanted, "config": {"lr": 3e-4, "eval_splits": "ID,OOD"}},
                             {"eval_splits": "ID,OOD"})


def test_markdown_tables_and_reports():
    text = md_table(["a", "b"], [["x", 12.25], ["y", float("nan")], ["z", None], ["w", 0.04567], ["v", 0.0]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x | 12.2 |", "| y | – |", "| z | – |", "| w | 0.0457 |",
                                 "| v | 0.0 |"]
    r = Report("t")
    r.add("cap", ["a"], [[1]])
    assert r.sections[0].startswith("**cap**") and "| 1 |" in r.sections[0]


def test_cli_lists_tables_and_refuses_bad_input(capsys):
    from reproduce.cli import REPRODUCTIONS, main
    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(REPRODUCTIONS)
    assert {"fig3-4", "table1", "fig6", "fig7", "fig9-10", "table4", "mopd", "fig22", "turnopd",
            "turnopd-ablation"} <= set(listed)
    assert main(["fig99", "--scale", "tiny"]) == 2
    assert main(["fig3-4", "--scale", "huge"]) == 2
    assert main(["all", "--scale", "tiny", "--jobs", "0"]) == 2
    assert main(["all", "--scale", "tiny", "--only", "fig7-grpo-*"]) == 2       # --only: part of one table
    assert main(["fig6,fig99", "--scale", "tiny"]) == 2
    assert main(["fig6,fig7", "--scale", "tiny", "--only", "fig7-grpo-*"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("scale: ")]
    assert len(err) == 6 and all(line.startswith("error:") for line in err)
    assert "fig99" in err[4]


def test_cli_builds_a_comma_list_of_tables_in_its_order(tmp_path, monkeypatch):
    import reproduce.cli as cli
    built = []
    monkeypatch.setattr(cli, "reproduce_seeds", lambda table, stores, **kw: built.append(table))
    assert cli.main(["table4,fig7", "--scale", "tiny", "--root", str(tmp_path)]) == 0
    assert built == ["table4", "fig7"]


def test_training_curves_plot_every_logged_metric_and_refuse_a_missing_run(tmp_path):
    from analysis.curves import main as curves_main
    for name, offset in (("a", 0.0), ("b", 0.5)):
        run = tmp_path / name
        run.mkdir()
        records = [{"step": s, "reward": offset + s / 10, "success": s / 10, "kl": None} for s in (1, 2, 3)]
        records.append({"step": 3, "eval": True, "ID_avg@8": 40.0 + offset, "train_wall_s": 9.0})
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "curves"
    assert curves_main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.glob("*.png")) == ["eval_ID_avg8.png", "reward.png", "success.png"]
    import pandas as pd
    table = pd.read_csv(out / "curves.csv")
    assert len(table) == 8 and set(table["run"]) == {"a", "b"}
    assert curves_main([str(tmp_path / "missing")]) == 2


def test_curves_compare_runs_by_step_by_time_and_time_to_target(tmp_path):
    from analysis.curves import main as curves_main
    # "fast" reaches the reference's final accuracy (30) after 40 s of training, "slow" after 100 s
    for name, walls, accs in (("slow", (50, 100), (20.0, 30.0)), ("fast", (20, 40), (25.0, 30.0))):
        run = tmp_path / name
        run.mkdir()
        records = []
        for step, wall, acc in zip((2, 4), walls, accs):
            records.append({"step": step, "reward": 0.1, "train_wall_s": float(wall)})
            records.append({"step": step, "eval": True, "ID_avg@8": acc, "train_wall_s": float(wall)})
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    runs = [str(tmp_path / "slow"), str(tmp_path / "fast")]
    assert curves_main([*runs, "--out", str(tmp_path / "c"), "--reference", "slow"]) == 0
    text = (tmp_path / "c" / "comparison.md").read_text()
    assert "| fast | 40.0 | 2.5 |" in text and "| slow | 100.0 | 1.0 |" in text     # time to target, speedup
    assert "| slow | 0 | – | – |" in text and "| fast | 4 | 4 | 30.0 |" in text      # least time: 40 s
    assert curves_main([*runs, "--out", str(tmp_path / "c"), "--reference", "other"]) == 2
    (tmp_path / "noeval").mkdir()
    (tmp_path / "noeval" / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.0}) + "\n")
    assert curves_main([*runs, str(tmp_path / "noeval"), "--out", str(tmp_path / "c"), "--reference", "noeval"]) == 2


def test_seeds_merge_numbers_into_mean_and_se_and_keep_what_agrees():
    from analysis.report import merge_seeds
    reports = []
    for seed, (acc, kl, label) in enumerate([(10.0, 0.2, "T1"), (14.0, 0.4, "T2"), (12.0, float("nan"), "T1")]):
        r = Report("t")
        r.add("cap", ["method", "ID avg@8", "KL", "paper", "pattern"], [["OPD", acc, kl, 36.9, label]])
        r.add("per task", ["task"], [[f"t{i}"] for i in range(seed + 1)])   # rows differ by seed
        r.add("groups", ["group", "n"], [[f"g{seed}", 1]])                    # same count, other rows
        r.add("pca", ["x"], [[float(seed)]], merge=False)
        r.results = {"OPD": {"acc": acc, "paper": 36.9}}
        r.notes = ["agrees", f"only seed {seed}"]
        reports.append(r)
    merged = merge_seeds(reports, [0, 1, 2])
    # SE over seeds = sample std / sqrt(n): 2 / sqrt(3) and 0.1414 / sqrt(2)
    assert merged.tables[0].rows == [["OPD", "12.0 ± 1.2", "0.3 ± 0.1 (n=2)", 36.9, "T1 / T2 / T1"]]
    assert "mean ± SE over 3 seeds" in merged.tables[0].caption
    assert [t.caption for t in merged.tables[1:]] == [f"{name} (seed {s})" for name in ("per task", "groups", "pca")
                                                      for s in range(3)]
    assert merged.results["merged"]["OPD"]["acc"]["mean"] == pytest.approx(12.0)
    assert merged.results["merged"]["OPD"]["acc"]["per_seed"] == [10.0, 14.0, 12.0]
    assert merged.results["merged"]["OPD"]["acc"]["se"] == pytest.approx(2 / 3 ** 0.5)
    assert merged.results["merged"]["OPD"]["paper"] == {"mean": 36.9, "std": 0.0, "se": 0.0, "n": 3,
                                                        "per_seed": [36.9] * 3}
    assert merged.notes == ["agrees", "seed 0: only seed 0", "seed 1: only seed 1", "seed 2: only seed 2"]


def seed_table(store) -> Report:
    """A fake reproduction whose one number is its store's seed (the merge's mean over 0, 1, 2 is 1)."""
    r = Report("fake")
    r.add("numbers", ["x"], [[float(store.seed)]])
    r.results = {"x": float(store.seed)}
    return r


def test_each_seed_trains_in_its_own_home_and_the_cli_writes_the_merged_table(tmp_path, fake_pretrain, monkeypatch):
    from reproduce import cli as repro
    seeded = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None, seed=2)
    assert seeded.home == tmp_path / "runs" / "tiny-seed2"
    assert seeded.posttrain_config("opd").seed == 2
    assert seeded.pretrained() == tmp_path / "runs" / "tiny-seed2" / "pretrain" / "fa-tiny"
    assert seeded.describe()["seed"] == 2

    monkeypatch.setitem(repro.REPRODUCTIONS, "fake", ("a fake table", seed_table))
    args = ["fake", "--scale", "tiny", "--root", str(tmp_path / "out"), "--seeds", "3"]
    assert repro.main(args) == 0
    for home in ("tiny", "tiny-seed1", "tiny-seed2"):
        assert (tmp_path / "out" / home / "fake" / "table.md").is_file()
    seeds_md = (tmp_path / "out" / "tiny" / "fake" / "seeds.md").read_text()
    assert "| 1.0 ± 0.577 |" in seeds_md and "3 seeds: 0, 1, 2" in seeds_md     # 0, 1, 2: SE = 1 / sqrt(3)
    config = json.loads((tmp_path / "out" / "tiny" / "fake" / "seeds_config.json").read_text())
    assert [store["seed"] for store in config["stores"]] == [0, 1, 2]
    merged = json.loads((tmp_path / "out" / "tiny" / "fake" / "seeds_results.json").read_text())
    assert merged["merged"]["x"] == {"mean": 1.0, "std": 1.0, "se": pytest.approx(3 ** -0.5), "n": 3,
                                     "per_seed": [0.0, 1.0, 2.0]}
    assert repro.main(args[:-1] + ["0"]) == 2


def test_one_tables_seeds_run_side_by_side_then_merge(tmp_path, monkeypatch):
    """``--seeds 3 --jobs 2`` on one table: one process per seed (``--seed s``), then the merge;
    ``--seed`` alone builds that seed's table only."""
    from reproduce import cli as repro

    monkeypatch.setitem(repro.REPRODUCTIONS, "fake", ("a fake table", seed_table))
    spawned = []

    def in_process(keys, jobs, command, log_dir, say=print):      # run_tables, recording what it would start
        for key in keys:
            argv = command(key)
            spawned.append((key, argv[argv.index("--seed") + 1], jobs, log_dir(key)))
            assert argv[:4] == [sys.executable, "-m", "reproduce", "fake"]
        return []
    monkeypatch.setattr(repro, "run_tables", in_process)
    root = tmp_path / "out"
    base = ["fake", "--scale", "tiny", "--root", str(root), "--data-dir", str(tmp_path / "data")]
    assert repro.main(base + ["--seed", "1"]) == 0 and not spawned
    assert (root / "tiny-seed1" / "fake" / "table.md").is_file() and not (root / "tiny" / "fake").exists()
    seed1_table = root / "tiny-seed1" / "fake" / "table.md"
    seed1_table.write_text("written by seed 1's own process")
    assert repro.main(base + ["--seeds", "3", "--jobs", "2"]) == 0
    assert [(k, s, j) for k, s, j, _ in spawned] == [("0", "0", 2), ("1", "1", 2), ("2", "2", 2)]
    assert spawned[2][3] == root / "tiny-seed2" / "fake"                       # each seed logs in its own folder
    assert "| 1.0 ± 0.577 |" in (root / "tiny" / "fake" / "seeds.md").read_text()
    assert seed1_table.read_text() == "written by seed 1's own process"           # the merge only reads
    assert not (root / "tiny-seed2" / "fake" / "table.md").exists()
    for bad in (["--seed", "1", "--seeds", "2"], ["--seed", "-1"]):
        assert repro.main(base + bad) == 2
    commands = []                                        # every table, one seed: each process gets that seed
    monkeypatch.setattr(repro, "run_tables", lambda keys, jobs, command, log_dir, say=print:
                        commands.extend(command(k) for k in keys) or [])
    assert repro.main(["all"] + base[1:] + ["--seed", "1", "--jobs", "2"]) == 0
    assert commands and all(c[c.index("--seed") + 1] == "1" and "--seeds" not in c for c in commands)



def test_a_posttrain_run_is_reused_only_under_the_settings_it_was_built_with(tmp_path, monkeypatch):
    import dataclasses

    import posttrain.train
    built = []

    class FakeTrainer:
        def __init__(self, cfg, student, teacher, out, data, resume):
            self.cfg, self.student, self.teacher, self.out, self.resume = cfg, student, teacher, out, resume

        def fit(self):
            built.append(self.cfg.lr)
            resumed.append(self.resume)
            self.out.mkdir(parents=True, exist_ok=True)
            ckpt = self.out / "checkpoints" / f"step_{self.cfg.steps:06d}"
            ckpt.mkdir(parents=True, exist_ok=True)
            (ckpt / "model.safetensors").write_bytes(b"")          # a checkpoint has weights (see reproduce.carry)
            (self.out / "train_config.json").write_text(json.dumps(
                {"config": dataclasses.asdict(self.cfg), "student": str(self.student),
                 "teacher": str(self.teacher) if self.teacher else None}))
            (self.out / "summary.json").write_text("{}")
    monkeypatch.setattr(posttrain.train, "Trainer", FakeTrainer)
    logs, resumed = [], []
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=logs.append)
    student, teacher = tmp_path / "s", tmp_path / "t"
    run = store.posttrained("x", "opd", student, teacher)
    assert store.posttrained("x", "opd", student, teacher) == run and built == [1e-4]       # reused
    store.posttrained("x", "opd", student, teacher, lr=3e-4)
    assert built == [1e-4, 3e-4] and "lr=0.0001 (now 0.0003)" in logs[-2] and resumed[-1] is False
    store.posttrained("x", "opd", student, tmp_path / "other teacher", lr=3e-4)
    assert len(built) == 3 and "teacher=" in logs[-2]
    # only longer (the lr is constant): the run trains on from its last checkpoint instead of restarting
    steps = store.posttrain_config("opd").steps
    store.posttrained("x", "opd", student, tmp_path / "other teacher", lr=3e-4, steps=steps + 4)
    assert resumed[-1] is True and (run / "checkpoints" / f"step_{steps:06d}").is_dir()
    assert f"extending it to {steps + 4}" in logs[-2]
    store.posttrained("x", "opd", student, tmp_path / "other teacher", lr=3e-4, steps=steps)   # shorter: rebuilt
    assert resumed[-1] is False and not (run / "checkpoints" / f"step_{steps + 4:06d}").exists()
    store.posttrained("y", "turnopd", student, teacher)      # TurnOPD's blend weight depends on the total steps:
    store.posttrained("y", "turnopd", student, teacher, steps=steps + 4)      # a longer run is a new run
    assert resumed[-2:] == [False, False] and "rebuilding it" in logs[-2]


def test_each_method_trains_at_its_own_budget(tmp_path, monkeypatch):
    from reproduce import store as store_module
    small = store_module.BUDGETS["small"]
    assert small["posttrain_per_method"]["opd"] == small["posttrain_per_method"]["turnopd"] \
        == small["posttrain_per_method"]["tcod"]          # the distillation family shares one budget
    assert 0 < small["posttrain"]["ckpt_every"] < small["posttrain_per_method"]["opd"]["steps"]   # resumable
    budgets = {"tiny": {**store_module.BUDGETS["tiny"], "posttrain": dict(steps=6, lr=1e-4),
                        "posttrain_per_method": {"opd": dict(steps=9, lr=7e-4)}}}
    monkeypatch.setattr(store_module, "BUDGETS", budgets)
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    assert (store.posttrain_config("opd").lr, store.posttrain_config("opd").steps) == (7e-4, 9)
    assert (store.posttrain_config("grpo").lr, store.posttrain_config("grpo").steps) == (1e-4, 6)
    assert store.posttrain_config("opd", lr=2e-4).lr == 2e-4                # a table's override still wins


def test_mopd_stages_are_named_by_the_teachers_distilled_so_far(tmp_path):
    """A stage is one store run named by its cascade prefix, so regimes that begin alike share it; a
    template set has one spelling, so no regime pre-trains a teacher another regime already has
    (random_shared draws ea = T4+T3, Type II's T3+T4)."""
    from reproduce.merge import stage_name
    assert stage_name([("fa", "T2+T1"), ("lf", "T3")]) == stage_name([("fa", "T1+T2"), ("lf", "T3")]) \
        == "mopd-fa.T1+T2-lf.T3"
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    assert store.corpus_config(patterns="T4+T3") == store.corpus_config(patterns="T3+T4")
    assert store.corpus_config(patterns="T4+T3").name == "fa-tiny-T3+T4"
    assert store.corpus_config(patterns="4opt4sub").patterns == "4opt4sub"          # a preset keeps its name


def test_sample_information_separates_a_shared_pattern_from_task_specific_actions():
    from reproduce.pretraining import sample_information
    samples = [{"split": "ID", "task": t, "pattern": "T1", "actions": [f"make {t}", "done"]}
               for t in "abcd" for _ in range(8)]
    samples += [{"split": "OOD", "task": "z", "pattern": "D1", "actions": []}]         # another split: ignored
    info = sample_information(samples)
    assert info["I(task;pattern)"] == pytest.approx(0.0, abs=1e-9)                  # one pattern for every task
    assert info["I(task;knowledge)"] == pytest.approx(2.0, abs=0.1)                  # the actions name the task


def test_the_update_direction_note_says_when_a_method_never_moved():
    from reproduce.shaping import direction_note
    assert direction_note(0.1, 0.9).endswith("— ours agrees.")
    assert direction_note(0.9, 0.1).endswith("— ours does not.")
    idle = direction_note(float("nan"), 0.94)
    assert idle.startswith("GRPO made no parameter update") and "nan" not in idle and "agrees" not in idle


def _samples(per_task: dict[str, list[int]], difficulty: str) -> list[dict]:
    """Evaluation samples: task -> its K outcomes (1 = success), all ID tasks of one difficulty."""
    return [{"task": t, "split": "ID", "difficulty": difficulty, "success": bool(x)}
            for t, outcomes in per_task.items() for x in outcomes]


def test_a_verdict_needs_a_paired_difference_beyond_two_standard_errors_on_the_papers_side():
    from analysis.measures import paired_difference, verdict
    assert verdict(5.0, 2.4, +1) == "agrees" and verdict(-5.0, 2.4, -1) == "agrees"
    assert verdict(5.0, 2.4, -1) == "disagrees"
    assert verdict(5.0, 2.5, +1) == "cannot tell"                     # exactly two SE is not beyond
    assert verdict(5.0, float("nan"), +1) == "cannot tell"            # one task: no SE, no verdict
    a = _samples({"t1": [1, 0], "t2": [0, 0], "t3": [1, 1]}, "long")
    b = _samples({"t1": [0, 0], "t2": [0, 0], "t3": [1, 0]}, "long")
    assert paired_difference(a, b, "ID", "long")[0] == pytest.approx(100 / 3)                # avg@k per task
    assert paired_difference(a, b, "ID", "long", metric="pass")[0] == pytest.approx(100 / 3)  # t1 only
    assert paired_difference(b, a, "ID", "long", metric="pass")[:1] == (pytest.approx(-100 / 3),)
    with pytest.raises(ValueError):
        paired_difference(a, b, "ID", metric="best")


def test_seeds_are_pooled_task_by_task_so_two_noisy_seeds_can_reach_a_verdict_together():
    from analysis.measures import contrast
    from analysis.report import merge_seeds
    before = _samples({f"t{i}": [0, 0] for i in range(4)}, "long")
    seed0 = _samples({"t0": [1, 0], "t1": [0, 0], "t2": [1, 0], "t3": [0, 0]}, "long")   # +50 on t0, t2
    seed1 = _samples({"t0": [0, 0], "t1": [1, 0], "t2": [0, 0], "t3": [1, 0]}, "long")   # +50 on t1, t3
    per_seed = [contrast(after, before, "ID", "long", +1) for after in (seed0, seed1)]
    assert [(c["delta"], c["verdict"]) for c in per_seed] == [(25.0, "cannot tell")] * 2   # ± 14.4 each
    reports = [Report("t", results={"contrasts": {"gain": c}}) for c in per_seed]
    merged = merge_seeds(reports, [0, 1])
    pooled = merged.results["contrasts"]["gain"]
    assert (pooled["delta"], pooled["se"], pooled["tasks"], pooled["seeds"]) == (25.0, 0.0, 4, 2)
    assert pooled["verdict"] == "agrees"                  # every task gained 25 points on average over seeds
    assert merged.tables[-1].rows == [["gain", 25.0, 0.0, 4, 2, "yes", None, "agrees"]]
    assert "contrasts" not in merge_seeds([reports[0], Report("t")], [0, 1]).results   # a seed without them


def test_a_pair_must_be_the_same_task_and_different_tasks_are_compared_unpaired():
    from analysis.measures import contrast, paired_difference, pool_contrasts
    a = _samples({"t0": [1, 1], "t1": [1, 1], "t2": [0, 0]}, "long")
    b = _samples({"t0": [0, 0], "t1": [0, 0], "t2": [0, 0]}, "long")
    for x in a:
        x["task_key"] = x["task"]
    for x in b:
        x["task_key"] = "other" if x["task"] == "t2" else x["task"]     # same id, another task
    with pytest.raises(ValueError, match="name different tasks"):
        paired_difference(a, b, "ID", "long")
    c = contrast(a, b, "ID", "long", +1, paired=False)
    assert c["delta"] == pytest.approx(200 / 3) and c["se"] == pytest.approx((100 ** 2 / 3 / 3) ** 0.5)
    assert c["paired"] is False and "per_task" not in c and len(c["per_task_a"]) == 3
    pooled = pool_contrasts([c, c])
    assert (pooled["delta"], pooled["se"], pooled["seeds"]) == (c["delta"], c["se"], 2)


def test_table1_verdicts_follow_our_paired_numbers_not_the_papers():
    from reproduce.pretraining import MIXES, mixture_contrasts, mixture_verdicts

    def model(mid: int, long: int) -> list[dict]:      # solves the first ``mid`` / ``long`` of 8 tasks, always
        return (_samples({f"m{i}": [int(i < mid)] * 8 for i in range(8)}, "mid")
                + _samples({f"l{i}": [int(i < long)] * 8 for i in range(8)}, "long"))

    def scores(samples):
        return {f"{d} pass@8": 100.0 * sum(o["success"] for o in samples if o["difficulty"] == d) / 64
                for d in ("mid", "long")}
    paper_like = {"100/0/0": model(0, 0), "100/5/0": model(6, 0), "100/0/5": model(0, 5),
                  "100/100/50": model(8, 8), "100/100/100": model(8, 4)}
    assert set(paper_like) == {"/".join(map(str, m)) for m in MIXES}
    contrasts = mixture_contrasts(paper_like)
    assert contrasts["+5% long data, long"]["delta"] == pytest.approx(62.5)
    assert contrasts["+5% mid data, mid"]["paper"] == pytest.approx(51.05)
    assert contrasts["short-only vs full, mid"]["paper"] is None          # the paper gives no full-mix pass@8
    notes = " ".join(mixture_verdicts({k: scores(v) for k, v in paper_like.items()}, contrasts, 8))
    assert "below the full mix on both longer bins: agreement." in notes
    assert notes.count(": agrees") == 5 and "steps of 12 points" in notes
    composing = {**paper_like, "100/0/0": model(8, 8), "100/5/0": model(0, 0), "100/0/5": model(8, 8)}
    contrasts = mixture_contrasts(composing)
    notes = " ".join(mixture_verdicts({k: scores(v) for k, v in composing.items()}, contrasts, 0))
    assert "above the full mix on a longer bin: not the paper's result." in notes     # long +50 ± 18.9
    assert contrasts["+5% long data, long"]["verdict"] == "cannot tell"               # 0 ± 0: no change
    assert contrasts["+5% mid data, mid"]["verdict"] == "disagrees" and "steps of" not in notes
    nothing = {k: model(0, 0) for k in paper_like}                 # a model that solves nothing composes nothing
    notes = mixture_verdicts({k: scores(v) for k, v in nothing.items()}, mixture_contrasts(nothing), 1)
    assert notes[0].endswith("so this tests nothing.") and notes[1].count("cannot tell") == 2


def test_fig6_decides_whether_suboptimal_data_hurts_by_paired_differences():
    from reproduce.pretraining import quality_contrasts
    base = _samples({f"t{i}": [1, 1, 0, 0] for i in range(6)}, "long")
    worse = _samples({f"t{i}": [0, 0, 0, int(i == 0)] for i in range(6)}, "long")
    c = quality_contrasts({"4opt": base, "4opt4sub": base, "4opt8sub": worse})
    assert c["4opt8sub/long"]["verdict"] == "agrees" and c["4opt8sub/long"]["delta"] < 0
    assert c["4opt4sub/long"]["verdict"] == "cannot tell"          # identical: no difference
    c = quality_contrasts({"4opt": worse, "4opt4sub": worse, "4opt8sub": base})
    assert c["4opt8sub/long"]["verdict"] == "disagrees"


def test_tables_run_as_processes_at_most_jobs_at_once_in_order_and_failures_are_named(tmp_path):
    from reproduce.cli import run_tables
    # each fake table records when it started and ended; "bad" exits 3
    script = ("import sys, time, pathlib; t = sys.argv[1]; p = pathlib.Path(sys.argv[2]);"
              "p.joinpath(t + '.start').write_text(repr(time.time())); time.sleep(0.4);"
              "p.joinpath(t + '.end').write_text(repr(time.time())); print('log of', t); sys.exit(3 if t == 'bad' else 0)")
    todo = ["a", "b", "bad", "c", "d"]
    said = []
    failed = run_tables(todo, 2, lambda t: [sys.executable, "-c", script, t, str(tmp_path)],
                        lambda t: tmp_path / "out" / t, say=said.append)
    assert failed == ["bad"]
    spans = {t: (float((tmp_path / f"{t}.start").read_text()), float((tmp_path / f"{t}.end").read_text())) for t in todo}
    for t0, _ in spans.values():           # never more than two running at any start
        assert sum(s <= t0 < e for s, e in spans.values()) <= 2
    assert spans["a"][0] <= spans["c"][0] and spans["b"][0] <= spans["d"][0]   # started in dependency order
    assert any(s1 < s2 < e1 for s1, e1 in spans.values() for s2, _ in spans.values())  # two did run together
    assert (tmp_path / "out" / "c" / "reproduce.log").read_text().strip() == "log of c"
    assert sorted(line.split()[1] for line in said) == sorted(t + ":" for t in todo)
    assert any("bad: FAILED (exit 3)" in line for line in said)


def test_paired_gain_and_its_standard_error_decide_whether_the_gain_grows():
    from analysis.measures import paired_difference
    from reproduce.pretraining import gain_verdict

    def samples(rates):          # task -> number of the 8 samples that succeed
        return [{"split": "ID", "difficulty": t.split("-")[0], "task": t, "success": s < n}
                for t, n in rates.items() for s in range(8)]
    a = samples({"long-0": 8, "long-1": 4, "long-2": 6, "short-0": 8})
    b = samples({"long-0": 4, "long-1": 4, "long-2": 0, "short-0": 8})
    mean, se, n = paired_difference(a, b, "ID", "long")              # differences 50, 0, 75 points
    assert (n, mean) == (3, pytest.approx(125 / 3)) and se == pytest.approx(22.048, abs=1e-3)
    assert paired_difference(a, b, "ID", "short")[1] != paired_difference(a, b, "ID", "short")[1]  # one task
    assert paired_difference(a, b, "ID")[2] == 4
    with pytest.raises(ValueError, match="different ID/long tasks"):
        paired_difference(a, samples({"long-0": 1}), "ID", "long")
    for i, x in enumerate(a):                                          # other per-sample fields pair the same way
        x.update(stuck=i % 8 == 0, n_invalid=i % 2)
    for x in b:
        x.update(stuck=False, n_invalid=0)
    assert paired_difference(a, b, "ID", field="stuck")[:2] == (pytest.approx(12.5), 0.0)   # percent
    assert paired_difference(a, b, "ID", field="n_invalid")[:2] == (pytest.approx(0.5), 0.0)  # per episode
    clear = gain_verdict([7.0, 20.0, 40.0], [3.0, 3.0, 3.0])
    assert "ours wins at 3 of 3 (3 by more than two standard errors) and its gain grows" in clear
    assert clear.endswith("— agreement.")
    noisy = gain_verdict([34.4, 34.4, 37.5], [10.0, 10.0, 10.0])     # small fig3-4's: a 3-point rise
    assert "rises by 3.1 points from short to long, within two standard errors (28.3)" in noisy
    assert noisy.endswith("— agreement in sign only.")
    assert gain_verdict([10.0, 5.0, 40.0], [1.0, 1.0, 1.0]).endswith("does not grow with the horizon — agreement "
                                                                         "in sign only.")
    assert gain_verdict([-1.0, 5.0, 40.0], [1.0, 1.0, 1.0]).endswith("— not the paper's result.")


def test_two_processes_sharing_one_store_build_a_corpus_once(tmp_path):
    """What spreading a reproduction over machines relies on: the store's lock files, seen by two
    processes on one filesystem (here one machine), let exactly one build an artifact; the other
    waits, then reuses it."""
    import subprocess
    import sys
    script = ("import sys; from pathlib import Path; from reproduce.store import Store;"
              "s = Store('tiny', Path(sys.argv[1]) / 'runs', Path(sys.argv[1]) / 'data', log=print);"
              "print('DONE', s.corpus(n_pretrain_per_bin=40, n_posttrain_per_bin=2, n_test_per_bin=1))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=Path(__file__).parents[1],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    logs = "".join(out for out, _ in outs)
    assert logs.count("[reproduce] corpus") == 1                     # built by one process only
    done = {line.split()[1] for line in logs.splitlines() if line.startswith("DONE")}
    assert len(done) == 1 and len(logs.split("DONE")) == 3            # both got the same folder


def test_claims_reach_only_the_seeds_after_0_when_seeds_run_side_by_side(tmp_path, monkeypatch):
    from reproduce import cli as repro
    monkeypatch.setitem(repro.REPRODUCTIONS, "fake", ("a fake table", seed_table))
    spawned = {}

    def in_process(keys, jobs, command, log_dir, say=print):
        spawned.update({key: command(key) for key in keys})
        return []
    monkeypatch.setattr(repro, "run_tables", in_process)
    argv = ["fake", "--scale", "tiny", "--root", str(tmp_path / "out"), "--seeds", "3", "--jobs", "3", "--claims"]
    assert repro.main(argv) == 0
    assert {seed: "--claims" in command for seed, command in spawned.items()} == {"0": False, "1": True, "2": True}
    assert repro.main(["fake,fake", "--scale", "tiny", "--root", str(tmp_path / "out")]) == 0      # one table


def test_a_claims_seeds_mopd_regimes_hold_every_mopd_claim(tmp_path):
    """A further seed built with ``--claims`` skips Type II; the four MOPD claims must still all be
    measurable from the regimes it builds (pooled over seeds by name)."""
    from reproduce.merge import CASCADE, regime_contrasts, store_regimes

    def samples(shift: int) -> list[dict]:
        return [{"domain": d, "split": "ID", "difficulty": "short", "task": t, "task_key": f"{d}{t}", "sample": s,
                 "success": (s + shift + t) % 3 == 0, "pattern": ("T1", "T2", "T4")[(s + shift) % 3]}
                for d in CASCADE for t in range(3) for s in range(4)]
    rows = ("Instruct", *[f"After {d.upper()}" for d in CASCADE])
    claims = store_regimes(Store("tiny", tmp_path / "runs", tmp_path / "data", seed=1, claims_only=True))
    assert "shared_conflict" not in claims
    every = store_regimes(Store("tiny", tmp_path / "runs", tmp_path / "data"))
    built = {r: {row: samples(i + j) for j, row in enumerate(rows)} for i, r in enumerate(every)}
    assert set(regime_contrasts({r: built[r] for r in claims})) == set(regime_contrasts(built))
    assert len(regime_contrasts(built)) == 4
