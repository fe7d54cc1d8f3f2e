"""`python -m analysis.region_map` on run folders written by hand: no training, no model.

Each fake run is what `posttrain.train` leaves behind (``train_config.json`` with ``config.method``
and ``student``, ``eval/step_N/samples.jsonl``), its student a pre-training run whose corpus's
``config.json`` names its ``patterns``.  Every expected Δ ± SE below is worked out by hand from
the successes (of 8 samples) written for each task, so a wrong pairing, pooling or grouping fails.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis import figures as Fg
from analysis import region_map as R

K = 8


def write_samples(folder: Path, counts: dict[str, list[int]], split: str = "ID") -> Path:
    """samples.jsonl of an evaluation: per difficulty, one task per entry with that many of K samples solved."""
    rows = [{"domain": "fa", "split": split, "difficulty": d, "task": f"fa-{split}-{d}-{t}", "sample": s,
             "success": s < n, "pattern": "T1"}
            for d, ns in counts.items() for t, n in enumerate(ns) for s in range(K)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def student(root: Path, patterns: str, base: dict | None = None) -> Path:
    corpus = root / "data" / f"fa-small-{patterns}"
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / "config.json").write_text(json.dumps({"domains": ["fa"], "patterns": patterns}))
    run = root / "runs" / f"pretrain-{patterns}"
    run.mkdir(parents=True, exist_ok=True)
    (run / "train_config.json").write_text(json.dumps({"data": str(corpus), "config": {"steps": 300}}))
    if base is not None:
        write_samples(run / "eval", base)                 # what `make eval RUN=...` writes
    return run


def posttrained(root: Path, name: str, method: str, student_run: Path, after: dict, base: dict | None = None,
                step: int = 10) -> Path:
    run = root / "runs" / name
    run.mkdir(parents=True)
    (run / "train_config.json").write_text(json.dumps(
        {"kind": "posttrain", "config": {"method": method, "steps": step, "eval_at_start": base is not None},
         "data": json.loads((student_run / "train_config.json").read_text())["data"], "student": str(student_run),
         "teacher": None}))
    if base is not None:
        write_samples(run / "eval" / "step_000000", base)
    write_samples(run / "eval" / f"step_{step:06d}", after)
    return run


BASE_4OPT = {"short": [2, 4], "mid": [8, 8], "long": [0, 0]}   # avg@8 37.5, 100 (no headroom), 0


@pytest.fixture
def runs(tmp_path):
    """runs/opd-4opt and runs/grpo-4opt evaluated at step 0; runs/opd-1opt not (its student's own evaluation
    is the base) and only on short and mid tasks."""
    s4 = student(tmp_path, "4opt")
    s1 = student(tmp_path, "1opt", base={"short": [0, 0], "mid": [0, 0], "long": [0, 0]})
    return {"opd-4opt": posttrained(tmp_path, "opd-4opt", "opd", s4, {"short": [6, 4], "mid": [8, 6], "long": [3, 3]},
                                    base=BASE_4OPT),
            "grpo-4opt": posttrained(tmp_path, "grpo-4opt", "grpo", s4, {"short": [2, 4], "mid": [8, 8], "long": [0, 2]},
                                     base=BASE_4OPT),
            "opd-1opt": posttrained(tmp_path, "opd-1opt", "opd", s1, {"short": [8, 0], "mid": [0, 0]}),
            "s1": s1}


def se(diffs: list[float]) -> float:
    return float(np.std(diffs, ddof=1) / math.sqrt(len(diffs)))


def cells(out: Path) -> dict[tuple, dict]:
    record = json.loads((out / "region_map.json").read_text())
    return {(c["method"], c["quality"], c["horizon"]): c for c in record["cells"]}


def test_region_map_measures_delta_and_se_per_method_quality_and_horizon(runs, tmp_path, capsys, monkeypatch):
    figs, real = [], Fg._save
    monkeypatch.setattr(Fg, "_save", lambda fig, path, dpi: (figs.append(fig), real(fig, path, dpi))[1])
    out = tmp_path / "map"
    assert R.main([str(runs[n]) for n in ("opd-4opt", "grpo-4opt", "opd-1opt")] + ["--out", str(out)]) == 0
    assert capsys.readouterr().out.split() == [str(out / f) for f in ("region_map.png", "region_map.md",
                                                                       "region_map.json")]
    assert (out / "region_map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    got = cells(out)
    # (method, quality, horizon): per-task differences in avg@8 points (after - before) and the base's avg@8
    expected = {("OPD", "4opt", "short"): ([50.0, 0.0], 37.5, "unsupported"),     # 25 +- 25: within noise
                ("OPD", "4opt", "mid"): ([0.0, -25.0], 100.0, "unnecessary"),
                ("OPD", "4opt", "long"): ([37.5, 37.5], 0.0, "effective"),
                ("GRPO", "4opt", "short"): ([0.0, 0.0], 37.5, "unsupported"),
                ("GRPO", "4opt", "mid"): ([0.0, 0.0], 100.0, "unnecessary"),
                ("GRPO", "4opt", "long"): ([0.0, 25.0], 0.0, "unsupported"),   # 12.5 = 1 SE
                ("OPD", "1opt", "short"): ([100.0, 0.0], 0.0, "unsupported"),
                ("OPD", "1opt", "mid"): ([0.0, 0.0], 0.0, "unsupported")}
    assert set(got) == set(expected)                    # opd-1opt has no long evaluation: no cell
    for key, (diffs, before, region) in expected.items():
        c = got[key]
        assert (c["delta"], c["se"], c["baseline"], c["tasks"], c["region"]) == \
            (pytest.approx(np.mean(diffs)), pytest.approx(se(diffs)), pytest.approx(before), 2, region)
    assert got["OPD", "4opt", "short"]["se"] == pytest.approx(25.0)    # by hand: std(50, 0) / sqrt(2)
    md = (out / "region_map.md").read_text()
    assert "| 4opt | +25.0 ± 25.0 (unsupported) | -12.5 ± 12.5 (unnecessary) | +37.5 ± 0.0 (effective) |" in md
    assert "| 1opt | +50.0 ± 50.0 (unsupported) | +0.0 ± 0.0 (unsupported) | – |" in md     # OPD: rows 1opt, 4opt
    assert "| OPD | 4opt | long | 0.0 | +37.5 | 0.0 | yes | 2 | effective | opd-4opt@10 |" in md
    assert "| opd-1opt | OPD | 1opt | the student's evaluation" in md
    assert "| opd-4opt | OPD | 4opt | the run's step-0 evaluation" in md
    # the figure: one panel per method plus the colour bar, rows = qualities, columns = horizons, the table's numbers
    (fig,) = figs
    grpo, opd, bar = fig.axes
    assert (grpo.get_title(), opd.get_title()) == ("GRPO", "OPD")
    assert [t.get_text() for t in opd.get_yticklabels()] == ["1opt", "4opt"]
    assert [t.get_text() for t in opd.get_xticklabels()] == ["short", "mid", "long"]
    text = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in opd.texts}
    assert text[1, 0] == "unsupported\n+25.0 ± 25.0 pt" and text[0, 2] == "no run"
    assert {t.get_text() for t in grpo.texts if t.get_text() == "no run"}          # GRPO never ran on 1opt
    assert opd.images[0].colorbar.ax is bar


def test_the_runs_training_success_is_drawn_beside_the_map(runs, tmp_path, capsys):
    """Where a cell's Δ comes from: each run's logged training success, one panel per quality and
    trained horizon, one line per method (evaluation rows and steps without the field left out)."""
    logs = {"opd-4opt": [0.5, 0.0, 0.75], "grpo-4opt": [0.25, 0.5, None]}
    for name, values in logs.items():
        rows = [{"step": i + 1, "loss": 1.0, **({"success": v} if v is not None else {})} for i, v in enumerate(values)]
        (runs[name] / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [
            {"step": 3, "eval": True, "success": 9.0}]))
    loaded = R.load_runs([runs["opd-4opt"], runs["grpo-4opt"]])
    assert R.training_curves(loaded) == {"4opt / all": {"OPD": ([1, 2, 3], [0.5, 0.0, 0.75]),
                                                        "GRPO": ([1, 2], [0.25, 0.5])}}
    for run, d in zip(loaded, ("long", "short")):           # panels in the map's order: horizons short to long
        record = json.loads((run.path / "train_config.json").read_text())
        record["config"]["difficulties"] = d
        (run.path / "train_config.json").write_text(json.dumps(record))
    assert list(R.training_curves(loaded)) == ["4opt / short", "4opt / long"]
    out = tmp_path / "map"
    assert R.main([str(runs["opd-4opt"]), str(runs["grpo-4opt"]), "--out", str(out)]) == 0
    assert str(out / "training_success.png") in capsys.readouterr().out.split()
    assert (out / "training_success.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_labels_group_runs_and_runs_in_one_cell_are_pooled_over_their_task_pairs(runs, tmp_path):
    s4 = runs["opd-4opt"]
    seed1 = posttrained(tmp_path, "opd-4opt-seed1", "opd", Path(json.loads((s4 / "train_config.json").read_text())
                                                                         ["student"]),
                        {"short": [4, 4], "mid": [8, 8], "long": [0, 0]}, base=BASE_4OPT, step=20)
    out = tmp_path / "pooled"
    argv = [str(runs["opd-4opt"]), str(seed1), str(runs["opd-1opt"]), "--label", "opd-1opt=weak", "--out", str(out)]
    assert R.main(argv) == 0
    got = cells(out)
    pooled = [50.0, 0.0, 25.0, 0.0]                     # both seeds' (task, run) pairs on short
    c = got["OPD", "4opt", "short"]
    assert (c["delta"], c["se"], c["tasks"]) == (pytest.approx(18.75), pytest.approx(se(pooled)), 4)
    assert c["runs"] == "opd-4opt@10, opd-4opt-seed1@20"
    assert ("OPD", "weak", "short") in got and not any(q == "1opt" for _, q, _ in got)


def test_pool_equals_pooling_the_raw_differences():
    rng = np.random.default_rng(0)
    for sizes in ((1, 1), (3,), (2, 5, 1), (4, 4)):
        parts = [rng.normal(size=n) * 10 for n in sizes]
        stats = [(float(p.mean()), se(list(p)) if len(p) > 1 else float("nan"), len(p)) for p in parts]
        allv = np.concatenate(parts)
        mean, err, n = R.pool(stats)
        assert (mean, err, n) == (pytest.approx(allv.mean()), pytest.approx(se(list(allv))), len(allv))
    assert math.isnan(R.pool([(5.0, float("nan"), 1)])[1])


def test_base_given_on_the_command_line(runs, tmp_path):
    (runs["s1"] / "eval" / "samples.jsonl").unlink()
    other = write_samples(tmp_path / "evals" / "student-1opt", {"short": [4, 0], "mid": [0, 0]})
    out = tmp_path / "given"
    assert R.main([str(runs["opd-1opt"]), "--base", f"opd-1opt={other}", "--out", str(out)]) == 0
    assert cells(out)["OPD", "1opt", "short"]["delta"] == pytest.approx(np.mean([50.0, 0.0]))   # 100-50, 0-0
    assert R.main([str(runs["opd-1opt"]), "--base", str(other / "samples.jsonl"), "--out", str(out)]) == 0


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_bad_input_is_one_error_line_and_exit_2(runs, tmp_path, capsys):
    out = tmp_path / "never"
    assert R.main([str(runs["s1"]), "--out", str(out)]) == 2                     # a pre-training run
    assert "is not a post-training run" in one_error(capsys)
    assert R.main([str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "is not a folder" in one_error(capsys)
    (runs["s1"] / "eval" / "samples.jsonl").unlink()                            # opd-1opt's only base
    assert R.main([str(runs["opd-1opt"]), "--out", str(out)]) == 2
    assert "has no base evaluation" in one_error(capsys)
    elsewhere = write_samples(tmp_path / "other-tasks", {"short": [1, 1, 1]})
    assert R.main([str(runs["opd-1opt"]), "--base", str(elsewhere), "--out", str(out)]) == 2
    assert "cannot be paired" in one_error(capsys)
    assert R.main([str(runs["opd-4opt"]), "--label", "nope=x", "--out", str(out)]) == 2
    assert "--label expects RUN=LABEL" in one_error(capsys)
    assert R.main([str(runs["opd-4opt"])]) == 2                                # --out is required
    assert "--out" in one_error(capsys)
    assert not out.exists()                                                     # nothing half-written


def test_the_fig7_note_says_where_grpo_had_no_signal_to_learn_from(tmp_path):
    """A GRPO step learns only when some group's rewards differ; where none did, the table must say
    its Δ is 0 by construction. Steps logged before `skipped_tokens` existed count when anything succeeded."""
    import json

    from reproduce.shaping import grpo_signal_note, signal_steps
    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    logs = {"fig7-grpo-4opt-short": [{"agent_tokens": 90, "skipped_tokens": 40},
                                     {"agent_tokens": 90, "skipped_tokens": 90}],
            "fig7-grpo-4opt-long": [{"agent_tokens": 90, "skipped_tokens": 90, "success": 0.0}],
            "fig7-grpo-4opt-mid": [{"agent_tokens": 90, "success": 0.25}, {"agent_tokens": 90, "success": 0.0}]}
    for name, rows in logs.items():
        run = store.home / "posttrain" / name
        run.mkdir(parents=True)
        rows = [{"step": i + 1, "loss": 0.0, **r} for i, r in enumerate(rows)] + [{"step": len(rows), "eval": True}]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [signal_steps(store.home / "posttrain" / n) for n in logs] == [(1, 2, False), (0, 1, False), (1, 2, True)]
    note = grpo_signal_note(store, [("4opt", "short"), ("4opt", "mid"), ("4opt", "long")])
    assert "4opt/short 1 of 2, 4opt/mid 1 of 2, 4opt/long 0 of 1" in note
    assert "In 4opt/long no step had one (no training episode succeeded)" in note and "by construction" in note


def test_the_fig7_fit_table_puts_opd_s_kl_beside_the_teacher_it_distils(tmp_path):
    """OPD's objective is the reverse KL; a cell where it fell but the test score did not rise beyond
    two SE is named, beside the teacher's score there. A cell whose Δ is clear is not."""
    import json

    from analysis.report import Report
    from reproduce.shaping import add_opd_fit, opd_fit
    from reproduce.store import Store
    store = Store("tiny", tmp_path / "runs", tmp_path / "data")
    kls = {"fig7-opd-4opt-short": [0.4] * 8 + [0.2] * 8, "fig7-opd-4opt-mid": [0.4] * 8 + [0.1] * 8,
           "fig7-opd-4opt-long": [0.4] * 8 + [0.1] * 8}
    for name, losses in kls.items():
        run = store.home / "posttrain" / name
        run.mkdir(parents=True)
        rows = [{"step": i + 1, "loss": kl, "success": 0.5 if i >= 8 else 0.0} for i, kl in enumerate(losses)]
        if name.endswith("long"):        # a collapse half-way: the worst 8 steps in a row succeed at 0 %
            rows = [{**r, "success": 0.0 if 4 <= i < 12 else 0.5} for i, r in enumerate(rows)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [{"step": 16, "eval": True}]))
    assert opd_fit(store.home / "posttrain" / "fig7-opd-4opt-mid") == pytest.approx({
        "kl first": 0.4, "kl last": 0.1, "success first": 0.0, "success last": 50.0, "success lowest": 0.0})
    assert opd_fit(store.home / "posttrain" / "fig7-opd-4opt-long") == pytest.approx({
        "kl first": 0.4, "kl last": 0.1, "success first": 25.0, "success last": 25.0, "success lowest": 0.0})
    teacher = {"table": [{"split": "ID", "difficulty": d, "domain": "fa", "tasks": 4, "avg@8": v}
                         for d, v in (("short", 60.0), ("mid", 13.0), ("long", 11.0))]}
    cells = [{"quality": "4opt", "horizon": "short", "baseline": 15.0, "opd avg": 18.8, "opd se": 7.3},
             {"quality": "4opt", "horizon": "mid", "baseline": 0.8, "opd avg": 0.8, "opd se": 0.8},
             {"quality": "4opt", "horizon": "long", "baseline": 28.1, "opd avg": -21.9, "opd se": 8.5}]
    report = Report("t")
    add_opd_fit(report, store, cells, teacher)
    (table,) = report.tables
    assert [r[0] for r in table.rows] == ["4opt/short", "4opt/mid", "4opt/long"]
    assert [x for r in table.rows[:2] for x in r[1:3] + r[6:8]] == pytest.approx(
        [0.4, 0.2, 15.0, 60.0, 0.4, 0.1, 0.8, 13.0])
    (note,) = report.notes
    assert "4opt/mid (teacher 13.0, student 0.8)" in note and "4opt/short" not in note
    assert "4opt/long (teacher 11.0, student 28.1, and it fell beyond two SE)" in note
