"""Pure helpers of the MOPD / Fig. 22 / TurnOPD reproductions and the run-log readers they use
(`analysis.run_logs`); no model is trained here."""
import json
import math

import numpy as np
import pytest

from analysis import run_logs
from analysis.measures import least_time_table, same_step_table
from reproduce import merge, turnopd
from reproduce.store import Store


def _records():
    # what posttrain.train writes: an eval at step 0, train steps, evals every 2 steps and at the end
    return [{"step": 0, "eval": True, "train_wall_s": 0.0, "ID_avg@8": 10.0, "OOD_avg@8": 5.0},
            {"step": 1, "kl": 0.5, "depth": 3.0, "cap": None, "train_wall_s": 2.0},
            {"step": 2, "kl": 0.4, "depth": 5.0, "cap": 4, "train_wall_s": 4.5},
            {"step": 2, "eval": True, "train_wall_s": 4.5, "ID_avg@8": 30.0, "OOD_avg@8": 20.0}]


def test_log_rows_marks_only_evaluations_with_accuracy():
    f = run_logs.log_rows(_records(), "OPD")
    assert list(f.columns) == ["method", "step", "wall", "acc", "depth", "cap"]
    assert f["acc"].notna().tolist() == [True, False, False, True]
    assert f.loc[3, "acc"] == 30.0 and f.loc[2, "wall"] == 4.5
    assert math.isnan(f.loc[1, "cap"]) and f.loc[2, "cap"] == 4.0
    assert math.isnan(f.loc[0, "depth"]) and f["depth"].mean() == 4.0
    assert run_logs.log_rows(_records(), "OPD", split="OOD").loc[3, "acc"] == 20.0


def test_frame_feeds_the_budget_tables(tmp_path):
    runs = {}
    for name, scale in (("OPD", 1.0), ("TurnOPD", 0.5)):   # TurnOPD: the same accuracies in half the time
        run = tmp_path / name
        run.mkdir()
        recs = [{**r, "train_wall_s": r["train_wall_s"] * scale} for r in _records()]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        runs[name] = run
    logs = run_logs.frame(runs)
    assert logs["method"].unique().tolist() == ["OPD", "TurnOPD"]
    assert same_step_table(logs).loc["TurnOPD", "acc"] == 30.0
    least = least_time_table(logs)
    assert least["wall_budget"].iloc[0] == 2.25
    assert least.loc["OPD", "steps_completed"] == 1 and least.loc["OPD", "acc"] == 10.0
    assert least.loc["TurnOPD", "acc"] == 30.0


def test_forgetting_is_final_minus_own_stage():
    scores = {"After FA": {"fa/ID": 50.0, "lf/ID": 0.0, "ea/ID": 0.0},
              "After LF": {"fa/ID": 40.0, "lf/ID": 60.0, "ea/ID": 0.0},
              "After EA": {"fa/ID": 30.0, "lf/ID": 65.0, "ea/ID": 70.0}}
    assert merge.forgetting(scores) == {"fa": -20.0, "lf": 5.0}


def test_distance_rows_pick_the_right_pairs():
    labels = ["Instruct", "MOPD 1", "MOPD 2", "MOPD 3", "Teacher FA"]
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0], [1.0, 5.0], [100.0, 0.0]])
    d = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    rows = merge.distance_rows(labels, d, teachers=("Teacher FA",))
    assert [r[0] for r in rows] == ["Instruct → MOPD 1", "MOPD 1 → MOPD 2", "MOPD 2 → MOPD 3",
                                    "Instruct → MOPD 3", "Instruct → Teacher FA"]
    assert [r[1] for r in rows] == pytest.approx([1.0, 2.0, 3.0, math.hypot(1, 5), 100.0])
    assert rows[0][2] == "0.482" and rows[-1][2] == "71.0–73.6"
    assert "far closer" in merge._distance_note(rows, 1)
    rows[0][1] = 50.0
    assert "unlike the paper" in merge._distance_note(rows, 1)


def test_final_checkpoint_prefers_summary_then_newest(tmp_path):
    run = tmp_path / "run"
    for s in (1, 2):
        (run / "checkpoints" / f"step_{s:06d}").mkdir(parents=True)
        (run / "checkpoints" / f"step_{s:06d}" / "trainer_state.json").write_text("{}")
    newest = merge.final_checkpoint(run)
    assert newest.name == "step_000002"
    assert merge.final_checkpoint(newest) == newest
    (run / "summary.json").write_text(json.dumps({"checkpoint": str(run / "checkpoints" / "step_000001")}))
    assert merge.final_checkpoint(run).name == "step_000001"


def test_pretrained_family_keys_the_run_folder(tmp_path):
    store = Store("tiny", tmp_path, tmp_path / "data", log=lambda m: None)
    fam = ("fa", "lf", "ea")
    # a finished run (summary.json) is returned as is, so the folder names are testable without training
    for name in ("fa-tiny-T1+T2@fa+lf+ea", "fa-tiny-T1+T2"):
        (tmp_path / "tiny" / "pretrain" / name).mkdir(parents=True)
        (tmp_path / "tiny" / "pretrain" / name / "summary.json").write_text("{}")
    assert store.pretrained(family=fam, domains=("fa",), patterns="T1+T2").name == "fa-tiny-T1+T2@fa+lf+ea"
    assert store.pretrained(domains=("fa",), patterns="T1+T2").name == "fa-tiny-T1+T2"
    assert store.pretrained(family=("fa",), domains=("fa",), patterns="T1+T2").name == "fa-tiny-T1+T2"


def test_ablation_notes_and_slugs():
    acc = {"vanilla OPD": 10.0, "adaptive depth only": 5.0, "linear blend only": 20.0, "both (TurnOPD)": 30.0}
    notes = turnopd._ablation_notes(acc)
    assert "(same order)" in notes[0] and "+20.0 points (paper +3.3)" in notes[1]
    acc["vanilla OPD"] = 40.0
    assert "(different order)" in turnopd._ablation_notes(acc)[0]
    assert turnopd._slug("both (TurnOPD)") == "both"
    assert turnopd._slug("adaptive depth only") == "adaptive-depth-only"
    assert set(turnopd.ARMS["vanilla OPD"]) == {"adaptive_depth", "turn_blend"}


def test_main_notes_compare_signs_with_the_paper():
    import pandas as pd
    idx = pd.Index(["OPD", "TCOD-F2B", "TurnOPD"], name="method")
    same = pd.DataFrame({"acc": [40.0, 35.0, 41.0]}, index=idx)
    least = pd.DataFrame({"acc": [30.0, 20.0, 35.0], "steps_completed": [3, 8, 5]}, index=idx)
    speed = pd.DataFrame({"target": 40.0, "speedup": [1.0, float("nan"), 1.5]}, index=idx)
    notes = turnopd._main_notes(same, least, speed, start=20.0)
    assert "+1.0 points" in notes[0] and "agrees in sign" in notes[1] and "5 steps" in notes[1]
    assert "1.50x as fast" in notes[2]
    least.loc["TurnOPD", "acc"] = 25.0
    speed.loc["TurnOPD", "speedup"] = float("nan")
    notes = turnopd._main_notes(same, least, speed)
    assert "opposite sign" in notes[1] and "never within its run" in notes[2]
    # OPD ended no better than the student: time-to-OPD's-accuracy is zero for all, and says so
    notes = turnopd._main_notes(same, least, speed, start=45.0)
    assert "not above the student's 45.0 %" in notes[2] and "never" not in notes[2]
