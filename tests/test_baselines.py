"""Tests of `planning_gym.baselines`: the scripted agents whose scores every model score is read against.

Why: a split is a planning benchmark only if agents that cannot plan score low on it, so each
baseline's definition is pinned on hand-made worlds whose answers are known (and each test fails
if its baseline's scoring line is changed), and the whole run is checked on a tiny corpus.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from planning_gym import baselines as B
from planning_gym.config import CorpusConfig
from planning_gym.env import PlanningEnv, Task, apply_action
from planning_gym.world import NamedRule, World

# ----- a hand world -------------------------------------------------------------------------------------
# 0 ash, 1 dew (base); 2 salve: brew <- 2 ash | brew <- 1 dew; 3 charm: infuse <- dew + salve
ASH, DEW, SALVE, CHARM = range(4)


def hand_world(errors: str = "full") -> World:
    rules = [NamedRule("brew", ((ASH, 2),), SALVE), NamedRule("brew", ((DEW, 1),), SALVE),
             NamedRule("infuse", ((DEW, 1), (SALVE, 1)), CHARM)]
    w = World("fa", "A", ["ash", "dew", "salve", "charm"], [0, 0, 1, 2], rules, "gather")
    w.errors = errors           # the world's error detail (ignored by an environment without the setting)
    return w


class TerseEnv(PlanningEnv):
    """Errors that do not name the missing inputs, whatever the world's setting."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if info["error"] and ": missing " in info["error"]:
            terse = info["error"].split(": missing ")[0] + ": missing inputs"
            obs = obs.replace(info["error"], terse)
            info = {**info, "error": terse}
        return obs, reward, terminated, truncated, info


def terse_env(world, step_limit):
    return TerseEnv(world, max_steps=step_limit)


def row(goal, inventory, plan, rid, split="pretrain", difficulty="short"):
    return {"id": rid, "domain": "fa", "recipe": "A", "split": split, "goal": goal, "horizon": len(plan),
            "difficulty": difficulty, "initial_inventory": [{"item": i, "count": c} for i, c in inventory.items()],
            "gold_actions": list(plan)}


def task(goal, **inv):
    w = hand_world()
    return Task(w.index[goal], tuple(sorted((w.index[k], c) for k, c in inv.items())))


# ----- tiny corpus --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from planning_gym.corpus import write_corpus
    out = tmp_path_factory.mktemp("corpus") / "fa-tiny"
    cfg = CorpusConfig.from_scale("tiny", n_pretrain_per_bin=40, n_posttrain_per_bin=8, n_test_per_bin=6)
    write_corpus(cfg, out, workers=1, progress=False)
    return out


@pytest.fixture(scope="module")
def result(corpus):
    return B.run_baselines(corpus, k=3)


def cells(result, name):
    return {(r["split"], r["difficulty"]): r for r in result["rows"] if r["baseline"] == name}


def test_solver_scores_100_on_every_cell(result):
    solver = cells(result, "solver")
    assert set(solver) == {(s, d) for s in ("ID", "OOD") for d in ("short", "mid", "long", "all")}
    assert all(r["avg@3"] == 100.0 and r["pass@3"] == 100.0 for r in solver.values())
    assert solver[("ID", "all")]["tasks"] == 18 and solver[("OOD", "long")]["tasks"] == 6
    assert result["tasks"] == 36 and result["training_rows"] > 0
    for name in B.BASELINES:     # every score is a percentage with avg <= pass
        assert all(0 <= r["avg@3"] <= r["pass@3"] <= 100 for r in cells(result, name).values())


def test_always_gather_succeeds_exactly_on_base_goals(corpus):
    worlds = B.load_worlds(corpus)
    rows = [("ID", r) for r in B.load_rows(corpus, "test_id")] + [("OOD", r) for r in B.load_rows(corpus, "test_ood")]
    outs = B.baseline_outcomes(worlds, B.TrainingIndex([]), rows, baselines=["always-gather"])
    world = next(iter(worlds.values()))
    assert len(outs) == len(rows)
    for o, (_, r) in zip(outs, rows):
        assert o["success"] == world.is_base(world.index[r["goal"]])
    assert any(not world.is_base(world.index[r["goal"]]) for _, r in rows)      # crafted goals exist: 0 there
    w = hand_world()
    assert not B.play_always_gather(w, task("charm")) and not B.play_always_gather(w, task("salve", dew=3))
    assert B.play_always_gather(w, task("dew"), step_limit=2) and not B.play_always_gather(w, task("dew"), step_limit=1)


def test_random_valid_plays_only_valid_actions_and_is_seeded():
    w = hand_world()
    invalid = []

    class Checked(PlanningEnv):
        def step(self, action):
            out = super().step(action)
            invalid.extend([action] if not out[4]["valid"] else [])
            return out

    runs = [B.play_random_valid(w, task("charm"), 20, random.Random(s), lambda w, n: Checked(w, max_steps=n))
            for s in range(30)]
    assert invalid == [] and any(runs) and not all(B.play_random_valid(w, task("charm"), 2, random.Random(s))
                                                   for s in range(30))
    assert runs == [B.play_random_valid(w, task("charm"), 20, random.Random(s)) for s in range(30)]
    valid = B._ValidActions(w)
    assert valid({}) == ["gather ash", "gather dew"]
    assert valid({DEW: 1, SALVE: 1}) == ["gather ash", "gather dew", "brew salve", "infuse charm"]


def test_score_gives_avg_and_pass_at_k():
    outs = [{"baseline": "random-valid", "domain": "fa", "split": "ID", "difficulty": "short", "task": "a",
             "sample": s, "success": s == 0} for s in range(4)]
    outs += [{"baseline": "random-valid", "domain": "fa", "split": "ID", "difficulty": "long", "task": "b",
              "sample": s, "success": False} for s in range(4)]
    rows = {(r["difficulty"]): r for r in B.score(outs, 4)}
    assert rows["short"]["avg@4"] == 25.0 and rows["short"]["pass@4"] == 100.0
    assert rows["all"]["avg@4"] == 12.5 and rows["all"]["pass@4"] == 50.0 and rows["all"]["tasks"] == 2


def test_similarity_and_nearest_choice():
    assert B.similarity({"a": 2, "b": 1}, {"a": 1, "c": 1}) == 0          # 1 shared - 1 extra
    assert B.similarity({"a": 1}, {"a": 3}) == -1 and B.similarity({}, {}) == 0
    index = B.TrainingIndex([row("charm", {"dew": 1}, ["x", "y", "z"], "0"), row("charm", {"ash": 1}, ["p", "q"], "1"),
                             row("charm", {"ash": 1}, ["r", "s"], "2")])
    assert index.nearest("fa", "A", "charm", {}) == ("p", "q")                 # tie: shorter, then earlier
    assert index.nearest("fa", "A", "charm", {"dew": 1}) == ("x", "y", "z")
    assert index.nearest("fa", "A", "salve", {}) is None and index.nearest("lf", "A", "charm", {}) is None


def _recall(train, goal, **inv):
    w = hand_world()
    t = task(goal, **inv)
    test = row(goal, inv, [], "t", split="test_id")
    outs = B.baseline_outcomes({("fa", "A"): w}, B.TrainingIndex(train), [("ID", test)],
                               baselines=["recall-nearest", "recall-cascade", "recall-any"])
    assert len(outs) == 3 and all(o["task"] == "t" for o in outs)
    return {o["baseline"]: o["success"] for o in outs} | {"task": t}


def test_recall_nearest_replays_the_most_similar_training_plan():
    holding_salve = row("charm", {"salve": 1}, ["gather dew", "infuse charm"], "a")
    holding_ash = row("charm", {"ash": 2}, ["brew salve", "gather dew", "infuse charm"], "c")
    from_empty = row("charm", {}, ["gather dew", "brew salve", "gather dew", "infuse charm"], "b")
    # identical to a training task: its plan works
    assert _recall([holding_salve], "charm", salve=1)["recall-nearest"]
    # the held salve the plan relies on is missing: blind replay fails
    r = _recall([holding_salve], "charm")
    assert not r["recall-nearest"] and not r["recall-any"]
    # the nearest row is chosen by inventory, not by order: ash held -> the ash plan
    assert _recall([holding_salve, holding_ash], "charm", ash=2)["recall-nearest"]
    assert _recall([holding_ash, holding_salve], "charm", salve=1)["recall-nearest"]
    # an empty-inventory row is nearer to an empty start (similarity 0) than the salve row (-1)
    r = _recall([holding_salve, from_empty], "charm")
    assert r["recall-nearest"] and r["recall-any"]
    # the nearest plan fails but another training plan works: recall-any is the oracle bound
    r = _recall([holding_salve, holding_ash], "charm", dew=1)      # salve row (-1) beats ash row (-2)
    assert not r["recall-nearest"] and r["recall-any"]             # brew salve uses the held dew
    r = _recall([holding_salve, holding_ash, from_empty], "charm", ash=1)
    assert not r["recall-nearest"] and r["recall-any"]   # tie 0 = 0: the shorter ash plan is chosen, and fails
    # no training row with the goal: fail
    assert not _recall([row("salve", {}, ["gather dew", "brew salve"], "s")], "charm")["recall-nearest"]


def test_recall_cascade_retries_the_next_plans_until_the_step_limit():
    holding_salve = row("charm", {"salve": 1}, ["gather dew", "infuse charm"], "a")
    from_empty = row("charm", {}, ["gather dew", "brew salve", "gather dew", "infuse charm"], "b")
    # the nearest (salve) plan fails on an empty start, then the from-empty plan, run after it, works
    r = _recall([holding_salve, from_empty], "charm", ash=1)
    assert r["recall-cascade"]
    r = _recall([holding_salve], "charm")
    assert not r["recall-cascade"]                       # nothing to retry


def test_recall_any_bounds_recall_nearest_on_the_corpus(corpus, result):
    near, any_ = cells(result, "recall-nearest"), cells(result, "recall-any")
    assert all(near[c]["avg@3"] <= any_[c]["avg@3"] for c in near)
    worlds = B.load_worlds(corpus)
    rows = [("ID", r) for r in B.load_rows(corpus, "test_id")]
    train = B.training_rows(corpus)
    outs = B.baseline_outcomes(worlds, B.TrainingIndex(train), rows, baselines=["recall-nearest", "recall-any"])
    per = {}
    for o in outs:
        per.setdefault(o["task"], {})[o["baseline"]] = o["success"]
    assert all(p["recall-any"] or not p["recall-nearest"] for p in per.values())
    # recall-any by brute force: any training plan of the goal replayed through the environment
    for _, r in rows:
        w, t = B._task(worlds, r)
        brute = any(B.replay(w, t, tr["gold_actions"]) for tr in train if tr["goal"] == r["goal"])
        assert per[r["id"]]["recall-any"] == brute


def test_from_empty_replays_the_shortest_plan_from_nothing():
    w = hand_world()
    tool = B._WorldTools(w, 20)
    assert tool.empty_plan(CHARM, 20) == ["gather dew", "brew salve", "gather dew", "infuse charm"]
    assert tool.empty_plan(CHARM, 3) is None                          # 4 actions cannot fit 3 turns
    test = [("ID", row("charm", {"ash": 5}, [], "t"))]
    ok = B.baseline_outcomes({("fa", "A"): w}, B.TrainingIndex([]), test, baselines=["from-empty"])[0]["success"]
    assert ok
    short = B.baseline_outcomes({("fa", "A"): w}, B.TrainingIndex([]), test, step_limit=3, baselines=["from-empty"])
    assert not short[0]["success"]


def test_parse_missing_reads_both_error_forms():
    w = hand_world()
    assert B.parse_missing(w, "Error: cannot infuse charm: missing dew x1, salve x2") == [(DEW, 1), (SALVE, 2)]
    assert B.parse_missing(w, "Error: cannot infuse charm: missing inputs") is None
    assert B.parse_missing(w, "Error: no rule to brew charm") is None
    assert B.parse_missing(w, "Error: cannot infuse charm: missing moon x1") is None    # unknown item


def test_error_reader_reads_listed_inputs():
    w = hand_world("full")
    # brew charm (no rule) -> infuse charm (missing dew, salve) -> brew salve (missing ash x2) -> 2 gathers
    # -> brew salve -> gather dew -> infuse charm: 8 turns; knowing the verbs saves the first one
    assert B.play_error_reader(w, task("charm"), 8) and not B.play_error_reader(w, task("charm"), 7)
    assert B.play_error_reader(w, task("charm"), 7, know_verbs=True)
    assert not B.play_error_reader(w, task("charm"), 6, know_verbs=True)
    assert B.play_error_reader(w, task("dew"), 1)


def test_error_reader_fails_when_errors_do_not_list_inputs():
    w = hand_world("full")
    for know in (False, True):
        assert not B.play_error_reader(w, task("charm"), 20, know, terse_env)
        assert not B.play_error_reader(w, task("salve"), 20, know, terse_env)
        assert B.play_error_reader(w, task("charm", dew=1, salve=1), 20, know, terse_env)  # nothing to find out
    if apply_action(hand_world("terse"), {}, "infuse charm") != "cannot infuse charm: missing inputs":
        pytest.skip("this environment has no terse error setting")
    assert not B.play_error_reader(hand_world("terse"), task("charm"), 20)
    assert B.play_error_reader(hand_world("terse"), task("charm", dew=1, salve=1), 20)


# ----- overlap and the corpus-level entry points --------------------------------------------------------
def write_hand_corpus(folder, train, test):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules_A.json").write_text(json.dumps(hand_world().to_rules_json()))
    for name, rows in (("pretrain", train), ("test_id", test)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_overlap_counts_verbatim_plans_and_goals(tmp_path):
    test = [row("charm", {"salve": 1}, ["gather dew", "infuse charm"], "t0", "test_id"),
            row("salve", {}, ["gather dew", "brew salve"], "t1", "test_id")]
    copied = write_hand_corpus(tmp_path / "copied", [dict(r, split="pretrain") for r in test], test)
    o = B.overlap(copied, splits=("ID",))["ID"]["all"]
    assert o == {"rows": 2, "plan_in_training": 100.0, "goal_in_training": 100.0, "task_in_training": 100.0}
    other = write_hand_corpus(tmp_path / "other", [row("dew", {}, ["gather dew"], "p0")], test)
    o = B.overlap(other, splits=("ID",))["ID"]["all"]
    assert o == {"rows": 2, "plan_in_training": 0.0, "goal_in_training": 0.0, "task_in_training": 0.0}
    half = write_hand_corpus(tmp_path / "half", [row("charm", {}, ["gather dew", "infuse charm"], "p0")], test)
    o = B.overlap(half, splits=("ID",))["ID"]
    assert o["all"]["plan_in_training"] == 50.0 and o["all"]["goal_in_training"] == 50.0
    assert o["all"]["task_in_training"] == 0.0 and o["short"]["rows"] == 2 and o["mid"]["rows"] == 0
    # a task copied into training is solved by recall, and the tables say so
    res = B.run_baselines(copied, splits=("ID",), k=2)
    assert cells(res, "recall-nearest")[("ID", "all")]["avg@2"] == 100.0
    md = B.baselines_markdown(res)
    assert "| ID | recall-nearest | 100.0 |" in md and "| ID | all | 2 | 100.0 | 100.0 | 100.0 |" in md


def test_cli_writes_tables_and_rejects_bad_input(corpus, tmp_path, capsys):
    out = tmp_path / "out"
    assert B.main(["--data", str(corpus), "--max-tasks-per-cell", "2", "--k", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads((out / "baselines.json").read_text())
    assert data["tasks"] == 12 and data["max_tasks_per_cell"] == 2 and "| ID | solver | 100.0 |" in printed
    assert (out / "baselines.md").read_text() in printed
    for args in (["--data", str(tmp_path / "nope")], ["--data", str(corpus), "--splits", "ID,train"],
                 ["--data", str(corpus), "--difficulties", "longest"], ["--data", str(tmp_path)],
                 ["--data", str(corpus), "--step-limit", "0"], []):
        assert B.main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ")


def test_comparison_table_puts_the_model_beside_the_baselines():
    base = [{"domain": "fa", "split": "ID", "difficulty": "all", "baseline": n, "tasks": 2, "avg@8": 50.0,
             "pass@8": 100.0 if n == "random-valid" else 50.0} for n in B.BASELINES]
    md = B.comparison_markdown([{"domain": "fa", "split": "ID", "difficulty": "all", "tasks": 2, "avg@8": 12.5},
                                {"domain": "fa", "split": "OOD", "difficulty": "all", "tasks": 2, "avg@8": 0.0}], base, 8)
    lines = md.splitlines()
    assert "model avg@8 | always-gather | random-valid avg@8 | random-valid pass@8 | recall-nearest" in lines[2]
    n_rest = len(B.BASELINES) - 2          # after always-gather and random-valid (two columns)
    assert lines[4] == "| fa | ID | all | 2 | 12.50 | " + " | ".join(["50.0", "50.0", "100.0"] + ["50.0"] * n_rest) + " |"
    assert lines[5].endswith("| 0.00 | " + " | ".join(["-"] * (n_rest + 3)) + " |")


def test_the_gym_stays_torch_free():
    code = "import sys, planning_gym.baselines; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
