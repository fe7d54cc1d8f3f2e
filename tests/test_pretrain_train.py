"""End-to-end tests of ``python -m pretrain.train`` as real subprocesses.

Why: the promises of the trainer are about processes, not functions: a tiny run learns and leaves
an HF checkpoint; a run killed with SIGKILL and resumed ends with the same bits as one that was
never interrupted; two gloo processes under torchrun match one process with the same global
batch; a diverging run stops and keeps its last good checkpoint; bad input gives one error line,
exit status 2 and touches nothing.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pretrain.synthetic import write_synthetic_corpus

ROOT = Path(__file__).resolve().parents[1]
STEPS = 24
ARGS = ["--scale", "tiny", "--steps", str(STEPS), "--block-size", "64", "--micro-batch", "4",
        "--batch-size", "8", "--warmup-steps", "4", "--eval-every", "8", "--ckpt-every", "8",
        "--log-every", "1", "--set", "eval_blocks=8", "--set", "keep_checkpoints=3"]


# One thread per process, as torchrun does: on a 2-core CI machine that is running other tests
# too, two OpenMP threads per process thrash (measured 5-7x slower), and equal settings keep the
# single-process reference and its SIGKILL/resume twin bit-comparable.
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def train(*args: str, torchrun: int = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}"] \
        if torchrun else [sys.executable]
    return subprocess.run([*launcher, "-m", "pretrain.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=ENV)


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def last_logged_step(run: Path) -> int:
    """Newest training step in a live run's metrics (a line being written is skipped)."""
    steps = [0]
    if (run / "metrics.jsonl").is_file():
        for line in (run / "metrics.jsonl").read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "loss" in row:
                steps.append(row["step"])
    return max(steps)


def weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def snapshot(folder: Path) -> dict:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_synthetic_corpus(tmp_path_factory.mktemp("corpus"), n_pretrain=300, n_test=40, seed=0)


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """One uninterrupted single-process run (global batch 8 = 4 x 2 accumulation steps)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    proc = train("--data", str(corpus), "--out", str(run), *ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run, proc


def test_tiny_run_learns_and_leaves_an_hf_checkpoint(reference):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, proc = reference
    final = run / "checkpoints" / f"step_{STEPS:06d}"
    assert "scale: tiny (given)" in proc.stdout and "estimated time" in proc.stdout
    assert f"checkpoint: {final}" in proc.stdout
    evals = [m for m in metrics(run) if "eval_loss" in m]
    assert [m["step"] for m in evals] == [0, 8, 16, 24]
    assert evals[-1]["eval_loss"] < 0.6 * evals[0]["eval_loss"]  # it learns (24 tiny steps: ~0.45x)
    assert f"final eval loss (test_id, all tokens): {evals[-1]['eval_loss']:.4f}" in proc.stdout
    losses = [m["loss"] for m in metrics(run) if "loss" in m]
    assert len(losses) == STEPS and losses[-1] < 0.6 * losses[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["checkpoint"] == f"checkpoints/{final.name}" and summary["step"] == STEPS
    saved = json.loads((run / "train_config.json").read_text())
    assert saved["config"]["steps"] == STEPS and saved["config"]["scale"] == "tiny"
    # what training again to the bit needs: the thread count and the CPU's kernels
    assert saved["threads"] == 1 and f"[{torch.backends.cpu.get_cpu_capability()}:" in saved["cpu"]
    from pretrain.data import PackedData, read_texts
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000008", "step_000016", "step_000024"]
    # the checkpoint, loaded by plain transformers, is the model that was evaluated
    from pretrain.tokenizer import special_ids

    model = AutoModelForCausalLM.from_pretrained(final).eval()
    tok = AutoTokenizer.from_pretrained(final)
    assert len(tok) == model.config.vocab_size
    texts = read_texts(Path(saved["data"]) / "pretrain.jsonl")       # one epoch: each text and its EOS
    assert saved["corpus_tokens"] == sum(len(tok(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts)
    corpus = Path(saved["data"])
    data = PackedData.from_texts(read_texts(corpus / "test_id.jsonl"), tok, special_ids(tok), 64)
    x, y, _ = (torch.from_numpy(a.astype("int64")) for a in data.blocks(list(range(8))))
    with torch.no_grad():
        logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
    assert abs(loss - evals[-1]["eval_loss_all"]) < 1e-4


def test_sigkill_then_resume_is_bit_identical(corpus, reference, tmp_path):
    ref_run, _ = reference
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "pretrain.train", "--data", str(corpus), "--out", str(run), *ARGS]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 240
    try:  # kill between two checkpoints, so the resume must redo steps 9.. exactly
        while time.time() < deadline and proc.poll() is None:
            if last_logged_step(run) >= 10:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_at = last_logged_step(run)
    latest = sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith("step_"))[-1]
    assert int(latest[5:]) <= killed_at < STEPS  # killed mid-run, after at least one checkpoint
    with open(run / "metrics.jsonl", "a") as f:  # as if the kill had landed inside a write
        f.write('{"step": 2, "lo')
    resumed = train("--data", str(corpus), "--out", str(run), *ARGS, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at step {int(latest[5:])}" in resumed.stdout
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = weights(ref_run / "checkpoints" / f"step_{STEPS:06d}" / name)
        b = weights(run / "checkpoints" / f"step_{STEPS:06d}" / name)
        assert a.keys() == b.keys()
        assert all((a[k] == b[k]).all() for k in a), name
    ref_rows = [{k: v for k, v in m.items() if k != "tok_per_s"} for m in metrics(ref_run)]
    got_rows = [{k: v for k, v in m.items() if k != "tok_per_s"} for m in metrics(run)]
    assert got_rows == ref_rows  # same losses, same eval losses, no duplicated rows


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_gloo_processes_match_one_process(corpus, reference, tmp_path, mode):
    ref_run, _ = reference
    run = tmp_path / "run"
    extra = ["--fsdp"] if mode == "fsdp" else []
    proc = train("--data", str(corpus), "--out", str(run), *ARGS, *extra, torchrun=2)  # same flags ...
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 process(es) x 4 x 1 accumulation" in proc.stdout  # ... but 2 ranks instead of 2 micro-steps
    final = f"step_{STEPS:06d}"
    assert {"rng_rank0.safetensors", "rng_rank1.safetensors"} <= {p.name for p in (run / "checkpoints" / final).iterdir()}
    a = weights(ref_run / "checkpoints" / final / "model.safetensors")
    b = weights(run / "checkpoints" / final / "model.safetensors")
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
    earlier = weights(ref_run / "checkpoints" / "step_000008" / "model.safetensors")
    moved = max((a[k] - earlier[k]).abs().max().item() for k in a)
    assert moved > 1e-2  # the tolerance is far below how much steps 9..24 moved the weights
    ref_losses = [m["loss"] for m in metrics(ref_run) if "loss" in m]
    got_losses = [m["loss"] for m in metrics(run) if "loss" in m]
    assert len(got_losses) == STEPS and max(abs(x - y) for x, y in zip(ref_losses, got_losses)) < 1e-4


def test_diverging_run_stops_and_keeps_last_good_checkpoint(corpus, tmp_path):
    run = tmp_path / "run"
    proc = train("--data", str(corpus), "--out", str(run), "--scale", "tiny", "--steps", "20", "--block-size", "32",
                 "--micro-batch", "2", "--batch-size", "2", "--lr", "1e30", "--warmup-steps", "0",
                 "--ckpt-every", "1", "--eval-every", "100", "--set", "grad_clip=1e38", "--set", "eval_blocks=1")
    assert proc.returncode == 3, proc.stderr[-2000:]
    err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "non-finite" in err[0] and "Last good checkpoint" in err[0]
    assert "Traceback" not in proc.stderr
    good = sorted((run / "checkpoints").iterdir())
    assert good and all(p.name.startswith("step_") for p in good)
    import torch

    last = weights(good[-1] / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in last.values())
    assert good[-1].name in err[0] and int(good[-1].name[5:]) < 20


def _bad_cases():
    def corpus_without(name):
        def setup(tmp, corpus, ref):
            bad = tmp / "corpus"
            shutil.copytree(corpus, bad)
            (bad / name).unlink()
            return ["--data", str(bad), "--out", str(tmp / "run"), "--scale", "tiny"], tmp / "run"
        return setup

    def malformed(tmp, corpus, ref):
        bad = tmp / "corpus"
        shutil.copytree(corpus, bad)
        with open(bad / "pretrain.jsonl", "a") as f:
            f.write("{\"text\": \"unterminated\n")
        return ["--data", str(bad), "--out", str(tmp / "run"), "--scale", "tiny"], tmp / "run"

    def copy_ref(tmp, ref):
        run = tmp / "run"
        shutil.copytree(ref, run)
        return run

    def existing(tmp, corpus, ref):
        run = copy_ref(tmp, ref)
        return ["--data", str(corpus), "--out", str(run), *ARGS], run

    def corrupt_config(tmp, corpus, ref):
        run = copy_ref(tmp, ref)
        (run / "train_config.json").write_text("{\"data\": ")
        return ["--out", str(run), "--resume"], run

    def corrupt_checkpoint(tmp, corpus, ref):
        run = copy_ref(tmp, ref)
        opt = run / "checkpoints" / f"step_{STEPS:06d}" / "optimizer.safetensors"
        opt.write_bytes(opt.read_bytes()[:1000])
        return ["--data", str(corpus), "--out", str(run), *ARGS, "--resume"], run

    def changed_option(tmp, corpus, ref):
        run = copy_ref(tmp, ref)
        return ["--out", str(run), "--resume", "--steps", "30"], run

    def plain(*args):
        return lambda tmp, corpus, ref: ([a.format(tmp=tmp, corpus=corpus) for a in args], tmp / "run")

    return {
        "unknown scale": (plain("--data", "{corpus}", "--out", "{tmp}/run", "--scale", "huge"), "unknown scale 'huge'"),
        "missing corpus": (plain("--data", "{tmp}/nowhere", "--out", "{tmp}/run", "--scale", "tiny"), "does not exist"),
        "missing file": (corpus_without("test_id.jsonl"), "has no test_id.jsonl"),
        "malformed row": (malformed, "not valid JSON"),
        "unknown flag": (plain("--data", "{corpus}", "--out", "{tmp}/run", "--frobnicate"), "unrecognized arguments"),
        "unknown field": (plain("--data", "{corpus}", "--out", "{tmp}/run", "--set", "bogus=1"), "known field"),
        "gradient ascent": (plain("--data", "{corpus}", "--out", "{tmp}/run", "--scale", "tiny", "--set", "grad_clip=-1"),
                            "descent into ascent"),
        "infinite lr": (plain("--data", "{corpus}", "--out", "{tmp}/run", "--scale", "tiny", "--set", "lr=Infinity"),
                        "must be finite"),
        "nothing to resume": (plain("--out", "{tmp}/run", "--resume"), "nothing to resume"),
        "checkpoints exist": (existing, "already holds checkpoints"),
        "corrupt config": (corrupt_config, "corrupt run config"),
        "corrupt checkpoint": (corrupt_checkpoint, "corrupt checkpoint"),
        "changed option": (changed_option, "steps=30"),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(case, corpus, reference, tmp_path):
    setup, expected = _bad_cases()[case]
    args, run = setup(tmp_path, corpus, reference[0])
    before = snapshot(run)
    proc = train(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert snapshot(run) == before


def test_agent_loss_is_the_mean_over_agent_tokens_of_the_global_batch(corpus, tmp_path):
    """The logged loss of step 1 is recomputed from scratch (data order, agent mask,
    normalisation over the whole global batch of two accumulated micro-batches)."""
    import torch

    from pretrain.config import make_config
    from pretrain.data import PackedData, read_texts
    from pretrain.model import build_model
    from pretrain.tokenizer import load_tokenizer, special_ids
    from pretrain.train import batch_tensors

    run = tmp_path / "run"
    flags = ["--scale", "tiny", "--steps", "2", "--block-size", "48", "--micro-batch", "3", "--batch-size", "6",
             "--loss-on", "agent", "--log-every", "1", "--eval-every", "2", "--set", "eval_blocks=4", "--seed", "7"]
    proc = train("--data", str(corpus), "--out", str(run), *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loss on agent tokens" in proc.stdout
    rows = metrics(run)
    assert rows[-1]["eval_loss"] == rows[-1]["eval_loss_agent"] != rows[-1]["eval_loss_all"]

    tok = load_tokenizer(run / "tokenizer")
    special = special_ids(tok)
    cfg = make_config("tiny", block_size=48, micro_batch=3, batch_size=6, seed=7)
    data = PackedData.from_texts(read_texts(corpus / "pretrain.jsonl"), tok, special, 48, seed=7)
    model = build_model(cfg, len(tok), special)  # the trainer's initial weights
    blocks = [data.block_of(p) for p in range(6)]
    x, y = batch_tensors(data, blocks, "agent")
    _, _, m = data.blocks(blocks)
    assert (y != -100).sum().item() == int(m.sum()) > 0
    with torch.no_grad():
        logits = model(input_ids=x).logits
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100).item()
    step1 = next(r for r in rows if r.get("step") == 1 and "loss" in r)
    assert step1["loss"] == pytest.approx(expected, rel=1e-5)
    all_tokens = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch_tensors(data, blocks, "all")[1].flatten()).item()
    assert abs(all_tokens - expected) > 1e-3  # the two objectives really differ on this batch


@pytest.mark.parametrize("native", [True, False])
def test_cpu_bf16_autocasts_pretraining_only_where_the_cpu_multiplies_bf16(corpus, tmp_path, monkeypatch, native):
    import contextlib

    import torch

    import pretrain.model
    import pretrain.train as trainer
    seen, original = [], trainer.micro_step

    def spy(fwd, x, y, scale, autocast=contextlib.nullcontext):
        seen.append(getattr(autocast(), "fast_dtype", None))
        return original(fwd, x, y, scale, autocast)
    monkeypatch.setattr(trainer, "micro_step", spy)
    monkeypatch.setattr(pretrain.model, "cpu_has_bf16", lambda: native)
    run = tmp_path / "run"
    assert trainer.main(["--data", str(corpus), "--out", str(run), "--scale", "tiny", "--steps", "2", "--block-size",
                         "48", "--micro-batch", "3", "--batch-size", "3", "--log-every", "1", "--eval-every", "2",
                         "--device", "cpu", "--set", "eval_blocks=4", "--set", "cpu_bf16=true"]) == 0
    assert set(seen) == {torch.bfloat16 if native else None}
    assert [r["bf16"] for r in metrics(run) if "loss" in r] == [native, native]
