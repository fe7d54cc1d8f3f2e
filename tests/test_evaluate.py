"""Tests of `engine.evaluate`: the avg@K / pass@K arithmetic, the run-folder CLI and its errors.

Why: the evaluation table is the number every experiment reports, so its arithmetic is checked
on hand-made outcomes whose answers are known, and the CLI is run end to end on a run folder
laid out as `pretrain.train` writes it (a tiny random model, a few tasks, short episodes).
Bad input must give one ``error:`` line and exit status 2, never a traceback.
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from engine.evaluate import evaluate, main, score, select_rows
from test_rollout import assets  # noqa: F401  (session fixture: corpus, tokenizer, model)


pytestmark = pytest.mark.usefixtures("one_thread")


def outcome(task, success, split="ID", difficulty="short", domain="fa", pattern="T1"):
    return {"domain": domain, "split": split, "difficulty": difficulty, "task": task, "success": success,
            "pattern": pattern, "n_turns": 2, "n_invalid": 1}


def test_avg_and_pass_at_k_on_hand_made_outcomes():
    k = 8
    outs = [outcome("a", i == 0) for i in range(k)]                        # 1 of 8
    outs += [outcome("b", False, pattern="D1") for _ in range(k)]          # 0 of 8
    outs += [outcome("c", i < 6, difficulty="long") for i in range(k)]     # 6 of 8
    outs += [outcome("d", True, split="OOD") for _ in range(k)]            # 8 of 8
    rows = {(r["split"], r["difficulty"]): r for r in score(outs, k)}
    short = rows[("ID", "short")]
    assert short["tasks"] == 2 and short["samples"] == 16
    assert short["avg@8"] == pytest.approx(100 * (1 / 8 + 0) / 2) and short["pass@8"] == pytest.approx(50.0)
    assert short["T1"] == pytest.approx(50.0) and short["D1"] == pytest.approx(50.0) and short["Others"] == 0
    assert rows[("ID", "long")]["avg@8"] == pytest.approx(75.0) and rows[("ID", "long")]["pass@8"] == 100.0
    every = rows[("ID", "all")]
    assert every["tasks"] == 3 and every["avg@8"] == pytest.approx(100 * (1 / 8 + 0 + 6 / 8) / 3)
    assert every["pass@8"] == pytest.approx(200 / 3)
    assert rows[("OOD", "short")]["avg@8"] == 100.0 and ("OOD", "mid") not in rows
    order = [(r["split"], r["difficulty"]) for r in score(outs, k)]
    assert order == [("ID", "short"), ("ID", "long"), ("ID", "all"), ("OOD", "short"), ("OOD", "all")]


def test_a_failed_episode_repeating_one_action_is_stuck():
    from engine.evaluate import is_stuck
    loop = ["gather a", "gather b", "gather b", "gather b", "gather b"]
    assert is_stuck(loop, False) and not is_stuck(loop, True)          # a success is never stuck
    assert not is_stuck(loop[:4], False) and not is_stuck(["x"] * 3, False)
    outs = [{**outcome("a", False), "stuck": i < 2} for i in range(8)]
    assert score(outs, 8)[0]["stuck"] == pytest.approx(25.0)


def test_select_rows_keeps_the_first_n_per_cell():
    rows = [{"domain": d, "difficulty": b, "id": i} for i, (d, b) in
            enumerate([("fa", "short"), ("fa", "short"), ("fa", "mid"), ("lf", "short"), ("fa", "short")])]
    assert [r["id"] for r in select_rows(rows, 1)] == [0, 2, 3]
    assert select_rows(rows, None) == rows


@pytest.fixture()
def run_dir(assets, tmp_path):  # noqa: F811
    """A run folder as `pretrain.train` leaves it: config naming the corpus, summary, checkpoint."""
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_000001"
    assets["model"].save_pretrained(str(ckpt))
    assets["tokenizer"].save_pretrained(str(ckpt))
    (run / "train_config.json").write_text(json.dumps({"data": str(assets["corpus"]), "config": {}}))
    (run / "summary.json").write_text(json.dumps({"checkpoint": str(ckpt), "step": 1}))
    return run


FAST = ["--k", "2", "--max-tasks-per-cell", "1", "--step-limit", "2", "--max-turn-tokens", "6", "--quiet"]


def test_cli_writes_tables_into_the_run(run_dir, capsys):
    assert main(["--run", str(run_dir), *FAST]) == 0
    out = run_dir / "eval"
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["split"], r["difficulty"]) for r in table] == [
        (s, d) for s in ("ID", "OOD") for d in ("short", "mid", "long", "all")]
    assert all(r["tasks"] == ("3" if r["difficulty"] == "all" else "1") and r["samples"] in ("2", "6") for r in table)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["k"] == 2 and summary["episodes"] == 12 and set(summary["overall"]) == {"ID", "OOD"}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and all(s["n_turns"] <= 2 and s["text"].startswith("<|env|>") for s in samples)
    keys = {s["task"]: s["task_key"] for s in samples}          # what each task is, beside its positional id
    assert len(keys) == 6 and len(set(keys.values())) == 6
    md = (out / "results.md").read_text()
    assert "| fa | OOD | long | 1 |" in md and "avg@2" in md and "Others" in md
    assert "ID: avg@2" in capsys.readouterr().out


def test_evaluate_function_summary(assets):  # noqa: F811
    s = evaluate(assets["model"], assets["tokenizer"], assets["corpus"], k=3, max_tasks_per_cell=1, step_limit=1,
                 max_turn_tokens=4, progress=False)
    assert s["tasks"] == 6 and s["episodes"] == 18 and s["generated_tokens"] > 0
    for split in ("ID", "OOD"):
        assert 0 <= s["overall"][split]["avg@3"] <= s["overall"][split]["pass@3"] <= 100
    assert sum(r["samples"] for r in s["table"] if r["difficulty"] != "all") == 18
    assert s["overall"]["ID"]["tasks"] == s["overall"]["OOD"]["tasks"] == 3
    only_id = evaluate(assets["model"], assets["tokenizer"], assets["corpus"], k=2, max_tasks_per_cell=1,
                       step_limit=1, max_turn_tokens=4, splits=("ID",), progress=False)
    assert only_id["episodes"] == 6 and set(only_id["overall"]) == {"ID"} and only_id["splits"] == ["ID"]
    assert {r["split"] for r in only_id["table"]} == {"ID"}
    long_id = evaluate(assets["model"], assets["tokenizer"], assets["corpus"], k=2, max_tasks_per_cell=1,
                       step_limit=1, max_turn_tokens=4, splits=("ID",), difficulties=("long",), progress=False)
    assert long_id["episodes"] == 2 and long_id["difficulties"] == ["long"]
    assert {r["difficulty"] for r in long_id["table"]} == {"long", "all"}
    every_bin = evaluate(assets["model"], assets["tokenizer"], assets["corpus"], k=1, max_tasks_per_cell=1,
                         step_limit=1, max_turn_tokens=4, splits=("ID",), difficulties=("long", "short", "mid"),
                         progress=False)
    assert every_bin["difficulties"] is None and every_bin["episodes"] == 3


@pytest.mark.parametrize("case", ["missing_run", "no_checkpoint", "corrupt_checkpoint", "unknown_corpus",
                                  "model_without_data", "bad_k", "bad_split", "bad_difficulty", "nan_temperature"])
def test_bad_input_is_one_error_line(case, run_dir, tmp_path, capsys):
    ckpt = run_dir / "checkpoints" / "step_000001"
    args = ["--run", str(run_dir), *FAST]
    if case == "missing_run":
        args = ["--run", str(tmp_path / "nope")]
    elif case == "no_checkpoint":
        shutil.rmtree(run_dir / "checkpoints")
    elif case == "corrupt_checkpoint":
        (ckpt / "model.safetensors").write_bytes(b"not a safetensors file")
    elif case == "unknown_corpus":
        args += ["--data", str(tmp_path / "no_corpus")]
    elif case == "model_without_data":
        args = ["--model", str(ckpt)]
    elif case == "bad_k":
        args += ["--k", "0"]
    elif case == "bad_split":
        args += ["--splits", "ID,train"]
    elif case == "bad_difficulty":
        args += ["--difficulties", "long,longest"]
    elif case == "nan_temperature":
        args += ["--temperature", "nan"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0]
    assert not (run_dir / "eval").exists()


def test_a_copied_run_uses_its_own_checkpoint(run_dir, tmp_path):
    """summary.json names the checkpoint; a copy of the run must load the copy's weights."""
    import torch

    from pretrain.checkpoint import load_model_and_tokenizer

    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    ckpt = copy / "checkpoints" / "step_000001"
    from safetensors.torch import load_file, save_file
    weights = load_file(str(ckpt / "model.safetensors"))
    save_file({k: torch.zeros_like(v) for k, v in weights.items()}, str(ckpt / "model.safetensors"))
    model, _, _ = load_model_and_tokenizer(copy)
    assert all(float(p.detach().abs().sum()) == 0 for p in model.parameters())


def test_export_is_a_clean_hf_folder_whose_generate_stops_at_env(run_dir, tmp_path, capsys):
    """make export: only model, tokenizer (with the chat template) and card; the chat template
    writes a corpus row exactly; plain `generate` ends the agent's turn at <|env|>."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from planning_gym.text import split_turns
    from pretrain.export import main as export
    from pretrain.tokenizer import encode, special_ids

    assert main(["--run", str(run_dir), *FAST]) == 0                       # an evaluation for the card
    out = tmp_path / "export"
    assert export(["--run", str(run_dir), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert "optimizer.safetensors" not in names and "trainer_state.json" not in names
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "README.md"} <= set(names)
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers") and "avg@2" in card and "## Data" in card
    tok = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    special = special_ids(tok)
    assert set(model.generation_config.eos_token_id) == {special.env, special.eos}
    corpus = Path(json.loads((run_dir / "train_config.json").read_text())["data"])
    text = json.loads((corpus / "test_id.jsonl").read_text().splitlines()[0])["text"]
    roles = {"env": "environment", "agent": "agent"}
    messages = [{"role": roles[r], "content": c} for r, c in split_turns(text)]
    assert tok.apply_chat_template(messages, tokenize=False) == text
    assert list(tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]) == encode(tok, text)
    prompt = tok.apply_chat_template(messages[:1], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    from transformers import LogitsProcessor, LogitsProcessorList

    class EnvAfterFive(LogitsProcessor):                     # the sixth token is <|env|>; nothing may follow
        def __call__(self, input_ids, scores):
            if input_ids.shape[1] - prompt["input_ids"].shape[1] == 5:
                scores[:, special.env] = 1e4
            return scores

    with torch.no_grad():
        new = model.generate(**prompt, max_new_tokens=50, do_sample=False, suppress_tokens=[special.eos],
                             logits_processor=LogitsProcessorList([EnvAfterFive()]))[0, prompt["input_ids"].shape[1]:]
    assert new.tolist()[-1] == special.env and len(new) == 6
    assert export(["--run", str(run_dir), "--out", str(out)]) == 2                 # not empty: refused
    assert "pass --force" in capsys.readouterr().err
    assert export(["--run", str(run_dir), "--out", str(out), "--force"]) == 0
