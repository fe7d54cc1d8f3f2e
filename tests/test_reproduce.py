"""The reproduction machinery: artifact reuse, family tokenizers, table cells, the CLI's errors.

Training itself is replaced by a recorder here (the stages have their own tests); what is tested
is the bookkeeping that makes `make reproduce-all` build each artifact once and correctly.
"""
import json
from pathlib import Path

import pytest

from analysis import artifacts
from analysis.artifacts import Store, cell
from analysis.report import Report, md_table


@pytest.fixture
def fake_pretrain(monkeypatch):
    """Replace `pretrain.train.main` with a recorder that writes a tokenizer (only when the run
    has none) and a summary, as the real trainer does."""
    calls = []

    def fake_main(argv):
        out = Path(argv[argv.index("--out") + 1])
        calls.append(out.name)
        tok = out / "tokenizer" / "tokenizer.json"
        if not tok.exists():
            tok.parent.mkdir(parents=True)
            tok.write_text(json.dumps({"trained_for": out.name}))
        (out / "summary.json").write_text("{}")
        return 0

    import pretrain.train
    monkeypatch.setattr(pretrain.train, "main", fake_main)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / self.corpus_config(**changes).name)
    return calls


def test_family_members_share_the_base_tokenizer_and_are_built_once(tmp_path, fake_pretrain):
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    sub = store.pretrained(patterns="4opt8sub")
    assert fake_pretrain == ["fa-tiny", "fa-tiny-4opt8sub"]          # the base first, for its tokenizer
    assert json.loads((sub / "tokenizer" / "tokenizer.json").read_text()) == {"trained_for": "fa-tiny"}
    assert store.pretrained() == tmp_path / "runs" / "tiny" / "pretrain" / "fa-tiny"
    store.pretrained(patterns="4opt8sub")
    assert fake_pretrain == ["fa-tiny", "fa-tiny-4opt8sub"]          # reused, not retrained


def test_a_failed_stage_is_an_error_not_a_silent_artifact(tmp_path, monkeypatch):
    import pretrain.train
    monkeypatch.setattr(pretrain.train, "main", lambda argv: 3)
    monkeypatch.setattr(Store, "corpus", lambda self, **changes: self.data_dir / "x")
    store = Store("tiny", tmp_path / "runs", tmp_path / "data", log=lambda m: None)
    with pytest.raises(artifacts.ReproductionError, match="pre-training"):
        store.pretrained()
    with pytest.raises(artifacts.ReproductionError, match="no checkpoint at step 200"):
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


def test_markdown_tables_and_reports():
    text = md_table(["a", "b"], [["x", 12.25], ["y", float("nan")], ["z", None], ["w", 0.04567], ["v", 0.0]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| x | 12.2 |", "| y | – |", "| z | – |", "| w | 0.0457 |",
                                 "| v | 0.0 |"]
    r = Report("t")
    r.add("cap", ["a"], [[1]])
    assert r.sections[0].startswith("**cap**") and "| 1 |" in r.sections[0]


def test_cli_lists_tables_and_refuses_bad_input(capsys):
    from analysis.reproduce import REPRODUCTIONS, main
    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(REPRODUCTIONS)
    assert {"fig3-4", "table1", "fig6", "fig7", "fig9-10", "table4", "mopd", "fig22", "turnopd",
            "turnopd-ablation"} <= set(listed)
    assert main(["fig99", "--scale", "tiny"]) == 2
    assert main(["fig3-4", "--scale", "huge"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error:") for line in err)


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
