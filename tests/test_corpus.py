"""Corpora: determinism, split hygiene, replay verification, patterns and the CLI."""
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from planning_gym.config import CorpusConfig
from planning_gym.corpus import SplitLeakError, build_worlds, check_splits, load_rows, write_corpus
from planning_gym.patterns import MIXTURES, OPTIMAL, PATTERNS, SUBOPTIMAL, classify_trajectory
from planning_gym.text import ENV, parse_action, split_turns
from planning_gym.trajectory import ROW_FIELDS, RowError, verify_row
from planning_gym.world import World

SMALL = dict(n_pretrain_per_bin=40, n_posttrain_per_bin=8, n_test_per_bin=6)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    cfg = CorpusConfig.from_scale("tiny", patterns="4opt4sub", **SMALL)
    out = tmp_path_factory.mktemp("c") / cfg.name
    write_corpus(cfg, out, workers=1, progress=False)
    return cfg, out


def test_files_and_fields(corpus):
    cfg, out = corpus
    names = {p.name for p in out.iterdir()}
    for split in ("pretrain", "posttrain", "test_id", "test_ood"):
        assert {f"{split}.jsonl", f"{split}.parquet"} <= names
    assert {"rules_A.json", "stats.csv", "stats.md", "README.md", "config.json"} <= names
    rows = load_rows(out / "pretrain.jsonl")
    assert len(rows) == 3 * 40
    assert all(set(ROW_FIELDS) <= set(r) for r in rows)
    assert {r["split"] for r in rows} == {"pretrain"}


def test_same_seed_gives_byte_identical_files_with_any_worker_count(corpus, tmp_path):
    cfg, out = corpus
    again = tmp_path / "again"
    write_corpus(cfg, again, workers=2, progress=False)
    for f in sorted(out.iterdir()):
        assert f.read_bytes() == (again / f.name).read_bytes(), f.name


def test_seed_changes_the_corpus(corpus, tmp_path):
    cfg, out = corpus
    other = CorpusConfig.from_scale("tiny", patterns="4opt4sub", seed=1, **SMALL)
    write_corpus(other, tmp_path / "s1", workers=1, progress=False)
    assert (out / "pretrain.jsonl").read_bytes() != (tmp_path / "s1" / "pretrain.jsonl").read_bytes()


def test_config_json_round_trips(corpus):
    cfg, out = corpus
    assert CorpusConfig.from_dict(json.loads((out / "config.json").read_text())) == cfg


def test_parquet_holds_the_same_rows(corpus):
    import datasets
    _, out = corpus
    ds = datasets.Dataset.from_parquet(str(out / "test_ood.parquet"))
    assert ds.to_list() == load_rows(out / "test_ood.jsonl")


def test_every_row_replays_from_the_exported_rules(corpus):
    """An independent tool holding only rules_A.json and the JSONL reproduces every row."""
    _, out = corpus
    world = World.from_rules_json(json.loads((out / "rules_A.json").read_text()))
    for split in ("pretrain", "posttrain", "test_id", "test_ood"):
        for row in load_rows(out / f"{split}.jsonl"):
            verify_row(world, row)


def test_tampered_rows_are_caught(corpus):
    _, out = corpus
    world = World.from_rules_json(json.loads((out / "rules_A.json").read_text()))
    row = next(r for r in load_rows(out / "pretrain.jsonl") if r["horizon"] >= 3)
    bad_obs = copy.deepcopy(row)
    head, _, tail = bad_obs["text"].rpartition(" x1")        # the final observation's inventory
    bad_obs["text"] = head + " x2" + tail
    bad_success = {**row, "success": not row["success"]}
    bad_gold = {**row, "gold_actions": row["gold_actions"][:-1]}
    bad_actions = {**row, "actions": row["actions"][::-1]}
    for bad in (bad_obs, bad_success, bad_gold, bad_actions):
        with pytest.raises(RowError):
            verify_row(world, bad)


def test_splits_are_disjoint_and_leaks_are_detected(corpus):
    cfg, out = corpus
    worlds = build_worlds(cfg)
    rows = {s: load_rows(out / f"{s}.jsonl") for s in ("pretrain", "posttrain", "test_id", "test_ood")}
    check_splits(cfg, worlds, rows)
    leaked = {**rows, "pretrain": rows["pretrain"] + [{**rows["test_id"][0], "split": "pretrain"}]}
    with pytest.raises(SplitLeakError, match="test_id task appears in a training pool"):
        check_splits(cfg, worlds, leaked)
    leaked = {**rows, "posttrain": rows["posttrain"] + [{**rows["test_ood"][0], "split": "posttrain"}]}
    with pytest.raises(SplitLeakError):
        check_splits(cfg, worlds, leaked)


def test_patterns_classified_and_suboptimal_rows_waste_turns(corpus):
    _, out = corpus
    rows = load_rows(out / "pretrain.jsonl")
    assert {r["pattern"] for r in rows} == set(PATTERNS)
    for r in rows:
        assert classify_trajectory(r["text"]) == r["pattern"]
        assert r["success"]
        if r["pattern"] in OPTIMAL:
            assert r["actions"] == r["gold_actions"]
    for p in SUBOPTIMAL:
        sub = [r for r in rows if r["pattern"] == p]
        assert sub and all(len(r["actions"]) > len(r["gold_actions"]) for r in sub), p
    errors = sum("Result: Error:" in r["text"] for r in rows if r["pattern"] in ("D1", "D2"))
    assert errors > 0
    tests = load_rows(out / "test_id.jsonl")
    assert all(r["pattern"] in OPTIMAL for r in tests)


def test_classifier_says_others_for_unpatterned_text():
    assert classify_trajectory(f"{ENV}Goal: x<|agent|>hmm\nAction: gather a") == "Others"
    assert parse_action("Step 1/2: x\nAction: gather ash root\n") == "gather ash root"


def test_world_model_turns_predict_the_next_state(corpus):
    _, out = corpus
    row = next(r for r in load_rows(out / "pretrain.jsonl") if r["pattern"] == "T1" and r["horizon"] >= 2)
    turns = split_turns(row["text"])
    for k in range(1, len(turns) - 1, 2):
        predicted = turns[k][1].split("\n")[1].rsplit(" -> ", 1)[1]
        observed = turns[k + 1][1].split("Inventory: ")[1]
        assert predicted == observed


def test_domains_share_the_same_abstract_tasks(tmp_path):
    cfg = CorpusConfig.from_scale("tiny", domains=("fa", "lf", "ea"), **SMALL)
    write_corpus(cfg, tmp_path / "x", workers=1, progress=False)
    rows = load_rows(tmp_path / "x" / "pretrain.jsonl")
    by_domain = {d: [(r["horizon"], r["pattern"], len(r["actions"])) for r in rows if r["domain"] == d]
                 for d in ("fa", "lf", "ea")}
    assert by_domain["fa"] == by_domain["lf"] == by_domain["ea"]
    assert {"rules_fa_A.json", "rules_lf_A.json", "rules_ea_A.json"} <= {p.name for p in (tmp_path / "x").iterdir()}


def test_horizon_mix_controls_bins(tmp_path):
    cfg = CorpusConfig.from_scale("tiny", horizon_mix=(100, 5, 0), **{**SMALL, "n_pretrain_per_bin": 100})
    write_corpus(cfg, tmp_path / "x", workers=1, progress=False)
    rows = load_rows(tmp_path / "x" / "pretrain.jsonl")
    counts = {b: sum(r["difficulty"] == b for r in rows) for b in ("short", "mid", "long")}
    assert counts == {"short": 100, "mid": 5, "long": 0}


def test_direct_format_is_the_action_alone(tmp_path):
    cfg = CorpusConfig.from_scale("tiny", cot_format="direct", **SMALL)
    write_corpus(cfg, tmp_path / "x", workers=1, progress=False)
    row = load_rows(tmp_path / "x" / "pretrain.jsonl")[0]
    agent = [c for role, c in split_turns(row["text"]) if role == "agent"]
    assert all(t.startswith("Action: ") and "\n" not in t for t in agent)


def test_mixture_weights():
    from planning_gym.patterns import mixture_weights
    assert MIXTURES["4opt8sub"]["D1"] == 2 * MIXTURES["4opt8sub"]["T1"]
    assert mixture_weights("T1+D2") == {"T1": 1.0, "D2": 1.0}
    assert mixture_weights("T1:2+D1:1") == {"T1": 2.0, "D1": 1.0}
    for bad in ("T1+T1", "T1:0", "Z9", "T1:x"):
        with pytest.raises(ValueError):
            mixture_weights(bad)


def test_explicit_pattern_set_corpus(tmp_path):
    cfg = CorpusConfig.from_scale("tiny", patterns="T2+D3", **SMALL)
    write_corpus(cfg, tmp_path / "x", workers=1, progress=False)
    rows = load_rows(tmp_path / "x" / "pretrain.jsonl")
    assert {r["pattern"] for r in rows} == {"T2", "D3"}
    assert {r["pattern"] for r in load_rows(tmp_path / "x" / "test_id.jsonl")} == {"T2"}


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "planning_gym.make_data", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args,message", [
    (["--domain", "xx"], "unknown domain 'xx'"),
    (["--scale", "huge"], "unknown scale 'huge'"),
    (["--horizon-mix", "1/2"], "S/M/L percentages"),
    (["--patterns", "9opt"], "bad pattern mixture"),
    (["--patterns", "T1+X9"], "bad pattern mixture"),
    (["--items-per-level", "2"], "steps from an empty inventory"),
    (["--inputs-per-rule", "4,2"], "inputs_per_rule"),
    # contradictory or impossible knobs
    (["--errors", "loud"], "errors must be one of terse, full"),
    (["--paths", "many"], "paths must be one of multi, single"),
    (["--rules-per-item", "1,3"], "needs n_verbs >= 6"),       # multi-path worlds need spare verbs
    (["--goal-min-plan", "0"], "must be positive"),
    (["--horizon-bins", "1-5,7-8,9-13"], "three adjacent ranges"),
    (["--horizon-bins", "1-5,x"], "plan-length ranges"),
    (["--horizon-bins", "1-5,6-8,9-30"], "beyond the 20-step limit"),
])
def test_cli_bad_input_is_one_line_exit_2_and_leaves_nothing(tmp_path, args, message):
    res = run_cli("--scale", "tiny", "--data-dir", str(tmp_path), *args, cwd=Path(__file__).parents[1])
    assert res.returncode == 2
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_cli_writes_a_corpus(tmp_path):
    res = run_cli("--scale", "tiny", "--data-dir", str(tmp_path), "--n-pretrain", "10", "--n-test", "4",
                  "--quiet", cwd=Path(__file__).parents[1])
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "fa-tiny-pre10-test4" / "stats.md").read_text().count("|") > 20
    args = ("--scale", "tiny", "--data-dir", str(tmp_path), "--n-pretrain", "10", "--n-test", "4", "--quiet")
    again = run_cli(*args, cwd=Path(__file__).parents[1])
    assert "reusing" in again.stdout
    cfg_file = tmp_path / "fa-tiny-pre10-test4" / "config.json"
    cfg_file.write_text(cfg_file.read_text().replace('"generator": "', '"generator": "old'))
    assert "wrote" in run_cli(*args, cwd=Path(__file__).parents[1]).stdout     # other code: regenerated


def test_domain_file_variants_and_load_dataset(tmp_path):
    """A new domain as a .json path, graph-variant flags that get their own folder, and the card's
    YAML that makes `datasets.load_dataset(folder)` give the four splits."""
    import datasets
    from planning_gym.world import load_domain
    spec = {**load_domain("fa"), "key": "zz", "gather_verb": "mine", "verbs": ["smelt", "cast", "draw", "temper"]}
    (tmp_path / "zz.json").write_text(json.dumps(spec))
    root = Path(__file__).parents[1]
    base = ("--scale", "tiny", "--data-dir", str(tmp_path / "d"), "--n-pretrain", "20", "--n-test", "3", "--quiet")
    res = run_cli("--domain", str(tmp_path / "zz.json"), *base, cwd=root)
    assert res.returncode == 0, res.stderr
    res = run_cli(*base, "--n-base", "7", cwd=root)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["fa-tiny-pre20-test3-nbase7", "zz-tiny-pre20-test3"]
    rows = load_rows(tmp_path / "d" / "zz-tiny-pre20-test3" / "pretrain.jsonl")
    assert {r["domain"] for r in rows} == {"zz"} and "mine " in rows[0]["text"] or "smelt" in rows[0]["text"]
    ds = datasets.load_dataset(str(tmp_path / "d" / "fa-tiny-pre20-test3-nbase7"))
    assert sorted(ds) == ["posttrain", "pretrain", "test_id", "test_ood"] and ds["test_ood"].num_rows == 9


def test_malformed_domain_file_is_one_line_exit_2(tmp_path):
    (tmp_path / "bad.json").write_text('{"key": "bad", "name": "x"}')
    res = run_cli("--domain", str(tmp_path / "bad.json"), "--scale", "tiny", "--data-dir", str(tmp_path / "d"),
                  cwd=Path(__file__).parents[1])
    assert res.returncode == 2 and "lacks fields" in res.stderr and not (tmp_path / "d").exists()


def test_horizon_bins_are_a_corpus_setting(tmp_path):
    cfg = CorpusConfig.from_scale("tiny", horizon_bins=((1, 4), (5, 9), (10, 14)), **SMALL)
    assert cfg.name.endswith("bins1to4-5to9-10to14")
    write_corpus(cfg, tmp_path / "x", workers=1, progress=False)
    rows = [r for s in ("pretrain", "test_id", "test_ood") for r in load_rows(tmp_path / "x" / f"{s}.jsonl")]
    lengths = {b: {r["horizon"] for r in rows if r["difficulty"] == b} for b in ("short", "mid", "long")}
    assert max(lengths["short"]) <= 4 and lengths["mid"] <= set(range(5, 10)) and 14 >= max(lengths["long"]) >= 10
    assert CorpusConfig.from_dict(json.loads((tmp_path / "x" / "config.json").read_text())) == cfg


def test_generator_fingerprint_follows_the_generator_not_the_scale_dials(tmp_path):
    """A corpus is rebuilt when code that writes it changes (graph.py), not when scales.py changes
    a post-training budget (its corpus sizes are compared through config.json instead)."""
    import shutil

    from planning_gym import corpus as corpus_module
    from planning_gym.corpus import code_fingerprint

    root = tmp_path / "planning_gym"
    shutil.copytree(Path(corpus_module.__file__).parent, root, ignore=shutil.ignore_patterns("__pycache__"))
    before = code_fingerprint(root)
    assert before == code_fingerprint()
    (root / "scales.py").write_text((root / "scales.py").read_text() + "\n# a new post-training budget\n")
    assert code_fingerprint(root) == before
    (root / "graph.py").write_text((root / "graph.py").read_text() + "\n# a generator change\n")
    assert code_fingerprint(root) != before
