"""Every reproduction table, end to end, against a fake artifact store.

Why: most tables of `python -m reproduce` only run after hours of training, so a key error, a NaN
in a format string or a wrong path in their report-building code would surface at the very end of
a long run.  Here the *stages* are faked, not the tables: pre-training and post-training write
run folders of the real layout (``train_config.json``, ``summary.json``, ``metrics.jsonl``,
``eval/step_N/``, ``checkpoints/step_N/`` with loadable weights of a tiny Qwen2 and its tokenizer,
MOPD's real cascade driver on top), evaluations are synthetic but deterministic functions of the
evaluated model, and each table runs through `cli.main` at scale tiny (one task per cell).
The real rollouts of Table 4's token views and the TurnOPD probe run on the tiny random model.
Assertions check that each table's numbers are the ones that follow from the fake evaluations.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis.params import load_state_dict
from analysis.report import cell_text
from engine.evaluate import DIFFICULTIES as DIFFS, PATTERN_COLUMNS, score
from planning_gym.constants import EVAL_K
from planning_gym.text import AGENT, ENV
from posttrain.teachers import REGIMES
from pretrain.tokenizer import save_tokenizer
from reproduce import cli, pretraining
from reproduce.paper_numbers import fmt
from reproduce.merge import final_checkpoint
from reproduce.shaping import crossed_teacher
from reproduce.store import Store, _slug
from test_rollout import assets  # noqa: F401  (session fixture: tiny corpus, tokenizer, random model)

pytestmark = pytest.mark.usefixtures("one_thread")
PRETRAIN_STEPS = (100, 200, 300)                 # the tiny preset's checkpoints (ckpt_every 100)
REAL_CORPUS_TOKENS = pretraining.corpus_tokens      # the `store` fixture fakes it for Fig. 3's third arm
POST_STEP = 1e-4                                 # how far one fake post-training step moves the weights


def successes(key: str, domain: str, split: str, difficulty: str, task: int = 0) -> int:
    """Successful samples (of 8) of a model on one task: the fake evaluation's ground truth.  The
    main OPD run solves no ID task, as tiny models mostly do, so Table 4's relative change and
    TurnOPD's time to OPD's accuracy meet a zero reference."""
    if "turnopd-main-opd" in key and split == "ID":
        return 0
    return zlib.crc32(f"{key}|{domain}|{split}|{difficulty}|{task}".encode()) % (EVAL_K + 1)


def fake_score(key: str, split: str, difficulty: str, metric: str = "avg@8", domains=("fa",)) -> float:
    """What `analysis.run_logs.cell` must read from a fake evaluation (one task per cell, as at tiny)."""
    diffs = DIFFS if difficulty == "all" else (difficulty,)
    n = [successes(key, d, split, k) for d in domains for k in diffs]
    return float(np.mean([100.0 * (x / EVAL_K if metric == "avg@8" else x > 0) for x in n]))


FAKE_BASELINES = ("random-valid", "recall-cascade", "recall-nearest", "from-empty", "solver")


def fake_baseline(key: str, split: str, difficulty: str, baseline: str) -> float:
    """A non-planning agent's score on the model's tasks (one task per cell: 0 or 100); the solver solves all."""
    return 100.0 if baseline == "solver" else 100.0 * (zlib.crc32(f"{key}|{split}|{difficulty}|{baseline}".encode()) % 2)


def check_beside_baselines(md: str, rows: dict[str, str]) -> None:
    """Each (label -> evaluation key) model's long-task row of the "Beside the baselines" table, from the fakes."""
    assert "**Beside the baselines" in md and "cells an agent that does not plan scores at least" in md
    for label, key in rows.items():
        others = {b: fake_baseline(key, "ID", "long", b) for b in ("from-empty", "recall-nearest")}
        best = max(sorted(others), key=others.get)                   # the solver, an oracle, is never the best
        assert (f"| {label} | long | {cell_text(fake_score(key, 'ID', 'long'))} | "
                f"{cell_text(fake_score(key, 'ID', 'long', 'pass@8'))} | "
                f"{cell_text(fake_baseline(key, 'ID', 'long', 'random-valid'))} | "
                f"{cell_text(fake_baseline(key, 'ID', 'long', 'recall-cascade'))} | {others[best]:.1f} ({best}) |") in md


def key_of(store: Store, model: Path, corpus: Path | None = None) -> str:
    return store._eval_dir(Path(model), corpus).name     # the evaluation cache's name for this model


def corpus_of(model: Path) -> Path:
    run = Path(model).parent.parent if (Path(model) / "trainer_state.json").is_file() else Path(model)
    return Path(json.loads((run / "train_config.json").read_text())["data"])


def write_evaluation(out: Path, key: str, corpus: Path, tasks_per_cell: int, seed: int) -> dict:
    """summary.json and samples.jsonl as `engine.evaluate.evaluate` writes them, with outcomes
    drawn from `successes`; the domains are the corpus's (its name starts with them)."""
    outcomes = []
    for domain, split, diff, t in itertools.product(corpus.name.split("-")[0].split("+"), ("ID", "OOD"), DIFFS,
                                                    range(tasks_per_cell)):
        n, task = successes(key, domain, split, diff, t), f"{domain}-{split}-{diff}-{t}"
        for s in range(EVAL_K):
            h = zlib.crc32(f"{key}|{task}|{s}".encode())
            outcomes.append({"domain": domain, "split": split, "difficulty": diff, "task": task, "sample": s,
                             "success": s < n, "n_turns": 3, "n_invalid": h % 2, "stuck": False,
                             "pattern": PATTERN_COLUMNS[h % len(PATTERN_COLUMNS)], "horizon": 3,
                             "actions": [f"go {h % 3}", f"take {task}" if s < n else None],
                             "stop_reason": "success" if s < n else "step_limit", "text": "..."})
    table = score(outcomes, EVAL_K)
    overall = {r["split"]: {"avg@8": r["avg@8"], "pass@8": r["pass@8"], "stuck": r["stuck"], "tasks": r["tasks"]}
               for r in score([{**o, "domain": "*", "difficulty": "all"} for o in outcomes], EVAL_K)}
    baselines = [{"domain": domain, "split": split, "difficulty": diff, "baseline": b, "tasks": tasks_per_cell,
                  "avg@8": fake_baseline(key, split, diff, b), "pass@8": fake_baseline(key, split, diff, b)}
                 for domain, split, diff, b in itertools.product(corpus.name.split("-")[0].split("+"), ("ID", "OOD"),
                                                                  DIFFS, FAKE_BASELINES)]
    summary = {"corpus": str(corpus), "k": EVAL_K, "seed": seed, "max_tasks_per_cell": tasks_per_cell,
               "overall": overall, "table": table, "baselines": baselines}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "samples.jsonl").write_text("".join(json.dumps(o) + "\n" for o in outcomes))
    return summary


@dataclasses.dataclass
class Fakes:
    """The fake stages; ``base`` is the tiny model's state (tied lm_head left out, as saved)."""
    assets: dict
    home: Path

    def __post_init__(self):
        self.base = {k: v.clone() for k, v in self.assets["model"].state_dict().items() if k != "lm_head.weight"}

    def noise(self, key: str) -> dict:
        g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
        return {k: torch.randn(v.shape, generator=g) for k, v in self.base.items()}

    def write_checkpoint(self, run: Path, step: int, state: dict) -> Path:
        ckpt = run / "checkpoints" / f"step_{step:06d}"
        self.assets["model"].save_pretrained(str(ckpt), state_dict=dict(state))   # it empties the dict
        save_tokenizer(self.assets["tokenizer"], ckpt)
        (ckpt / "trainer_state.json").write_text(json.dumps({"format": 1, "step": step}))
        return ckpt

    def corpus(self, store: Store, **changes) -> Path:
        out = store.data_dir / store.corpus_config(**changes).name
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            out.symlink_to(self.assets["corpus"].resolve(), target_is_directory=True)
        return out

    def pretrain(self, argv: list[str]) -> int:
        """`pretrain.train.main`: each run is the tiny model plus its own random direction."""
        data, out = Path(argv[argv.index("--data") + 1]), Path(argv[argv.index("--out") + 1])
        if not (out / "tokenizer" / "tokenizer.json").is_file():       # a family member keeps the base's
            save_tokenizer(self.assets["tokenizer"], out / "tokenizer")
        steps = [int(a.split("=")[1]) for a in argv if a.startswith("steps=")] or [PRETRAIN_STEPS[-1]]
        (out / "train_config.json").write_text(json.dumps({"data": str(data), "config": {"scale": "tiny",
                                                                                          "steps": steps[-1]}}))
        direction = self.noise(out.name)
        for step in PRETRAIN_STEPS:
            ckpt = self.write_checkpoint(out, step, {k: v + 0.02 * step / 300 * direction[k]
                                                     for k, v in self.base.items()})
        (out / "summary.json").write_text(json.dumps({"checkpoint": str(ckpt), "step": step}))
        return 0

    def evaluation(self, store: Store, model: Path, corpus: Path | None = None, splits=("ID", "OOD"),
                   difficulties=None) -> dict:
        """`Store.evaluation` without the model: a run's own final evaluation, else the cache."""
        own = corpus is None and store._final_eval(Path(model), splits, difficulties)
        if own:
            return own
        out = store._eval_dir(Path(model), corpus)
        if not (out / "summary.json").is_file():
            write_evaluation(out, out.name, Path(corpus or corpus_of(model)), store.budget["eval_tasks_per_cell"],
                             store.seed)
        return {**json.loads((out / "summary.json").read_text()), "_dir": str(out)}


class FakeTrainer:
    """`posttrain.train.Trainer`: writes what ``fit`` writes.  OPD-family runs step along one fixed
    direction, GRPO along a fresh random one each step; TurnOPD's adaptive depth halves the wall
    time per step (1 s vs 2 s, TCOD-F2B 1.5 s) and the rollout depth (5 vs 8)."""
    fakes: Fakes

    def __init__(self, cfg, student, teacher, out, data, resume):
        self.cfg, self.student, self.teacher, self.out = cfg, Path(student), teacher, Path(out)
        self.data = Path(data) if data else corpus_of(final_checkpoint(self.student))

    def evaluate(self, step: int, wall: float) -> dict:
        key = _slug(self.out / "checkpoints" / f"step_{step:06d}", self.fakes.home)
        s = write_evaluation(self.out / "eval" / f"step_{step:06d}", key, self.data, self.cfg.eval_tasks_per_cell,
                             self.cfg.seed)
        return {"step": step, "eval": True, "train_wall_s": wall,
                **{f"{sp}_{m}": v[m] for sp, v in s["overall"].items() for m in ("avg@8", "pass@8", "stuck")}}

    def fit(self) -> dict:
        cfg, out, fakes = self.cfg, self.out, self.fakes
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_config.json").write_text(json.dumps(
            {"kind": "posttrain", "config": dataclasses.asdict(cfg), "data": str(self.data),
             "student": str(self.student), "teacher": str(self.teacher) if self.teacher else None}))
        adaptive = cfg.method == "turnopd" and cfg.adaptive_depth
        per_step = 1.0 if adaptive else 1.5 if cfg.method == "tcod" else 2.0
        state = load_state_dict(final_checkpoint(self.student))
        direction, records = fakes.noise(str(out)), []
        if cfg.eval_every and cfg.eval_at_start:
            records.append(self.evaluate(0, 0.0))
        for step in range(1, cfg.steps + 1):
            move = direction if cfg.method != "grpo" else fakes.noise(f"{out}|{step}")
            state = {k: v + POST_STEP * move[k] for k, v in state.items()}
            records.append({"step": step, "method": cfg.method, "loss": 1.0 / step,
                            "kl": None if cfg.method == "grpo" else 0.5 / step, "entropy": 2.0 - step / 10,
                            "reward": 0.1 * step, "success": 0.1 * step, "depth": 5.0 if adaptive else 8.0,
                            "cap": 4 if adaptive else None, "train_wall_s": per_step * step})
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                records.append(self.evaluate(step, per_step * step))
            if cfg.ckpt_every and step % cfg.ckpt_every == 0 and step < cfg.steps:
                fakes.write_checkpoint(out, step, state)
        records.append(self.evaluate(cfg.steps, per_step * cfg.steps))
        ckpt = fakes.write_checkpoint(out, cfg.steps, state)
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        summary = {"checkpoint": str(ckpt), "final_eval": records[-1], "train_wall_s": per_step * cfg.steps}
        (out / "summary.json").write_text(json.dumps(summary))
        return summary


@pytest.fixture(scope="module")
def store(assets, tmp_path_factory):  # noqa: F811
    """A tiny store whose stages are the fakes; the tables share it, as `reproduce all` does."""
    import posttrain.mopd
    import posttrain.train
    import pretrain.train
    store = Store("tiny", Path("runs/reproduce"), Path("data"), log=lambda m: None)   # relative, as in `make`
    fakes = Fakes(assets, store.home)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("reproduce"))
        mp.setattr(pretrain.train, "main", fakes.pretrain)
        mp.setattr(Store, "corpus", lambda self, **changes: fakes.corpus(self, **changes))
        mp.setattr(Store, "evaluation", lambda self, model, corpus=None, **only: fakes.evaluation(self, model, corpus,
                                                                                                  **only))
        mp.setattr(FakeTrainer, "fakes", fakes, raising=False)
        mp.setattr(posttrain.train, "Trainer", FakeTrainer)
        mp.setattr(posttrain.mopd, "Trainer", FakeTrainer)
        # a direct trajectory 0.4 times as long as a world-model one: equal trajectories at step 120
        mp.setattr(pretraining, "corpus_tokens", lambda run: 400 if "direct" in Path(run).name else 1000)
        yield store


def run_dir(store: Store, name: str) -> Path:
    return store.home / "posttrain" / name


def run_score(store: Store, name: str, split: str = "ID", difficulty: str = "all") -> float:
    """The fake avg@8 of post-training run ``name`` (its final checkpoint)."""
    return fake_score(key_of(store, run_dir(store, name)), split, difficulty)


def check_fig3_4(store, r, md):
    wm, di = (key_of(store, store.pretrained(**c)) for c in ({}, {"cot_format": "direct"}))
    for d in (*DIFFS, "all"):
        assert r[f"ID/{d}"]["gain"] == pytest.approx(fake_score(wm, "ID", d) - fake_score(di, "ID", d))
    a, b = fake_score(wm, "ID", "long"), fake_score(di, "ID", "long")
    # one task per cell at tiny: every standard error (over tasks, of the scores and of the gain) is an en dash
    assert f"| long | {cell_text(a)} | – | {cell_text(b)} | – | {cell_text(a - b)} | – |" in md
    assert r["ID/long"]["world_model_se"] is None and r["ID/long"]["direct_se"] is None
    scaling = {(e["arm"], e["step"], e["difficulty"]): e["avg@8"] for e in r["scaling"]}
    early = key_of(store, store.checkpoint(store.pretrained(cot_format="direct"), 100))
    assert len(scaling) == 18 and scaling[("direct", 100, "mid")] == pytest.approx(fake_score(early, "ID", "mid"))
    equal = key_of(store, store.pretrained(cot_format="direct", steps=120))
    assert r["equal_trajectory_steps"] == 120 and "fa-tiny-direct-120steps" in equal
    check_beside_baselines(md, {"world model": wm, "direct": di, "direct, 120 steps": equal})
    texts = [json.loads(line)["text"] for line in (corpus_of(store.pretrained()) / "pretrain.jsonl").open()]
    fit = r["budget_fit"]["world model"]                 # every agent turn of the arm's corpus, none cut at 192
    assert (fit["turns"], fit["episodes"], fit["turns_over"]) == (sum(t.count(AGENT) for t in texts), len(texts), 0)
    failed = sum(EVAL_K - successes(wm, "fa", "ID", d, t) for d in DIFFS for t in range(store.budget[
        "eval_tasks_per_cell"]))
    assert f"| world model | {fit['turns']} | 0 | {fit['longest_turn']} |" in md and f"| {failed} | step_limit {failed} |" in md
    assert "the arms are scored on how they plan, not on a budget that cuts one of them" in md
    for d in (*DIFFS, "all"):
        assert r[f"ID/{d}"]["gain_equal_trajectories"] == pytest.approx(fake_score(wm, "ID", d)
                                                                       - fake_score(equal, "ID", d))
    for key in ("gain", "gain_equal_trajectories"):
        g = [r[f"ID/{d}"][key] for d in DIFFS]
        # one task per cell at tiny: no standard error, so no trend can be told from noise
        assert all(r[f"ID/{d}"][f"{key}_se"] is None for d in DIFFS)        # NaN, written to JSON as null
        line = next(n for n in md.splitlines() if n.startswith("- At equal " + ("steps" if key == "gain" else "traj")))
        assert f"ours wins at {sum(x > 0 for x in g)} of 3 (0 by more than two standard errors)" in line
        assert "grows with the horizon —" not in line and "— agreement." not in line


def check_table1(store, r, md):
    from reproduce.pretraining import MIXES
    for mix in MIXES:
        key = key_of(store, store.pretrained(horizon_mix=mix))
        for d in DIFFS:
            for m in ("avg@8", "pass@8"):
                assert r["/".join(map(str, mix))][f"{d} {m}"] == pytest.approx(fake_score(key, "ID", d, m))
    for name, a, b, d in (("+5% mid data, mid", "100/5/0", "100/0/0", "mid"),
                          ("+5% long data, long", "100/0/5", "100/0/0", "long"),
                          ("short-only vs full, long", "100/0/0", "100/100/100", "long")):
        c = r["contrasts"][name]
        assert c["delta"] == pytest.approx(r[a][f"{d} pass@8"] - r[b][f"{d} pass@8"])
        assert f"| {name} | {a} − {b} |" in md and c["verdict"] in md
    assert "1 task(s) x 8 samples, so pass@8 moves in steps of 100 points" in md
    check_beside_baselines(md, {"/".join(map(str, m)): key_of(store, store.pretrained(horizon_mix=m)) for m in MIXES})


def check_fig6(store, r, md):
    from reproduce.pretraining import QUALITIES
    for q in QUALITIES:
        run = store.pretrained(patterns=q)
        patterns = [o["pattern"] for o in store.samples(run)]
        assert r[q]["suboptimal pattern %"] == pytest.approx(100 * np.mean([p.startswith("D") for p in patterns]))
        assert r[q]["long avg@8"] == pytest.approx(fake_score(key_of(store, run), "ID", "long"))
        assert all(isinstance(r[q][i], float) for i in ("I(task;pattern)", "I(task;knowledge)"))
    check_beside_baselines(md, {q: key_of(store, store.pretrained(patterns=q)) for q in QUALITIES})


def check_fig7(store, r, md):
    from reproduce.shaping import QUALITIES
    for q in QUALITIES:
        before = key_of(store, store.checkpoint(store.pretrained(patterns=q)))      # the early checkpoint
        for d in DIFFS:
            base = fake_score(before, "ID", d)
            assert r[f"{q}/{d}"]["baseline"] == pytest.approx(base)
            for method in ("grpo", "opd"):
                delta = run_score(store, f"fig7-{method}-{q}-{d}", "ID", d) - base
                assert r[f"{q}/{d}"][f"{method} avg"] == pytest.approx(delta)
                label = "unnecessary" if base >= 90 else "effective" if delta >= 2 else "unsupported"
                assert r["regions"][method.upper()][d][q] == label
    eff = {m: sum(v == "effective" for row in r["regions"][m].values() for v in row.values()) for m in ("GRPO", "OPD")}
    assert f"Effective cells: OPD {eff['OPD']}, GRPO {eff['GRPO']} of 9 (of which beyond two standard errors: " \
           "OPD 0, GRPO 0)" in md                                  # one task per cell: no standard error
    assert ("broader one (low quality, long horizons) — ours agrees." in md) == (eff["OPD"] > eff["GRPO"])
    assert all(r[c][f"{m} se"] is None for c in r if "/" in c for m in ("grpo", "opd"))
    assert "self-distillation" not in md                   # the 4 Opt student is not its own teacher
    check_beside_baselines(md, {f"{q} student": key_of(store, store.checkpoint(store.pretrained(patterns=q)))
                                for q in QUALITIES})
    budgets = [f"{m.upper()} lr {c.lr:g} x {c.steps} steps of {c.tasks_per_step} tasks x {c.group_size} samples (9 runs)"
               for m, c in ((m, store.posttrain_config(m)) for m in ("grpo", "opd"))]
    assert "Post-training: " + "; ".join(budgets) + "." in md.splitlines()[2]     # each method's own budget
    low_long = r["4opt8sub/long"]
    assert (f"OPD − GRPO {low_long['opd avg'] - low_long['grpo avg']:+.1f} (one task): no difference beyond two "
            "standard errors") in md


def check_fig9_10(store, r, md):
    # OPD's fake steps share one direction, GRPO's are independent: cosines 1 vs about 0
    assert r["opd"]["consecutive_cosines"] == pytest.approx([1.0] * 5, abs=1e-3)
    assert abs(np.mean(r["grpo"]["consecutive_cosines"])) < 0.05
    assert [row["step"] for row in r["opd"]["subspace"]] == [1, 2, 3, 4, 5]
    assert all(row["mean"] == pytest.approx(1.0, abs=1e-3) for row in r["opd"]["subspace"])
    assert "— ours agrees" in md


def check_table4(store, r, md):
    m, c = (run_score(store, n) for n in ("table4-opd-matched", "table4-opd-crossed"))
    assert (r["after OPD, teacher A"]["ID"], r["after OPD, teacher B"]["ID"]) == pytest.approx((m, c))
    if m == 0:
        assert r["crossed vs matched %"]["ID"] is None and "ID change vs matched: undefined" in md
    else:
        assert r["crossed vs matched %"]["ID"] == pytest.approx(100 * (c - m) / m)
    m, c = (run_score(store, n, "OOD") for n in ("table4-opd-matched", "table4-opd-crossed"))
    assert r["crossed vs matched %"]["OOD"] == pytest.approx(100 * (c - m) / m)
    on_a = key_of(store, store.pretrained(**crossed_teacher(store)), store.corpus())
    assert r["teacher B on recipe-A tasks"]["OOD"] == pytest.approx(fake_score(on_a, "OOD", "all"))
    student = key_of(store, store.checkpoint(store.pretrained()))
    assert r["student A (before)"]["ID"] == pytest.approx(fake_score(student, "ID", "all"))
    vs = r["contrasts"]                     # one task per cell at tiny: a difference is the two scores' difference
    crossed, matched = (key_of(store, run_dir(store, n)) for n in ("table4-opd-crossed", "table4-opd-matched"))
    assert vs["crossed after - before, ID"]["delta"] == pytest.approx(
        fake_score(crossed, "ID", "all") - fake_score(student, "ID", "all"))
    assert vs["crossed - matched, ID short"]["delta"] == pytest.approx(
        fake_score(crossed, "ID", "short") - fake_score(matched, "ID", "short"))
    assert (vs["matched after - before, ID"]["sign"], vs["crossed after - before, ID"]["sign"]) == (1, -1)
    assert {g["group"][0] for g in r["token_kl"]} == {"teacher A (matched)", "teacher B (crossed)"}
    assert all(g["count"] >= 1 and g["mean"] > 0 for g in r["token_kl"])


def check_mopd(store, r, md):
    from reproduce.merge import CASCADE, build
    assert set(REGIMES) <= set(r)
    c = store.posttrain_config("opd")
    assert f"Post-training: OPD lr {c.lr:g} x {c.steps} steps" in md.splitlines()[2]      # read from the stages
    built = {regime: build(store, regime) for regime in REGIMES}
    for regime, a in built.items():
        scores, previous = r[regime]["scores"], a["student"]
        for d in CASCADE:
            def ids(model, d=d):
                return fake_score(key_of(store, model), "ID", "all", domains=(d,))
            assert scores["Instruct"][f"{d}/ID"] == pytest.approx(ids(a["student"]))
            assert scores[f"Teacher {d.upper()}"][f"{d}/ID"] == pytest.approx(ids(a["teachers"][d]))  # own corpus
            assert scores[f"After {d.upper()}"][f"{d}/ID"] == pytest.approx(ids(a["stages"][d]))
            assert r[regime]["teacher_own_corpus_ID"][d] == pytest.approx(ids(a["teachers"][d]))
            record = json.loads((a["stages"][d] / "train_config.json").read_text())     # stage i distils teacher i
            assert (record["student"], record["teacher"], record["config"]["domains"]) == (     # into stage i-1
                str(previous), str(a["teachers"][d]), d)
            previous = a["stages"][d]
        fa_lost = scores["After EA"]["fa/ID"] - scores["After FA"]["fa/ID"]
        assert r[regime]["forgetting_ID"]["fa"] == pytest.approx(fa_lost)
        shares = r[regime]["patterns"]["lf"]["After EA"]
        assert sum(shares.values()) == pytest.approx(1.0)
    # regimes whose cascades begin with the same teachers share those stages: each is trained once
    one, held, two = (built[x]["stages"] for x in ("shared_compatible", "withheld_shared", "shared_conflict"))
    assert (held["fa"], held["lf"], two["fa"]) == (one["fa"], one["lf"], one["fa"])
    assert held["ea"] != one["ea"] and two["lf"] != one["lf"]
    assert len({p for a in built.values() for p in a["stages"].values()}) == 12

    def per_task(model, domains, value):
        tasks = {}
        for x in store.samples(model, splits=("ID",)):
            if x["split"] == "ID" and x["domain"] in domains:
                tasks.setdefault(x["task"], []).append(value(x))
        return {t: 100 * float(np.mean(v)) for t, v in tasks.items()}

    def mean_diff(a, b):
        return float(np.mean([a[t] - b[t] for t in a]))
    t1 = lambda x: x["pattern"] == "T1"  # noqa: E731
    won = r["contrasts"]["Type I: T1 share after - before, all domains"]
    assert won["tasks"] == 3 * 3 and won["delta"] == pytest.approx(mean_diff(
        per_task(one["ea"], CASCADE, t1), per_task(built["shared_compatible"]["student"], CASCADE, t1)))
    kept = r["contrasts"]["T1 share on earlier domains after the cascade, Type I - withheld"]
    assert kept["delta"] == pytest.approx(mean_diff(per_task(one["ea"], ("fa", "lf"), t1),
                                                    per_task(held["ea"], ("fa", "lf"), t1)))
    ok = lambda x: x["success"]  # noqa: E731

    def change(stages):          # each earlier task's avg@8 at the end of the cascade minus after its own stage
        return {t: v - per_task(stages[d], (d,), ok)[t] for d in ("fa", "lf")
                for t, v in per_task(stages["ea"], (d,), ok).items()}
    lost = r["contrasts"]["earlier domains' change over the cascade, Type III - Type I"]
    assert lost["sign"] == -1 and lost["delta"] == pytest.approx(
        mean_diff(change(built["no_shared_conflict"]["stages"]), change(one)))
    assert "random shared template: its share after - before, all domains" in r["contrasts"]


def check_fig22(store, r, md):
    from reproduce.merge import build
    a = build(store, "shared_compatible")
    assert r["labels"] == ["Instruct", "MOPD 1", "MOPD 2", "MOPD 3", "Teacher FA", "Teacher LF", "Teacher EA"]
    w = [load_state_dict(final_checkpoint(p)) for p in (a["student"], a["stages"]["fa"], a["teachers"]["lf"])]
    dist = lambda x, y: float(sum(((x[k].double() - y[k].double()) ** 2).sum() for k in x)) ** 0.5  # noqa: E731
    assert r["distances"][0][1] == pytest.approx(dist(w[0], w[1]), rel=1e-3)
    assert r["distances"][0][5] == pytest.approx(dist(w[0], w[2]), rel=1e-3)
    assert np.array(r["pca"]).shape == (7, 2) and "MOPD stays far closer to Instruct" in md


def check_turnopd(store, r, md):
    from reproduce.turnopd import METHODS
    same = {row["method"]: row for row in r["same_step"]}
    least = {row["method"]: row for row in r["least_time"]}
    for label, method in METHODS.items():
        acc = run_score(store, f"turnopd-main-{method}")
        assert (same[label]["step"], same[label]["acc"]) == (6, pytest.approx(acc))
    # 6 s of training: OPD (2 s a step) did 3 steps, TCOD-F2B (1.5 s) 4, TurnOPD (1 s) all 6
    assert least["OPD"]["wall_budget"] == 6.0 and [least[m]["steps_completed"] for m in METHODS] == [3, 4, 6]
    third = key_of(store, run_dir(store, "turnopd-main-opd") / "checkpoints" / "step_000003")
    assert least["OPD"]["acc"] == pytest.approx(fake_score(third, "ID", "all"))
    ahead = r["contrasts"]["TurnOPD - OPD at the least common time, ID"]     # paired at each one's eval step
    assert ahead["delta"] == pytest.approx(least["TurnOPD"]["acc"] - least["OPD"]["acc"])
    assert ahead["paper"] == pytest.approx(85.60 - 73.52) and ahead["sign"] == 1
    tcod = least["TCOD-F2B"]["eval_step"]              # TCOD-F2B's row of the least-time table, at its own step
    at = key_of(store, run_dir(store, "turnopd-main-tcod") / "checkpoints" / f"step_{tcod:06d}")
    assert tcod < same["TCOD-F2B"]["eval_step"] and re.search(
        rf"\| TCOD-F2B \| 4 \| {tcod} \| [^|]+ \| "
        rf"{re.escape(fmt(fake_score(at, 'ID', 'all') - least['OPD']['acc'], signed=True))} ± ", md)
    assert "at 6.0 s of training (the least common time of these two; TurnOPD at step 6, OPD at step 3)" in md
    assert set(r["per_turn_kl"]) == {"student (before)", *METHODS}
    assert "the time to reach OPD's final accuracy is zero for every method" in md    # OPD ends at 0 %
    for alpha in ("alpha=0", "alpha=0.5", "alpha=1"):
        assert sum(row[alpha] for row in r["loss_budget"]) == pytest.approx(1.0)


def check_ablation(store, r, md):
    runs = {"vanilla OPD": "turnopd-main-opd", "adaptive depth only": "turnopd-ablation-adaptive-depth-only",
            "linear blend only": "turnopd-ablation-linear-blend-only", "both (TurnOPD)": "turnopd-main-turnopd"}
    for arm, name in runs.items():
        assert (r[arm]["ID"], r[arm]["OOD"]) == pytest.approx((run_score(store, name), run_score(store, name, "OOD")))
    assert [(r[a]["mean_depth"], r[a]["wall"]) for a in runs] == [(8.0, 12.0), (5.0, 6.0), (8.0, 12.0), (5.0, 6.0)]


CHECKS = {"fig3-4": (check_fig3_4, ["fig3_world_model_vs_direct", "fig3_gain_vs_paper", "fig4_scaling"]),
          "table1": (check_table1, ["fig5_horizon_mixtures"]),
          "fig6": (check_fig6, ["fig6_quality"]),
          "fig7": (check_fig7, ["fig7_regions", "fig8_success", "fig8_entropy"]),
          "fig9-10": (check_fig9_10, ["fig10_subspace", "fig9_step_cosines"]),
          "table4": (check_table4, ["fig12_kl", "fig12_success", "fig13_token_kl", "fig14_token_probs",
                                    "fig15_token_probs"]),
          "mopd": (check_mopd, [f"patterns_{regime}" for regime in REGIMES]),
          "fig22": (check_fig22, ["fig22_dynamics"]),
          "turnopd": (check_turnopd, ["frontier", "per_turn_kl", "loss_budget"]),
          "turnopd-ablation": (check_ablation, ["ablation_frontier"])}


def test_every_table_has_a_check():
    assert list(CHECKS) == list(cli.REPRODUCTIONS)


@pytest.mark.parametrize("table_id", list(cli.REPRODUCTIONS))
def test_table_builds_end_to_end(store, table_id):
    argv = [table_id, "--scale", "tiny", "--root", str(store.root), "--data-dir", str(store.data_dir)]
    assert cli.main(argv) == 0
    out = store.out(table_id)
    md, config = (out / "table.md").read_text(), json.loads((out / "config.json").read_text())
    results = json.loads((out / "results.json").read_text())
    assert md.startswith(f"# {config['title']}\n") and config["table"] == table_id
    assert config["runs"] and all(Path(run).exists() for run in config["runs"])
    assert "This command took" in md
    assert set(config["artifact_wall_s"]) == {"pre-training", "post-training", "evaluation"}
    assert not re.search(r"\bnan\b", md, re.IGNORECASE)          # NaN cells are en dashes, notes have numbers
    check, figures = CHECKS[table_id]
    linked = re.findall(r"\]\(([^)]+)\)", md.split("**Figures**")[-1])
    assert linked == [f"{name}.png" for name in figures]
    assert all((out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in linked)
    check(store, results, md)
    if table_id in SCOREBOARD:          # the claims the scoreboard reads: paired, with a verdict each
        assert len(results["contrasts"]) == SCOREBOARD[table_id]
        assert all(c["verdict"] in ("agrees", "disagrees", "cannot tell") and c["tasks"] >= 1
                   and len(c["per_task"] if c["paired"] else c["per_task_a"]) == c["tasks"]
                   for c in results["contrasts"].values())
        assert all(c["paired"] == (table_id != "table1") for c in results["contrasts"].values())   # see mixture_contrasts


# tables whose claims are paired comparisons (analysis.measures.contrast), and how many each makes
SCOREBOARD = {"fig3-4": 6, "table1": 5, "fig6": 6, "fig7": 3, "table4": 4, "mopd": 4, "turnopd": 1,
              "turnopd-ablation": 3}


def test_equal_trajectory_steps_scale_by_the_corpora_token_counts(assets, tmp_path, monkeypatch):  # noqa: F811
    from pretrain.data import read_texts
    run = tmp_path / "run"
    save_tokenizer(assets["tokenizer"], run / "tokenizer")
    (run / "train_config.json").write_text(json.dumps({"data": str(assets["corpus"]),
                                                       "config": {"block_size": 16, "seed": 0, "steps": 300}}))
    texts = read_texts(assets["corpus"] / "pretrain.jsonl")
    n = sum(len(assets["tokenizer"](t, add_special_tokens=False)["input_ids"]) + 1 for t in texts)   # + one EOS each
    assert REAL_CORPUS_TOKENS(run) == n
    record = json.loads((run / "train_config.json").read_text())
    (run / "train_config.json").write_text(json.dumps({**record, "data": str(tmp_path / "gone"), "corpus_tokens": 7}))
    assert REAL_CORPUS_TOKENS(run) == 7                        # as the run recorded it: no corpus needed
    monkeypatch.setattr(pretraining, "corpus_tokens", lambda r: n if r == run else n // 4)
    assert pretraining.equal_trajectory_steps(run, tmp_path / "short") == round(300 * (n // 4) / n)


def test_corpus_budget_fit_counts_the_tokens_a_rollout_generates(assets, tmp_path):  # noqa: F811
    """A turn's budget covers the tokens the policy generates: its text and the marker that closes it,
    which are the corpus's agent-mask tokens (the pre-training loss's own count); one under the
    longest turn cuts exactly the longest turns."""
    from analysis.run_logs import corpus_budget_fit
    from pretrain.data import read_texts
    from pretrain.tokenizer import agent_mask, encode, special_ids
    run = tmp_path / "run"
    tok = assets["tokenizer"]
    save_tokenizer(tok, run / "tokenizer")
    eos = special_ids(tok).eos
    texts = read_texts(assets["corpus"] / "pretrain.jsonl")
    generated = sum(int(agent_mask(encode(tok, t) + [eos], tok).sum()) for t in texts)
    lengths = [len(encode(tok, p.split(ENV)[0])) + 1 for t in texts for p in t.split(AGENT)[1:]]
    longest_text = max(len(encode(tok, t)) + 1 for t in texts)
    fit = corpus_budget_fit(run, max(lengths), longest_text, corpus=assets["corpus"])      # each fits exactly
    assert (fit["turns_over"], fit["episodes_over"], fit["longest_episode"]) == (0, 0, longest_text)
    assert sum(lengths) == generated and fit["longest_turn"] == max(lengths)
    tight = corpus_budget_fit(run, max(lengths) - 1, longest_text - 1, corpus=assets["corpus"])
    assert (tight["turns_over"], tight["episodes_over"]) == (lengths.count(max(lengths)),
                                                              sum(len(encode(tok, t)) + 1 == longest_text for t in texts))


def test_figures_are_drawn_from_the_table_numbers(store, monkeypatch):
    """Fig. 7's region map and Fig. 3's bars receive exactly the numbers (and standard errors) the
    table reports: the plotting calls are caught on their way to `analysis.figures`."""
    from analysis import figures
    from reproduce import shaping
    calls = {}

    def spy(name, real):
        def wrapper(*args, **kwargs):
            calls.setdefault(name, []).append((args, kwargs))
            return real(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(shaping, "plot_region_maps", spy("regions", figures.plot_region_maps))
    monkeypatch.setattr(pretraining, "plot_grouped_bars", spy("bars", figures.plot_grouped_bars))
    same = lambda drawn, written: (drawn != drawn and written is None) or drawn == pytest.approx(written)  # noqa: E731
    for table_id in ("fig7", "fig3-4"):
        argv = [table_id, "--scale", "tiny", "--root", str(store.root), "--data-dir", str(store.data_dir)]
        assert cli.main(argv) == 0
    r = json.loads((store.out("fig7") / "results.json").read_text())
    (_, kw), = calls["regions"]
    assert set(kw["deltas"]) == set(kw["ses"]) == {"GRPO", "OPD"}
    for m in ("grpo", "opd"):
        for q in shaping.QUALITIES:
            for d in DIFFS:
                assert same(kw["deltas"][m.upper()].loc[q, d], r[f"{q}/{d}"][f"{m} avg"])
                assert same(kw["ses"][m.upper()].loc[q, d], r[f"{q}/{d}"][f"{m} se"])
    r = json.loads((store.out("fig3-4") / "results.json").read_text())
    (bars, bar_se), (gains, gain_se) = [(args[0], kw["errors"]) for args, kw in calls["bars"]]
    for d in pretraining.DIFFS:
        assert same(bars.loc[d, "world model"], r[f"ID/{d}"]["world_model"])
        assert same(bar_se.loc[d, "direct"], r[f"ID/{d}"]["direct_se"])
        assert same(gains.loc[d, "ours, equal steps"], r[f"ID/{d}"]["gain"])
        assert same(gain_se.loc[d, "ours, equal trajectories"], r[f"ID/{d}"]["gain_equal_trajectories_se"])


def test_every_model_score_is_printed_beside_the_baselines_on_its_own_tasks():
    from analysis.run_logs import beside_baselines

    def summary(model_pass, baselines):
        table = [{"domain": "fa", "split": "ID", "difficulty": d, "tasks": 4, "avg@8": p / 2, "pass@8": p}
                 for d, p in model_pass.items()]
        rows = [{"domain": "fa", "split": split, "difficulty": d, "baseline": name, "tasks": 4, "avg@8": v, "pass@8": v}
                for (split, d, name), v in baselines.items()]
        return {"table": table, "baselines": rows}
    s = summary({"short": 75.0, "long": 25.0},
                {("ID", "short", "random-valid"): 50.0, ("ID", "short", "recall-cascade"): 75.0,
                 ("ID", "short", "recall-nearest"): 50.0, ("ID", "short", "solver"): 100.0,
                 ("ID", "long", "random-valid"): 0.0, ("ID", "long", "recall-cascade"): 0.0,
                 ("ID", "long", "recall-nearest"): 0.0, ("ID", "long", "solver"): 100.0,
                 ("OOD", "long", "recall-nearest"): 100.0})               # another split: not this table's
    rows, reached = beside_baselines({"m": s, "old": {"table": s["table"]}}, difficulties=("short", "long"))
    assert rows == [["m", "short", 37.5, 75.0, 50.0, 75.0, "50.0 (recall-nearest)"],
                    ["m", "long", 12.5, 25.0, 0.0, 0.0, "0.0 (recall-nearest)"]]   # the oracle is no baseline
    assert reached == 1           # short: recall-cascade ties the model (a tie counts); long: only the model succeeds


def test_claims_seeds_build_only_the_claims_cell_and_pool_its_contrasts(store):
    """``--seeds 2 --claims``: seed 1 trains Fig. 7's 4opt8sub/long runs only (2 of 18), writes no
    region map, and the merged table pools the three claims over both seeds; Figs. 3-4 skip Fig. 4."""
    argv = ["fig7", "--scale", "tiny", "--root", str(store.root), "--data-dir", str(store.data_dir), "--seeds", "2",
            "--claims"]
    assert cli.main(argv) == 0
    seed1 = Store("tiny", store.root, store.data_dir, seed=1, claims_only=True)
    assert sorted(p.name for p in (seed1.home / "posttrain").iterdir() if p.is_dir()) == ["fig7-grpo-4opt8sub-long",
                                                                                          "fig7-opd-4opt8sub-long"]
    assert not list(seed1.out("fig7").glob("*.png"))
    assert "builds only the claims' cell" in (seed1.out("fig7") / "table.md").read_text()
    merged = json.loads((store.out("fig7") / "seeds_results.json").read_text())
    assert len(merged["contrasts"]) == 3 and all(c["seeds"] == 2 for c in merged["contrasts"].values())
    assert cli.main(argv[:-3] + ["--claims"]) == 2          # one seed (0): nothing to narrow
    assert cli.main(["fig3-4", *argv[1:]]) == 0              # Figs. 3-4: the final models, no Fig. 4 curve
    assert not (seed1.out("fig3-4") / "fig4_scaling.png").exists()
    assert (store.out("fig3-4") / "fig4_scaling.png").exists()
    seeds_md = (store.out("fig3-4") / "seeds.md").read_text()    # the tables both seeds hold are merged
    assert "(mean ± SE over 2 seeds)" in seeds_md and "along pre-training (Fig. 4); ± SE: standard error over tasks " \
        "(seed 0)" in seeds_md
    merged = json.loads((store.out("fig3-4") / "seeds_results.json").read_text())
    assert merged["merged"]["scaling"]["per_seed"][1] is None and merged["merged"]["ID/long"]["gain"]["n"] == 2
    assert len(merged["contrasts"]) == SCOREBOARD["fig3-4"]
    assert all(c["seeds"] == 2 for c in merged["contrasts"].values())


def test_table4s_crossed_teacher_holds_fewer_test_tasks_only_where_its_world_has_too_few(tmp_path):
    """At small the multi-path world has ~122 mid tasks new to recipe B's training plans, fewer than the
    scale's 160 a bin: the crossed teacher's corpus is asked for 100 (and could be built: 83 s to sample);
    at tiny (16 a bin) it is the plain recipe-B corpus."""
    tiny, small = (Store(scale, tmp_path / "runs", tmp_path / "data") for scale in ("tiny", "small"))
    assert crossed_teacher(tiny) == {"recipe": "B"} and tiny.corpus_config(**crossed_teacher(tiny)).name == "fa-tiny-recipeB"
    assert small.corpus_config(**crossed_teacher(small)).n_test_per_bin == 100 < small.corpus_config().n_test_per_bin
