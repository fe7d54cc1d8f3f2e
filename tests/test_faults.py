"""Fault injection: what a careless, unlucky or hurried user does to every entry point.

Why: the worst failures are the quiet ones -- a run that exits 0 with NaN weights, a log with a
step twice, a truncated corpus trained on, a copied run that reads another run's files. Each case
below was a failure of the audit in the fault-tolerance issue (its number in brackets) and is
held here as a regression test: bad input ends in one ``error:`` line, exit status 2 (3 for a
diverged run) and no half-written folder; records say only true things.

Entry points are called in-process (``main(argv)``), which also proves no exception escapes.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planning_gym.config import CorpusConfig
from planning_gym.corpus import write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]
FAST = ["steps=1", "tasks_per_step=1", "group_size=2", "step_limit=2", "max_turn_tokens=12",
        "eval_tasks_per_cell=1", "eval_k=1", "eval_splits=ID"]


def sets(*items):
    return [a for item in items for a in ("--set", item)]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(root, corpus, pre-trained student run) at the smallest size that runs every stage."""
    from pretrain.train import main as pretrain_main

    root = tmp_path_factory.mktemp("faults")
    cfg = CorpusConfig.from_scale("tiny", n_pretrain_per_bin=8, n_posttrain_per_bin=2, n_test_per_bin=1)
    corpus = root / "data" / cfg.name
    write_corpus(cfg, corpus, progress=False)
    run = root / "student"
    assert pretrain_main(["--data", str(corpus), "--out", str(run), "--scale", "tiny", "--steps", "2",
                          "--eval-every", "2", "--ckpt-every", "2", "--vocab-size", "300"]) == 0
    return root, corpus, run


def one_error_line(capsys, code: int, expected: str, status: int = 2) -> None:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == status, err
    assert len(lines) == 1 and expected in lines[0], err


def cli(module: str):
    import importlib
    return importlib.import_module(module).main


# ----------------------------------------------------------------------------- bad input, nothing written
BAD = {   # name: (module, argv with {root} {corpus} {run} {out} placeholders, expected message)
    "[1] pretrain gradient ascent": ("pretrain.train", "--data {corpus} --out {out} --scale tiny --set grad_clip=-1",
                                     "grad_clip must be > 0"),
    "[13] pretrain beta1=2": ("pretrain.train", "--data {corpus} --out {out} --scale tiny --set beta1=2",
                              "beta1 must be >= 0 and < 1"),
    "[13] pretrain init_std=-1": ("pretrain.train", "--data {corpus} --out {out} --scale tiny --set init_std=-1",
                                  "init_std must be > 0"),
    "[22] pretrain odd head dim": ("pretrain.train", "--data {corpus} --out {out} --scale tiny --set hidden_size=100",
                                   "must be even"),
    "[10] pretrain --set scale": ("pretrain.train", "--data {corpus} --out {out} --scale tiny --set scale=small",
                                  "scale is chosen by --scale"),
    "[14] pretrain out is a file": ("pretrain.train", "--data {corpus} --out {file} --scale tiny", "is a file"),
    "[2] posttrain lr=Infinity": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                  "--set lr=Infinity", "lr must be finite"),
    "[13] posttrain lr=NaN": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny --set lr=NaN",
                              "lr must be finite"),
    "[13] posttrain temperature=-1": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                      "--set temperature=-1", "temperature must be > 0"),
    "[13] posttrain clip_eps=-5": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                   "--set clip_eps=-5", "clip_eps must be > 0"),
    "[13] posttrain ema_alpha=7": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                   "--set ema_alpha=7", "ema_alpha must be >= 0 and <= 1"),
    "[13] posttrain kl_coef=-1": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                  "--set kl_coef=-1", "kl_coef must be >= 0"),
    "[12] posttrain no eval tasks": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                     "--set eval_tasks_per_cell=0", "eval_tasks_per_cell must be >= 1"),
    "[10] posttrain --set method": ("posttrain.train", "--method grpo --student {run} --out {out} --scale tiny "
                                    "--set method=opd", "method is chosen by --method"),
    "[14] posttrain out is a file": ("posttrain.train", "--method grpo --student {run} --out {file} --scale tiny",
                                     "is a file"),
    "[11] posttrain resume of a pretrain run": ("posttrain.train", "--resume --out {run}",
                                                "is not a post-training run"),
    "[10] mopd --set scale": ("posttrain.mopd", "--student {run} --teacher fa={run} --out {out} --scale tiny "
                              "--set scale=small", "scale is chosen by --scale"),
    "[16] mopd --set domains": ("posttrain.mopd", "--student {run} --teacher fa={run} --out {out} --scale tiny "
                                "--set domains=lf", "drop --set domains"),
    "[16] mopd later teacher missing": ("posttrain.mopd", "--student {run} --teacher fa={run} --teacher lf={root}/none "
                                        "--out {out} --scale tiny", "is not a trained run folder"),
    "[15] teachers --steps 0": ("posttrain.teachers", "--student {run} --out {out} --recipe B --steps 0",
                                "--steps must be positive"),
    "[3] evaluate temperature NaN": ("engine.evaluate", "--run {run} --temperature nan --out {out}",
                                     "finite --temperature"),
    "[14] evaluate out is a file": ("engine.evaluate", "--run {run} --out {file}", "is a file"),
    "[16] evaluate out is a run folder": ("engine.evaluate", "--run {run} --out {run}", "is a run folder"),
    "[16] evaluate model is a run folder": ("engine.evaluate", "--model {run} --data {corpus}", "pass it as --run"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_error_line_and_writes_nothing(case, world, tmp_path, capsys):
    root, corpus, run = world
    module, argv, expected = BAD[case]
    (tmp_path / "a-file").write_text("x")
    argv = argv.format(root=root, corpus=corpus, run=run, out=tmp_path / "out", file=tmp_path / "a-file").split()
    before = sorted(p.name for p in run.rglob("*"))
    code = cli(module)(argv)
    one_error_line(capsys, code, expected)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in run.rglob("*")) == before


def test_help_lists_every_config_field_with_its_range(capsys):
    from posttrain.config import PosttrainConfig
    from posttrain.train import main
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    import dataclasses
    assert all(f"  {f.name} " in out for f in dataclasses.fields(PosttrainConfig))
    assert "[> 0]" in out and "clip range" in out


# ----------------------------------------------------------------------------- records that cannot lie
def test_nan_student_stops_with_exit_3_and_saves_nothing(world, tmp_path, capsys):      # [2]
    from safetensors.torch import load_file, save_file

    from posttrain.train import main
    root, corpus, run = world
    bad = tmp_path / "nan-student"
    shutil.copytree(run, bad)
    for ckpt in (bad / "checkpoints").iterdir():
        weights = load_file(str(ckpt / "model.safetensors"))
        weights = {k: v.fill_(float("nan")) if v.is_floating_point() else v for k, v in weights.items()}
        save_file(weights, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    code = main(["--method", "grpo", "--student", str(bad), "--out", str(tmp_path / "out"), "--scale", "tiny",
                 *sets(*FAST, "ckpt_every=1")])
    one_error_line(capsys, code, "not finite", status=3)
    assert not (tmp_path / "out" / "checkpoints").exists() and not (tmp_path / "out" / "summary.json").exists()


def test_truncated_corpus_is_rebuilt_by_make_data_and_refused_by_pretraining(world, tmp_path, capsys):  # [6]
    from planning_gym.make_data import main as make_data
    from pretrain.train import main as pretrain
    root, corpus, run = world
    copy = tmp_path / "data" / corpus.name
    shutil.copytree(corpus, copy)
    rows = (copy / "pretrain.jsonl").read_text().splitlines(keepends=True)
    (copy / "pretrain.jsonl").write_text("".join(rows[: len(rows) // 3]))
    one_error_line(capsys, pretrain(["--data", str(copy), "--out", str(tmp_path / "r"), "--scale", "tiny"]),
                   "does not match its manifest")
    assert not (tmp_path / "r").exists()
    assert make_data(["--domain", "fa", "--scale", "tiny", "--data-dir", str(tmp_path / "data"), "--n-pretrain", "8",
                      "--n-posttrain", "2", "--n-test", "1", "--quiet"]) == 0
    assert "rebuilding" in capsys.readouterr().out
    assert len((copy / "pretrain.jsonl").read_text().splitlines()) == len(rows)


def test_corpus_folders_are_keyed_by_every_pool_size():                                  # [5]
    names = {CorpusConfig.from_scale("tiny", **kw).name for kw in
             ({}, {"n_pretrain_per_bin": 7}, {"n_posttrain_per_bin": 0}, {"n_test_per_bin": 3})}
    assert len(names) == 4


def test_pool_sizes_are_bounded():                                                        # [16]
    from planning_gym.config import ConfigError
    with pytest.raises(ConfigError, match="at most"):
        CorpusConfig.from_scale("tiny", n_pretrain_per_bin=10**12).check()


def test_a_changed_corpus_is_refused_when_a_run_is_loaded(world, tmp_path):             # [5], [6]
    from pretrain.checkpoint import load_model_and_tokenizer
    from pretrain.config import UsageError
    root, corpus, run = world
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    saved = json.loads((copy / "train_config.json").read_text())
    (copy / "train_config.json").write_text(json.dumps({**saved, "data": str(data)}))
    assert load_model_and_tokenizer(copy)[2] == data
    with open(data / "test_id.jsonl", "a") as f:
        f.write(open(data / "test_id.jsonl").readline())
    with pytest.raises(UsageError, match="does not match its manifest"):
        load_model_and_tokenizer(copy)


def test_a_run_follows_its_rows_not_the_generator_fingerprint(world, tmp_path):          # [5]
    """Newer generator code that rewrites the same rows (only config.json's fingerprint differs)
    keeps the run loadable, as does a digest recorded the old way; different rows are refused."""
    import hashlib

    from planning_gym.corpus import _manifest_text, write_manifest
    from pretrain.checkpoint import load_model_and_tokenizer
    from pretrain.config import UsageError
    root, corpus, run = world
    data, copy = tmp_path / "data", tmp_path / "run"
    shutil.copytree(corpus, data)
    shutil.copytree(run, copy)
    saved = json.loads((copy / "train_config.json").read_text())
    legacy = hashlib.sha256(_manifest_text(data).encode()).hexdigest()[:16]
    for digest in (legacy, saved["corpus_digest"]):
        (copy / "train_config.json").write_text(json.dumps({**saved, "data": str(data), "corpus_digest": digest}))
        assert load_model_and_tokenizer(copy)[2] == data
    config = json.loads((data / "config.json").read_text())
    (data / "config.json").write_text(json.dumps({**config, "generator": "0" * 16}))
    write_manifest(data)
    assert load_model_and_tokenizer(copy)[2] == data                  # same rows, newer generator
    rows = (data / "test_id.jsonl").read_text().splitlines(keepends=True)
    (data / "test_id.jsonl").write_text("".join(rows[1:] + rows[:1]))     # other rows, a consistent manifest
    write_manifest(data)
    with pytest.raises(UsageError, match="changed since"):
        load_model_and_tokenizer(copy)


def test_a_copied_run_reads_only_its_own_files(world, tmp_path):                          # [4]
    from pretrain.checkpoint import final_checkpoint
    root, corpus, run = world
    summary = json.loads((run / "summary.json").read_text())
    assert summary["checkpoint"] == f"checkpoints/{final_checkpoint(run).name}"     # relative: no path outside
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    assert final_checkpoint(copy).parent.parent == copy


def test_killed_posttrain_rerun_and_resume_never_log_a_step_twice(world, tmp_path, capsys):  # [8], [11]
    from posttrain.train import main
    root, corpus, run = world
    out = tmp_path / "grpo"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 9.0}) + "\n")   # killed before a checkpoint
    argv = ["--method", "grpo", "--student", str(run), "--out", str(out), "--scale", "tiny", *sets(*FAST)]
    assert main(argv) == 0
    steps = [r["step"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if not r.get("eval")]
    assert steps == [1]
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')                                                          # what SIGKILL leaves
    assert main(["--resume", "--out", str(out), "--set", "steps=2"]) == 0
    assert "torn last line" in capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if not r.get("eval")]
    assert train_steps == [1, 2]
    for argv, message in ((["--resume", "--out", str(out), "--set", "lr=0.1"], "lr=0.1 differs"),
                          (["--resume", "--out", str(out), "--method", "opd"], "--method opd differs")):
        one_error_line(capsys, main(argv), message)


def test_the_checkpoint_is_saved_before_the_final_evaluation(world, tmp_path, monkeypatch):  # [12]
    from posttrain import train as posttrain
    root, corpus, run = world

    def broken(self):
        raise RuntimeError("evaluation failed")
    monkeypatch.setattr(posttrain.Trainer, "evaluate", broken)
    with pytest.raises(RuntimeError):
        posttrain.run(["--method", "grpo", "--student", str(run), "--out", str(tmp_path / "g"), "--scale", "tiny",
                       *sets(*FAST)])
    from pretrain.checkpoint import latest_checkpoint
    assert latest_checkpoint(tmp_path / "g").name == "step_000001"


def test_mopd_and_teachers_refuse_a_non_empty_output_unless_asked(world, tmp_path, capsys):  # [7], [15]
    from posttrain.mopd import main as mopd
    from posttrain.teachers import main as teachers
    root, corpus, run = world
    out = tmp_path / "m"
    out.mkdir()
    (out / "mopd.json").write_text("[]")
    one_error_line(capsys, mopd(["--student", str(run), "--teacher", f"fa={run}", "--out", str(out), "--scale", "tiny"]),
                   "is not empty")
    assert (out / "mopd.json").read_text() == "[]"
    one_error_line(capsys, teachers(["--student", str(run), "--out", str(out), "--recipe", "B"]), "is not empty")


def _sigint_as_a_terminal_sends_it() -> None:
    """For a child process: Ctrl-C's default action. A shell runs background jobs with SIGINT
    ignored and children inherit that, so `make test &` would otherwise never interrupt them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_is_one_line_and_leaves_resumable_state(world, tmp_path):                   # [16]
    root, corpus, run = world
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pretrain.train", "--data", str(corpus), "--out", str(out),
                             "--scale", "tiny", "--steps", "2000", "--set", "ckpt_every=1"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, preexec_fn=_sigint_as_a_terminal_sends_it)
    deadline = time.time() + 120
    while not (out / "checkpoints").is_dir() or not any((out / "checkpoints").glob("step_*")):
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and "interrupted" in err


def test_a_ctrl_c_that_lands_in_a_finalizer_still_stops_the_run():
    """Python swallows a KeyboardInterrupt raised inside ``__del__`` ("Exception ignored"), so a
    Ctrl-C during, say, a progress bar's cleanup in a checkpoint save was lost and training went on.
    `entry` sends it again."""
    script = """
import os, signal, sys, threading, time
from planning_gym.cli import entry
def spin(seconds):
    t = time.time()
    while time.time() - t < seconds:
        pass
class Finalized:
    def __del__(self):
        spin(0.3)
def main():
    for _ in range(10):
        spin(0.3)
        f = Finalized(); del f
    print("finished", flush=True)
    return 0
threading.Timer(0.45, os.kill, (os.getpid(), signal.SIGINT)).start()   # inside the first __del__
sys.exit(entry(main))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          preexec_fn=_sigint_as_a_terminal_sends_it)
    assert done.returncode == 130 and "finished" not in done.stdout
    assert "interrupted" in done.stderr and "Traceback" not in done.stderr.split("interrupted")[-1]


def test_publish_refuses_a_partial_reproduction_and_swaps_a_finished_one_in_whole(tmp_path, capsys):  # [9]
    from reproduce.publish import main
    runs, results = tmp_path / "runs", tmp_path / "results"
    src, dst = runs / "small" / "fig7", results / "small" / "fig7"
    src.mkdir(parents=True)
    dst.mkdir(parents=True)
    (dst / "table.md").write_text("old table")
    (dst / "old_figure.png").write_bytes(b"old")
    (dst / "eval-16-tasks").mkdir()
    (dst / "eval-16-tasks" / "note.md").write_text("kept")
    (src / "table.md").write_text("new table")                        # results.json, config.json not yet written
    argv = ["fig7", "--scale", "small", "--runs", str(runs), "--results", str(results)]
    one_error_line(capsys, main(argv), "not a finished reproduction")
    assert (dst / "table.md").read_text() == "old table"
    (src / "results.json").write_text("{}")
    (src / "config.json").write_text("{}")
    (src / "new_figure.png").write_bytes(b"new")
    assert main(argv) == 0
    assert sorted(p.name for p in dst.iterdir()) == ["config.json", "eval-16-tasks", "new_figure.png", "results.json",
                                                     "table.md"]
    assert (dst / "table.md").read_text() == "new table" and (dst / "eval-16-tasks" / "note.md").is_file()
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".")]
    import os
    (src / "seeds_results.json").write_text("{}")         # an earlier multi-seed merge, older than the table:
    os.utime(src / "seeds_results.json", (1, 1))           # not published beside it (the scoreboard prefers it)
    (src / "seeds.md").write_text("merged")
    assert main(argv) == 0
    assert (dst / "seeds.md").is_file() and not (dst / "seeds_results.json").exists()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_killing_make_data_leaves_no_workers_and_the_next_run_cleans_up(tmp_path):    # [16]
    argv = [sys.executable, "-m", "planning_gym.make_data", "--domain", "fa", "--scale", "tiny", "--workers", "2",
            "--n-pretrain", "3000", "--n-test", "1", "--n-posttrain", "1",
            "--data-dir", str(tmp_path), "--quiet"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(_children(proc.pid)) < 2:
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    workers = _children(proc.pid)
    proc.kill()
    proc.wait()
    deadline = time.time() + 30
    while any(Path(f"/proc/{w}").exists() and "Z" not in Path(f"/proc/{w}/stat").read_text().split()[2]
              for w in workers if Path(f"/proc/{w}/stat").exists()):
        assert time.time() < deadline, "make_data workers outlived their parent"
        time.sleep(0.2)
    from planning_gym.corpus import _remove_stale_tmp
    dead = tmp_path / ".tmp-fa-small-999999999"               # what a writer killed mid-write leaves
    (dead / "x").mkdir(parents=True)
    _remove_stale_tmp(tmp_path / "fa-small")                  # the next writer's first act
    assert not dead.exists()


def test_concurrent_writers_of_one_corpus_all_succeed(tmp_path):                          # [16]
    argv = [sys.executable, "-m", "planning_gym.make_data", "--domain", "fa", "--scale", "tiny", "--n-pretrain", "4",
            "--n-posttrain", "1", "--n-test", "1", "--data-dir", str(tmp_path), "--force", "--quiet"]
    procs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert all(code == 0 for code, _ in results), results
    from planning_gym.corpus import verify_corpus
    (folder,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    verify_corpus(folder)
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_full_disk_is_one_error_line(world, tmp_path, monkeypatch, capsys):             # [14]
    from engine.evaluate import main
    root, corpus, run = world
    real = Path.write_text

    def full(self, *args, **kwargs):
        if self.name == "results.md":
            raise OSError(28, "No space left on device", str(self))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Path, "write_text", full)
    code = main(["--run", str(run), "--out", str(tmp_path / "e"), "--k", "1", "--max-tasks-per-cell", "1",
                 "--splits", "ID", "--quiet"])
    one_error_line(capsys, code, "No space left on device")


def test_a_stale_tokenizer_larger_than_vocab_size_is_refused(world, tmp_path, capsys):   # [16]
    from pretrain.train import main
    root, corpus, run = world
    out = tmp_path / "rerun"
    shutil.copytree(run / "tokenizer", out / "tokenizer")          # left by a killed start with a larger vocab
    one_error_line(capsys, main(["--data", str(corpus), "--out", str(out), "--scale", "tiny", "--vocab-size", "260"]),
                   "more than vocab_size 260")
    assert sorted(p.name for p in out.iterdir()) == ["tokenizer"]
