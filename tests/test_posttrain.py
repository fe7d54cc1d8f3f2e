"""The post-training loop end to end on a tiny student: OPD / GRPO / TurnOPD / TCOD, teachers,
vocabulary checks and exact resume.  (Loss maths is tested in test_losses.py.)"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from planning_gym.config import CorpusConfig
from planning_gym.corpus import write_corpus
from posttrain.train import main as posttrain_main
from pretrain.train import main as pretrain_main

FAST = ["steps=2", "tasks_per_step=2", "group_size=2", "step_limit=2", "max_turn_tokens=12",
        "eval_tasks_per_cell=1", "eval_k=1"]


def sets(*items):
    return [a for item in items for a in ("--set", item)]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    root = tmp_path_factory.mktemp("post")
    cfg = CorpusConfig.from_scale("tiny", n_pretrain_per_bin=12, n_posttrain_per_bin=4, n_test_per_bin=2)
    write_corpus(cfg, root / "data" / cfg.name, progress=False)
    run = root / "student"
    assert pretrain_main(["--data", str(root / "data" / cfg.name), "--out", str(run), "--scale", "tiny",
                          "--steps", "2", "--eval-every", "2", "--ckpt-every", "2", "--vocab-size", "400"]) == 0
    return root, run


@pytest.fixture(scope="module")
def teacher_b(student):
    from posttrain.teachers import build_teacher
    root, run = student
    return build_teacher(run, root / "teacher_b", root / "data", steps=3, recipe="B")


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def weights(run: Path) -> dict:
    from safetensors.torch import load_file
    from pretrain.checkpoint import final_checkpoint
    return load_file(str(final_checkpoint(run) / "model.safetensors"))


def test_opd_against_itself_is_a_zero_loss(student):
    root, run = student
    out = root / "self_opd"
    assert posttrain_main(["--method", "opd", "--student", str(run), "--teacher", str(run), "--out", str(out),
                           "--scale", "tiny", *sets(*FAST)]) == 0
    steps = [m for m in metrics(out) if not m.get("eval")]
    # self-distillation is a no-op: the KL and its gradient are exactly 0, so Adam moves nothing
    # and the weights stay bit-identical to the teacher's
    assert len(steps) == 2 and all(m["loss"] == 0 and m["kl"] == 0 and m["grad_norm"] == 0 for m in steps)
    before = weights(run)
    assert all(torch.equal(before[k], t) for k, t in weights(out).items())
    for key in ("rollout_s", "scoring_s", "update_s", "entropy", "reward", "success", "depth", "agent_tokens"):
        assert key in steps[0]
    assert steps[0]["rollout_s"] > 0 and steps[0]["agent_tokens"] > 0


def test_opd_from_a_recipe_b_teacher_moves_the_student(student, teacher_b):
    root, run = student
    out = root / "opd_b"
    assert posttrain_main(["--method", "opd", "--student", str(run), "--teacher", str(teacher_b),
                           "--out", str(out), "--scale", "tiny", *sets(*FAST, "lr=1e-3")]) == 0
    steps = [m for m in metrics(out) if not m.get("eval")]
    assert all(m["kl"] > 1e-4 for m in steps)
    before, after = weights(run), weights(out)
    assert any(not torch.equal(before[k], after[k]) for k in before)
    cfg = json.loads((teacher_b / "train_config.json").read_text())
    assert "recipeB" in cfg["data"]
    assert (teacher_b / "tokenizer" / "tokenizer.json").read_bytes() == (run / "tokenizer" / "tokenizer.json").read_bytes()


def test_turnopd_probes_then_caps_depth_and_tcod_widens_its_window(student, teacher_b):
    root, run = student
    out = root / "turnopd"
    assert posttrain_main(["--method", "turnopd", "--student", str(run), "--teacher", str(teacher_b),
                           "--out", str(out), "--scale", "tiny",
                           *sets(*FAST, "steps=4", "probe_warmup=1", "probe_interval=2", "h_max=2")]) == 0
    steps = [m for m in metrics(out) if not m.get("eval")]
    assert [m["probe"] for m in steps] == [True, False, False, True]
    assert steps[0]["cap"] is None and all(1 <= m["cap"] <= 2 for m in steps[1:3])
    assert [m["alpha"] for m in steps] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    out = root / "tcod"
    assert posttrain_main(["--method", "tcod", "--student", str(run), "--teacher", str(teacher_b),
                           "--out", str(out), "--scale", "tiny",
                           *sets(*FAST, "steps=3", "tcod_checkpoint_steps=2", "step_limit=3")]) == 0
    steps = [m for m in metrics(out) if not m.get("eval")]
    assert [m["cap"] for m in steps] == [1, 1, 2]
    assert all(m["depth"] <= m["cap"] for m in steps)


def test_turnopd_ablation_switches_turn_off_the_controller_and_the_blend(student, teacher_b):
    root, run = student
    out = root / "turnopd_ablated"
    assert posttrain_main(["--method", "turnopd", "--student", str(run), "--teacher", str(teacher_b),
                           "--out", str(out), "--scale", "tiny",
                           *sets(*FAST, "steps=3", "probe_warmup=1", "probe_interval=2", "adaptive_depth=false",
                                 "turn_blend=false", "topk=100")]) == 0
    ablated = [m for m in metrics(out) if not m.get("eval")]
    assert all(m["cap"] is None and not m["probe"] for m in ablated)   # never probes, never caps
    # with both switches off TurnOPD is OPD: the same loss, step for step
    opd = root / "opd_same"
    assert posttrain_main(["--method", "opd", "--student", str(run), "--teacher", str(teacher_b),
                           "--out", str(opd), "--scale", "tiny", *sets(*FAST, "steps=3", "topk=100")]) == 0
    assert [m["loss"] for m in ablated] == pytest.approx([m["loss"] for m in metrics(opd) if not m.get("eval")])


def test_micro_batches_cover_every_episode_once_cut_to_their_own_length():
    from posttrain.train import micro_batches
    lengths = torch.tensor([5, 9, 2, 9, 7])
    groups = micro_batches(lengths, 2)
    assert [rows.tolist() for rows, _ in groups] == [[1, 3], [4, 0], [2]]
    assert [n for _, n in groups] == [9, 7, 2]


@pytest.mark.parametrize("method", ["opd", "grpo", "turnopd"])
def test_micro_batch_size_does_not_change_a_step(student, teacher_b, method):
    """Cutting each micro-batch to its own length (and splitting the batch) leaves the loss, the
    KL and the gradient norm of a step as they are on one padded batch."""
    root, run = student
    records = {}
    for micro in (1, 8):
        out = root / f"{method}_micro{micro}"
        teacher = [] if method == "grpo" else ["--teacher", str(teacher_b)]
        assert posttrain_main(["--method", method, "--student", str(run), *teacher, "--out", str(out),
                               "--scale", "tiny", *sets(*FAST, "steps=1", "group_size=3", "step_limit=3",
                                                         "eval_every=0", f"micro_batch={micro}")]) == 0
        records[micro] = metrics(out)[0]
    assert records[1]["episodes"] == 6 and records[1]["agent_tokens"] == records[8]["agent_tokens"]
    for key in ("loss", "grad_norm", "entropy") + (() if method == "grpo" else ("kl",)):
        assert records[1][key] == pytest.approx(records[8][key], rel=1e-4, abs=1e-7), key


def test_grpo_skips_episodes_without_signal_and_trains_to_the_same_weights(student, monkeypatch):
    """A micro-batch whose advantages are all 0 has a gradient of exactly 0, so GRPO skips its
    backward pass. The weights must come out identical to training on it: step 1 mixes zero and
    non-zero advantages, step 2 has only zeros (all skipped: Adam's momentum still steps)."""
    from posttrain.objectives import GRPO
    root, run = student
    original, calls = GRPO.advantages, []

    def planted(self, batch, records, groups, step_rewards):
        adv = original(self, batch, records, groups, step_rewards)
        rows = torch.tensor([0.0, 0.7, 0.0, -0.7]) if not calls else torch.zeros(4)
        calls.append(1)
        return rows[:, None].expand_as(adv) * records["mask"]
    monkeypatch.setattr(GRPO, "advantages", planted)
    records = {}
    for arm in ("skip", "every"):
        if arm == "every":
            monkeypatch.setattr(GRPO, "contributes", lambda self, advantages, mask: True)
        calls.clear()
        out = root / f"grpo_{arm}"
        assert posttrain_main(["--method", "grpo", "--student", str(run), "--out", str(out), "--scale", "tiny",
                               *sets(*FAST, "micro_batch=1", "ppo_mini_batches=1", "eval_every=0")]) == 0
        records[arm] = [m for m in metrics(out) if not m.get("eval")]
    skip, every = records["skip"], records["every"]
    assert skip[0]["skipped_tokens"] > 0 and skip[1]["skipped_tokens"] == skip[1]["agent_tokens"]
    assert every[0]["skipped_tokens"] == 0
    for a, b in zip(skip, every):
        for key in ("loss", "grad_norm", "entropy", "clip_frac"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key
    w_skip, w_every, w_start = weights(root / "grpo_skip"), weights(root / "grpo_every"), weights(run)
    assert all(torch.equal(w_skip[k], w_every[k]) for k in w_every)
    assert any(not torch.equal(w_skip[k], w_start[k]) for k in w_start)


def test_difficulty_filter_keeps_checkpoints_and_a_checkpoint_as_student(student, teacher_b):
    root, run = student
    ckpt = sorted((run / "checkpoints").glob("step_*"))[0]
    out = root / "long_only"
    assert posttrain_main(["--method", "opd", "--student", str(ckpt), "--teacher", str(teacher_b),
                           "--out", str(out), "--scale", "tiny",
                           *sets(*FAST, "steps=3", "difficulties=long", "ckpt_every=1", "keep_checkpoints=0",
                                 "eval_splits=ID", "eval_difficulties=long")]) == 0
    assert len(list((out / "checkpoints").glob("step_*"))) == 3        # every step kept
    final = json.loads((out / "eval" / "step_000003" / "summary.json").read_text())
    assert final["splits"] == ["ID"] and final["difficulties"] == ["long"]
    assert {(r["split"], r["difficulty"]) for r in final["table"]} == {("ID", "long"), ("ID", "all")}
    from posttrain.train import Trainer
    from posttrain.config import make_config
    trainer = Trainer(make_config("opd", "tiny", difficulties="long"), ckpt, teacher_b, root / "x", None, False)
    data = Path(json.loads((run / "train_config.json").read_text())["data"])
    rows = [json.loads(l) for l in (data / "posttrain.jsonl").read_text().splitlines()]
    long_rows = [r for r in rows if r["difficulty"] == "long"]
    assert 0 < len(trainer.tasks) == len(long_rows) < len(rows)
    from planning_gym.corpus import task_key       # the control: only tasks pre-training did not hold
    seen = {task_key(json.loads(line)) for line in (data / "pretrain.jsonl").read_text().splitlines() if line}
    novel = Trainer(make_config("opd", "tiny", novel_tasks=True), ckpt, teacher_b, root / "y", None, False)
    assert 0 < len(novel.tasks) == sum(task_key(r) not in seen for r in rows) < len(rows)
    assert posttrain_main(["--method", "grpo", "--student", str(run), "--out", str(root / "bad"), "--scale", "tiny",
                           "--set", "difficulties=longest"]) == 2
    assert posttrain_main(["--method", "grpo", "--student", str(run), "--out", str(root / "bad"), "--scale", "tiny",
                           "--set", "eval_splits=ID,train"]) == 2


def test_grpo_logs_rewards_and_process_rewards(student):
    root, run = student
    out = root / "grpo"
    assert posttrain_main(["--method", "grpo", "--student", str(run), "--out", str(out), "--scale", "tiny",
                           *sets(*FAST, "process_weight=0.5", "kl_coef=0.1")]) == 0
    steps = [m for m in metrics(out) if not m.get("eval")]
    assert all(0.0 <= m["reward"] <= 1.0 and m["kl"] is not None and m["kl"] >= 0 for m in steps)
    record = json.loads((out / "train_config.json").read_text())       # what training again to the bit needs
    assert record["threads"] == torch.get_num_threads() and record["gpu"] is None \
        and f"[{torch.backends.cpu.get_cpu_capability()}:" in record["cpu"]
    assert any(m.get("eval") for m in metrics(out))
    # two optimiser steps per rollout batch: the second mini-batch is off-policy, where the clip can act
    assert all(m["updates"] == 2 and 0.0 <= m["clip_frac"] <= 1.0 for m in steps)


def test_exact_resume(student, teacher_b):
    root, run = student
    args = ["--method", "opd", "--student", str(run), "--teacher", str(teacher_b), "--scale", "tiny",
            *sets(*FAST, "ckpt_every=1", "lr=1e-3")]
    full, cut = root / "full", root / "cut"
    assert posttrain_main([*args, "--out", str(full)]) == 0
    assert posttrain_main([*args, "--out", str(cut)]) == 0
    for name in ("checkpoints/step_000002", "summary.json"):       # as if killed after step 1
        path = cut / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert posttrain_main(["--out", str(cut), "--resume"]) == 0
    a, b = weights(full), weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = lambda r: [m["loss"] for m in metrics(r) if not m.get("eval")]
    assert losses(full) == losses(cut)
    # resuming a finished run adds nothing; --set steps=N extends it; a half-written line is dropped
    with open(cut / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "lo')
    assert posttrain_main(["--out", str(cut), "--resume"]) == 0
    assert [(m["step"], bool(m.get("eval"))) for m in metrics(cut)] == [(1, False), (2, False), (2, True)]
    assert posttrain_main(["--out", str(cut), "--resume", "--set", "steps=3"]) == 0
    assert [(m["step"], bool(m.get("eval"))) for m in metrics(cut)] == [(1, False), (2, False), (2, True),
                                                                        (3, False), (3, True)]
    assert posttrain_main(["--out", str(cut), "--resume", "--set", "method=grpo"]) == 2


def test_mopd_cascade_evaluates_every_stage(student, teacher_b):
    from posttrain.mopd import main as mopd_main
    root, run = student
    out = root / "mopd"
    assert mopd_main(["--student", str(run), "--teacher", f"fa={teacher_b}", "--teacher", f"fa={run}",
                      "--out", str(out), "--scale", "tiny", *sets(*FAST, "steps=1")]) == 0
    results = json.loads((out / "mopd.json").read_text())
    assert [r["stage"] for r in results] == [1, 2] and all("fa/ID" in r and "fa/OOD" in r for r in results)
    stage2 = json.loads((out / "stage_2_fa" / "train_config.json").read_text())
    assert stage2["student"] == str(out / "stage_1_fa")          # each stage starts from the last
    assert (out / "mopd.md").read_text().count("|") > 8


def test_turn_probe_kl_is_zero_to_oneself_and_forced_mass_is_largest_there(student, teacher_b):
    """(An analysis measurement, tested here for this module's trained runs.) Forced positions to
    another teacher are a subset of the student's confident positions, which are exactly its forced
    positions to itself: lambda(self) >= lambda(other) at every depth."""
    from reproduce.turnopd import turn_kl_probe
    root, run = student
    settings = dict(n_tasks=2, group=2, step_limit=3, max_turn_tokens=12)
    self_kl, budget, self_lam = turn_kl_probe({"s": run}, run, **settings)
    other_kl, _, other_lam = turn_kl_probe({"s": run}, teacher_b, **settings)
    assert (self_kl["s"]["kl"].abs() < 1e-5).all() and (other_kl["s"]["kl"] > 1e-4).any()
    assert ((self_lam["s"] >= other_lam["s"]) & (other_lam["s"] >= 0) & (self_lam["s"] <= 1)).all()
    assert list(budget.columns) and budget.sum().round(6).eq(1.0).all()


def test_teacher_with_another_vocabulary_is_refused(student, tmp_path):
    root, run = student
    other = tmp_path / "other"
    shutil.copytree(run, other)
    tok = json.loads((other / "tokenizer" / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[10:12]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer" / "tokenizer.json").write_text(json.dumps(tok))
    (other / "summary.json").unlink()          # it points into the student's folder
    for ckpt in (other / "checkpoints").iterdir():
        (ckpt / "tokenizer.json").write_text(json.dumps(tok))
    res = subprocess.run([sys.executable, "-m", "posttrain.train", "--method", "opd", "--student", str(run),
                          "--teacher", str(other), "--out", str(tmp_path / "x"), "--scale", "tiny"],
                         capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert res.returncode == 2 and "tokenizer differs" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("argv,message", [
    (["--method", "ppo"], "unknown method"),
    (["--method", "opd"], "needs --teacher"),
    (["--method", "grpo", "--set", "nope=1"], "--set expects"),
    (["--method", "grpo", "--set", "device=tpu"], "device must be one of auto, cpu, cuda"),
    (["--method", "grpo", "--set", "lr=Infinity"], "must be finite"),
    (["--method", "grpo", "--set", "temperature=-1"], "temperature must be > 0"),
    pytest.param(["--method", "grpo", "--device", "cuda"], "no CUDA device",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")),
])
def test_bad_input_exit_2(student, tmp_path, argv, message):
    root, run = student
    res = subprocess.run([sys.executable, "-m", "posttrain.train", "--student", str(run), "--out",
                          str(tmp_path / "x"), "--scale", "tiny", *argv],
                         capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_bench_update_counts_the_padding_it_saves(tmp_path):
    from benchmarks.update import main as bench
    out = tmp_path / "bench.json"
    assert bench(["--scale", "tiny", "--episodes", "4", "--min-len", "20", "--max-len", "80", "--repeats", "1",
                  "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["real_tokens"] == 200 and r["padded_tokens"] == 320 and r["real_tokens"] <= r["cut_tokens"] < 320
    assert r["padded_s"] > 0 and r["cut_s"] > 0 and r["cut_masked_s"] > 0 and r["cut_bf16_s"] > 0
    assert isinstance(r["native_bf16"], bool)
    assert bench(["--min-len", "90", "--max-len", "10"]) == 2


def test_process_reward_handles_a_turn_cut_by_the_token_budget():
    """Regression: a turn cut by the token budget has turn_index == n_turns but no action; the
    step-reward tensor must cover it (it used to be sized by n_turns and process_advantages raised)."""
    from planning_gym.config import scale_graph
    from planning_gym.solver import Solver
    from planning_gym.world import World
    from posttrain import losses
    from engine.rollout import Episode
    from posttrain.train import process_rewards
    world = World.build("fa", scale_graph("tiny"), 0)
    from planning_gym.tasks import TaskSampler
    task = TaskSampler(world, 0).sample("t", "mid", 1, held_out=False)[0]
    goal = task.goal
    gold = Solver(world).gold_plan(goal, dict(task.inventory))
    episodes = [Episode(0, "fa", world.names[goal], actions=gold[:2], turns=["a", "b"]),
                Episode(1, "fa", world.names[goal], actions=gold[:1], turns=["a"])]
    turn = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 0, 1, -1, -1, -1]])       # episode 0's turn 2 was cut
    mask = (turn >= 0).long()
    rewards = process_rewards([(world, task)] * 2, episodes, {}, int(turn.max()) + 1)
    assert rewards.shape == (2, 3) and rewards[0, :2].tolist() == [1.0, 1.0] and rewards[0, 2] == 0
    adv = losses.process_advantages(rewards, turn, mask, torch.tensor([0, 0]))
    assert adv.shape == (2, 3) and torch.isfinite(adv).all()


def test_mopd_regimes_differ_in_sharing_only_never_in_quality():
    from planning_gym.patterns import OPTIMAL, mixture_weights
    from posttrain.teachers import REGIMES
    sets = {r: {d: set(mixture_weights(p)) for d, p in teachers.items()} for r, teachers in REGIMES.items()}
    for teachers in sets.values():
        assert all(s <= set(OPTIMAL) for s in teachers.values())        # optimal templates only
    common = {r: set.intersection(*t.values()) for r, t in sets.items()}
    assert common["shared_compatible"] == {"T1"} and len(common["random_shared"]) == 1
    assert common["shared_conflict"] == set() and common["no_shared_conflict"] == set()
    pairs = sets["shared_conflict"]
    assert pairs["fa"] & pairs["lf"] and pairs["lf"] & pairs["ea"]     # neighbours in the cascade share one
    assert not any(a & b for a, b in [(sets["no_shared_conflict"][x], sets["no_shared_conflict"][y])
                                      for x, y in (("fa", "lf"), ("lf", "ea"), ("fa", "ea"))])
    withheld = sets["withheld_shared"]
    assert "T1" in withheld["fa"] & withheld["lf"] and "T1" not in withheld["ea"]


def test_budget_sweep_verdicts_use_two_standard_errors():
    from reproduce.budget_sweep import verdict

    assert verdict("self", 0.0, 0.0) == "no harm"           # bit-identical evaluations
    assert verdict("self", 1.0, 0.6) == "no harm" and verdict("self", -2.0, 0.6) == "harms"
    assert verdict("opd", 3.1, 1.5) == "gains" and verdict("grpo", 2.9, 1.5) == "cannot tell"
    assert verdict("grpo", -3.1, 1.5) == "harms" and verdict("opd", 1.0, float("nan")) == "cannot tell"


def test_budget_sweep_runs_resumes_and_reports_paired_deltas(student, teacher_b, capsys):
    """Every arm x grid point is a run against one base evaluation; a second call trains nothing
    (each run is finished) and the table holds a paired delta per arm; self-distillation is 0."""
    import json

    from reproduce.budget_sweep import main as sweep

    root, run = student
    out = root / "sweep"
    argv = ["--student", str(run), "--teacher", str(teacher_b), "--out", str(out), "--scale", "tiny",
            "--steps", "1", "--lrs", "1e-3", *sets(*[s for s in FAST if not s.startswith("steps")])]
    assert sweep(argv) == 0
    rows = json.loads((out / "sweep.json").read_text())
    assert [r["arm"] for r in rows] == ["teacher (reference)", "self", "opd", "grpo"]
    assert all(r["ID"]["tasks"] >= 3 for r in rows)
    self_row = rows[1]
    assert self_row["ID"]["delta"] == 0 and self_row["OOD"]["delta"] == 0        # a no-op, to the bit
    assert self_row["ID"]["stuck"] == self_row["ID"]["n_invalid"] == {"delta": 0.0, "se": 0.0}
    stamp = (out / "self-lr0.001-steps1-kl0-ent0" / "summary.json").stat().st_mtime
    assert sweep(argv) == 0
    assert (out / "self-lr0.001-steps1-kl0-ent0" / "summary.json").stat().st_mtime == stamp
    table = (out / "sweep.md").read_text()
    assert "| self | 0.001 | 1 |" in table and "| no harm | +0.0 ± 0.0 | +0.00 ± 0.00 |" in table
    assert "| teacher (reference) | - | - | - | - |" in table
    assert sweep(["--student", str(run), "--out", str(out), "--arms", "opd"]) == 2
    assert "need --teacher" in capsys.readouterr().err

    # A longer run continues the finished shorter one (constant lr) and the table keeps every run.
    longer = [*argv[:argv.index("--steps")], "--steps", "2", *argv[argv.index("--steps") + 2:], "--arms", "self,turnopd"]
    assert sweep(longer) == 0
    logged = [json.loads(line) for line in (out / "self-lr0.001-steps2-kl0-ent0" / "metrics.jsonl").read_text().split("\n")
              if line.strip()]
    first = json.loads((out / "self-lr0.001-steps1-kl0-ent0" / "metrics.jsonl").read_text().split("\n")[0])
    assert [m["step"] for m in logged if "loss" in m] == [1, 2] and logged[0] == first   # carried over, not redone
    rows = json.loads((out / "sweep.json").read_text())
    assert [(r["arm"], r.get("steps")) for r in rows] == [("teacher (reference)", None), ("self", 1), ("self", 2),
                                                          ("opd", 1), ("turnopd", 2), ("grpo", 1)]
    assert rows[2]["ID"]["delta"] == 0                                   # still a no-op after two steps


@pytest.mark.parametrize("cpu_bf16,native,expect", [(True, True, torch.bfloat16), (False, True, torch.float32),
                                                    (True, False, torch.float32)])
def test_cpu_bf16_autocasts_the_forward_passes_only_where_the_cpu_multiplies_bf16(student, teacher_b, monkeypatch,
                                                                                   cpu_bf16, native, expect):
    """``cpu_bf16`` autocasts the student's and the teacher's forward passes on a CPU that
    multiplies bf16 natively, and only there; every step logs which precision it ran at."""
    import pretrain.model
    from posttrain.objectives import OBJECTIVES
    root, run = student
    monkeypatch.setattr(pretrain.model, "cpu_has_bf16", lambda: native)
    objective, seen = OBJECTIVES["opd"], []
    original = objective.loss

    def spy(self, mb):
        seen.append((mb.logits.dtype, mb.teacher_logits.dtype))
        return original(self, mb)
    monkeypatch.setattr(objective, "loss", spy)
    out = root / f"bf16_{cpu_bf16}_{native}"
    assert posttrain_main(["--method", "opd", "--student", str(run), "--teacher", str(teacher_b), "--out", str(out),
                           "--scale", "tiny", *sets(*FAST, "steps=1", "eval_every=0", "device=cpu",
                                                    f"cpu_bf16={str(cpu_bf16).lower()}")]) == 0
    assert seen and set(seen) == {(expect, expect)}
    steps = [m for m in metrics(out) if not m.get("eval")]
    assert [m["bf16"] for m in steps] == [expect == torch.bfloat16]


def test_small_autocasts_the_distillation_family_but_not_grpo():
    """GRPO's ratio compares the trained policy with the fp32 sampler, so it must not autocast."""
    from posttrain.config import METHODS, make_config
    assert {m: make_config(m, "small").cpu_bf16 for m in METHODS} == {"grpo": False, "opd": True, "turnopd": True,
                                                                       "tcod": True}
    assert not any(make_config(m, "tiny").cpu_bf16 for m in METHODS)


def test_a_run_cut_off_before_its_first_checkpoint_starts_over_without_its_old_rows(student):
    """The store starts such a run afresh through `Trainer` itself (not the CLI): the rows and the
    evaluation of the cut-off attempt must not stay in front of the new ones."""
    from posttrain.config import make_config
    from posttrain.train import Trainer
    from pretrain import rundir
    root, run = student
    out = root / "cut_off"
    (out / rundir.EVAL / "step_000000").mkdir(parents=True)
    rundir.metrics_path(out).write_text(json.dumps({"step": 1, "stale": True}) + "\n")
    cfg = make_config("grpo", "tiny", steps=1, tasks_per_step=2, group_size=2, step_limit=2, max_turn_tokens=12,
                      eval_tasks_per_cell=1, eval_k=1, eval_every=0)
    Trainer(cfg, run, None, out, None, False).fit()
    rows = metrics(out)
    assert [r["step"] for r in rows if not r.get("eval")] == [1] and not any(r.get("stale") for r in rows)
    assert not (out / rundir.EVAL / "step_000000").exists()
    from planning_gym.cli import UsageError
    with pytest.raises(UsageError, match="already holds checkpoints"):     # a finished run is never started over
        Trainer(cfg, run, None, out, None, False)
