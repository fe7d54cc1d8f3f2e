"""GPU-hours of `make reproduce-all SCALE=...`, per table, before anyone books a GPU.

    python -m reproduce.estimate [--scale paper] [--gpu-flops 989e12] [--mfu 0.35]
                                 [--rollout-mfu 0.05] [--rollout-tok-s N] [--episode-tokens N] [--json PATH]
                                 [--remaining [--root runs/reproduce] [--data-dir data] [--seed S]
                                  [--measured]]

Why this exists: the paper-scale path (issue 21) must say what it costs before it is run.  No
GPU throughput has been measured in this project yet, so every rate below is an assumption,
printed as one; `scripts/gpu_check.sh`'s measured numbers should replace them (--mfu,
--rollout-tok-s).  The store has no dry-run, so `plan` walks each table in `reproduce.cli`'s
order, asking the same store for the same artifacts as the table functions in `reproduce/`
(pretraining.py, shaping.py, merge.py, turnopd.py) with their own constants; an artifact counts
once, against the first table that builds it (its marginal cost in `reproduce all`); with
--remaining, an artifact the store has already built under today's settings counts as built, not
as cost -- what a multi-session run at small still has to do -- except that a pre-training run
restored from a carry without its weights is priced once more where work still to build first loads
it (the store trains it again then, `Store.weights`).  Budgets
come from the real configs: `pretrain.config.make_config(scale)`, `Store.posttrain_config`,
`Store.budget` (planning_gym.scales), FLOPs from `pretrain.model`.  Per seed; --seeds N costs N x.
With --measured (and --remaining) a last column prices what is left at the rates the store's own
runs measured on this machine (`Rates`: seconds per training step of each method and horizon,
per evaluation episode, per pre-training token), a run cut off at a checkpoint by its steps left:
the core-hours a multi-session run at small still needs (one worker per core).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry
from planning_gym.constants import DIFFICULTIES, EVAL_K, TURNOPD_TOPK
from planning_gym.scales import CORPUS, check_scale

H100_BF16_DENSE = 989e12        # FLOP/s, the H100 SXM data sheet's dense bf16 peak
EQUAL_TRAJECTORY_FRACTION = 0.5  # fig3-4's equal-trajectory arm: a world-model trajectory is ~2x a direct one
COLUMNS = ("pretrain_gpu_h", "posttrain_gpu_h", "eval_gpu_h")


class Plan:
    """Artifacts of one scale, each costed once (FLOPs split into training and rollout work)."""

    def __init__(self, scale: str, episode_tokens: int | None, store=None, remaining: bool = False, rates=None):
        from pretrain.config import make_config
        from pretrain.model import analytic_params
        from reproduce.store import Store
        self.store, self.scale = store or Store(scale), scale
        self.remaining = remaining        # leave out what the store has already built (counted as "built")
        self.rates = rates                # a `Rates`: also price what is left in measured seconds
        self.pre_cfg = make_config(scale)
        self.n = analytic_params(self.pre_cfg)       # vocab = the BPE target size (the trained one is close)
        probe = self.store.posttrain_config("opd")
        self.episode_tokens = episode_tokens or probe.step_limit * probe.max_turn_tokens   # upper bound
        self.rows: dict[str, dict] = {}
        self.seen: set[str] = set()
        self.table = ""
        # what each table asks the store for, built or not, in order (reproduce.workers): ("pretrain", key) and
        # ("eval", model key); and how to ask the store for each pre-training key
        self.needs: dict[str, list[tuple[str, str]]] = {}
        self.requests: dict[str, dict] = {}
        self.unbuilt: set[tuple[str, str]] = set()    # with ``remaining``: the needs still to build

    def _new(self, key: str) -> bool:
        new = key not in self.seen
        self.seen.add(key)
        return new

    def _row(self) -> dict:
        return self.rows.setdefault(self.table, dict(pretrain=0, posttrain=0, evals=0, built=0, train_flops=0.0,
                                                     post_update_flops=0.0, post_rollout_flops=0.0, eval_flops=0.0,
                                                     measured_s=0.0, running=0, again=0))

    def _built(self, kind: str, key: str, cfg=None, corpus: str = "") -> bool:
        """With ``remaining``: is this artifact already in the store, built under today's settings?"""
        if not self.remaining:
            return False
        import dataclasses

        from pretrain import rundir
        from reproduce.store import _changes, _defaults
        home = self.store.home
        if kind == "pretrain":
            done = rundir.is_finished(home / "pretrain" / key)
        elif kind == "posttrain":
            run = home / "posttrain" / key     # settings only: the plan does not know the runs' paths
            done = rundir.is_finished(run) and not _changes(run / rundir.TRAIN_CONFIG,
                                                            {"config": dataclasses.asdict(cfg)}, _defaults(cfg))
        else:
            model = model_path(self.store, key)
            if not model.exists():
                return False
            data = self.store.data_dir / corpus.partition("@")[0] if corpus else None
            summary = self.store._eval_dir(model, data) / "summary.json"
            done = summary.is_file() and self.store._same_protocol(json.loads(summary.read_text()))
        if done:
            self._row()["built"] += 1
        return done

    def _steps_done(self, name: str, cfg) -> int:
        """The steps a cut-off run of today's settings keeps when it resumes (its newest checkpoint)."""
        import dataclasses

        from reproduce.store import _changes, _defaults
        run = self.store.home / "posttrain" / name
        if _changes(run / "train_config.json", {"config": dataclasses.asdict(cfg)}, _defaults(cfg)):
            return 0
        return Rates.steps_done(run)

    def _eval_episodes(self, domains: int, splits: int = 2, bins: int = len(DIFFICULTIES), per_cell: int = 0) -> int:
        tasks = min(per_cell or self.store.budget["eval_tasks_per_cell"] or 10**9, CORPUS[self.scale]["test"])
        return domains * splits * bins * tasks * EVAL_K

    def _need(self, unit: tuple[str, str]) -> None:
        needs = self.needs.setdefault(self.table, [])
        if unit not in needs:
            needs.append(unit)

    def pretrained(self, family: tuple | None = None, steps: int | None = None, exact: bool = True, **changes) -> str:
        """``exact=False``: ``steps`` is this estimate's guess (Fig. 3's equal-trajectory arm), so the
        artifact is costed but not listed among the table's needs."""
        cfg = self.store.corpus_config(**changes)
        family = tuple(family or cfg.domains)
        name = cfg.name + (f"-{steps}steps" if steps else "")
        key = name if family == cfg.domains else f"{name}@{'+'.join(family)}"
        if name != self.store.corpus_config(domains=family).name:
            self.pretrained(domains=family)                 # the family base trains the tokenizer first
        if exact:
            self.requests[key] = dict(family=None if family == cfg.domains else family, steps=steps, **changes)
            self._need(("pretrain", key))
        if self._new("pretrain " + key) and not self._built("pretrain", key):
            self._row()["pretrain"] += 1
            self._price_pretraining(steps)
        return key

    def _price_pretraining(self, steps: int | None) -> None:
        from pretrain.config import make_config
        from pretrain.model import train_flops_per_token
        c = make_config(self.scale, steps=steps)
        row = self._row()
        row["train_flops"] += train_flops_per_token(c, self.n) * c.steps * c.batch_size * c.block_size
        if self.rates:
            row["measured_s"] += self.rates.pretrain_s(c.steps * c.batch_size * c.block_size)

    def _weights_of(self, model: str | None) -> None:
        """A model that work still to build loads: a pre-training run restored from a carry holds no
        weights, so the store trains it again first (`Store.weights`), once; priced like a new one."""
        if not (self.remaining and model) or model.startswith(POSTTRAINED):
            return
        if not self._new("weights " + run_key(model)):
            return
        from pretrain import rundir
        from reproduce.store import _without_weights
        run = self.store.home / "pretrain" / run_key(model)
        if rundir.is_finished(run) and _without_weights(run):
            self._row()["again"] += 1
            self._price_pretraining(self.requests.get(run_key(model), {}).get("steps"))

    def evaluation(self, model: str, corpus: str = "", domains: int = 1) -> None:
        if not corpus and run_key(model) in self.requests:
            self._need(("eval", model))
        if self._new(f"eval {model} {corpus}") and not self._built("eval", model, corpus=corpus):
            if not corpus:
                self.unbuilt.add(("eval", model))
            self._weights_of(model)
            row = self._row()
            row["evals"] += 1
            row["eval_flops"] += 2.0 * self.n * self.episode_tokens * self._eval_episodes(domains)
            if self.rates:
                row["measured_s"] += self.rates.episode_s() * self._eval_episodes(domains)

    def posttrained(self, name: str, method: str, eval_domains: int = 1, student: str | None = None,
                    teacher: str | None = None, **overrides) -> str:
        """``student`` / ``teacher``: model keys (as for `evaluation`; a stage of an MOPD cascade has
        the stage before it, ``posttrain:<name>``); with them the run is one of the table's needs,
        built by `reproduce.workers` as the table would ask for it. ``eval_domains``: how many
        domains its evaluations cover."""
        cfg = self.store.posttrain_config(method, **overrides)
        if student is not None:
            self.requests[name] = dict(method=method, student=student, teacher=teacher, overrides=overrides)
            self._need(("posttrain", name))
        if self._new("posttrain " + name) and not self._built("posttrain", name, cfg):
            self.unbuilt.add(("posttrain", name))
            self._weights_of(student)
            self._weights_of(teacher)
            tokens = cfg.steps * cfg.tasks_per_step * cfg.group_size * self.episode_tokens
            scoring = 0.0 if method == "grpo" else 2.0        # a distilling teacher scores every token once
            splits, bins = len(cfg.eval_split_list), len(cfg.eval_difficulty_list or DIFFICULTIES)
            row = self._row()
            row["posttrain"] += 1
            row["post_rollout_flops"] += 2.0 * self.n * tokens
            row["post_update_flops"] += (6.0 * cfg.ppo_epochs + scoring) * self.n * tokens
            row["eval_flops"] += cfg.evaluations * 2.0 * self.n * self.episode_tokens * self._eval_episodes(
                eval_domains, splits, bins, cfg.eval_tasks_per_cell)
            if self.rates:
                done = self._steps_done(name, cfg)
                row["running"] += bool(done)
                row["measured_s"] += self.rates.step_s(method, cfg.difficulties) * (cfg.steps - done) + \
                    self.rates.episode_s() * cfg.evaluations * self._eval_episodes(eval_domains, splits, bins,
                                                                                    cfg.eval_tasks_per_cell)
        return name


class Rates:
    """Seconds per unit of work, as the store's own runs (every seed's home) measured them here.

    A training step: the mean of ``rollout_s + scoring_s + update_s`` over every logged step of
    the store's post-training runs of that method and horizon (else of that method, else of any);
    an evaluation episode: seconds over episodes of every evaluation summary; a pre-training token:
    the mean of the logged ``tok_per_s``.  Runs of both precisions are pooled, so where the newer
    ones autocast (``cpu_bf16``) the price is an upper bound."""

    def __init__(self, homes: list[Path]):
        from planning_gym.cli import read_jsonl
        self.steps: dict[tuple[str, str], list[float]] = {}
        for record in (r for home in homes for r in home.glob("posttrain/**/train_config.json")):
            cfg = json.loads(record.read_text()).get("config", {})
            for r in read_jsonl(record.parent / "metrics.jsonl"):
                if "rollout_s" in r:
                    key = (cfg.get("method", ""), cfg.get("difficulties", ""))
                    self.steps.setdefault(key, []).append(r["rollout_s"] + r["scoring_s"] + r["update_s"])
        summaries = [json.loads(f.read_text()) for home in homes for f in home.glob("**/eval/**/summary.json")]
        self.episodes = [(s["seconds"], s["episodes"]) for s in summaries if s.get("seconds") and s.get("episodes")]
        self.tok_s = [r["tok_per_s"] for home in homes for f in home.glob("pretrain/*/metrics.jsonl")
                      for r in read_jsonl(f) if r.get("tok_per_s")]
        if not (self.steps and self.episodes and self.tok_s):
            raise UsageError("--measured needs logged pre-training, evaluation and post-training runs in "
                             + (", ".join(map(str, homes)) or "the store"))

    @staticmethod
    def _mean(values) -> float:
        return sum(values) / len(values)

    def step_s(self, method: str, difficulties: str) -> float:
        same = self.steps.get((method, difficulties)) or \
            [x for (m, _), v in self.steps.items() if m == method for x in v] or \
            [x for v in self.steps.values() for x in v]
        return self._mean(same)

    def episode_s(self) -> float:
        return sum(s for s, _ in self.episodes) / sum(n for _, n in self.episodes)

    def pretrain_tok_s(self) -> float:
        return self._mean(self.tok_s)

    def pretrain_s(self, tokens: int) -> float:
        return tokens / self.pretrain_tok_s()

    @staticmethod
    def steps_done(run: Path) -> int:
        """The step of a cut-off run's newest checkpoint (what a resume keeps), 0 if none."""
        from pretrain.checkpoint import latest_checkpoint
        ckpt = latest_checkpoint(run) if run.is_dir() else None
        return int(ckpt.name.rpartition("_")[2]) if ckpt else 0


POSTTRAINED = "posttrain:"      # the model key of a post-training run (an MOPD stage's student)


def _equal_trajectory_steps(store, world_model: str, direct: str) -> tuple[int | None, bool]:
    """Fig. 3's equal-trajectory arm, exactly, once both arms have trained and recorded their corpus
    size (`pretrain.train`'s ``corpus_tokens``); before that the table alone can tell it."""
    from pretrain import rundir
    from reproduce.pretraining import equal_trajectory_steps
    runs = [store.home / "pretrain" / key for key in (world_model, direct)]
    if all((rundir.read_train_config(run) or {}).get("corpus_tokens") for run in runs):
        return equal_trajectory_steps(*runs), True
    return None, False


def run_key(model: str) -> str:
    """The run of a model key: ``<run>``, ``<run>@student`` or ``<run>@<step>`` (pre-training), or
    ``posttrain:<name>``."""
    if model.startswith(POSTTRAINED):
        return model
    run, _, at = model.rpartition("@")
    return run if at == "student" or at.isdigit() else model


def model_path(store, key: str) -> Path:
    """The folder of a model key: a pre-training run, its checkpoint for ``<run>@student`` /
    ``<run>@<step>``, or a post-training run for ``posttrain:<name>``."""
    if key.startswith(POSTTRAINED):
        return store.home / "posttrain" / key[len(POSTTRAINED):]
    run = store.home / "pretrain" / run_key(key)
    at = key[len(run_key(key)) + 1:]
    if not at:
        return run
    return store.checkpoint_path(run, None if at == "student" else int(at))


def plan(scale: str, episode_tokens: int | None = None, store=None, remaining: bool = False, rates=None) -> Plan:
    """Every artifact of `reproduce all` at ``scale``, table by table (mirrors reproduce/*.py);
    with ``remaining``, only those ``store`` has not built yet."""
    from posttrain.teachers import REGIMES
    from reproduce import merge, pretraining, shaping, turnopd
    from reproduce.cli import REPRODUCTIONS
    p = Plan(scale, episode_tokens, store, remaining, rates)
    steps = p.pre_cfg.steps
    for p.table in REPRODUCTIONS:
        t = p.table
        if t == "fig3-4":
            arms = [p.pretrained(), p.pretrained(cot_format="direct")]
            eq, exact = _equal_trajectory_steps(p.store, *arms)
            eq = eq or max(1, round(steps * EQUAL_TRAJECTORY_FRACTION))
            for run in arms + [p.pretrained(cot_format="direct", steps=eq if eq != steps else None, exact=exact)]:
                p.evaluation(run)
            for run in arms if not p.store.claims_only else ():       # Fig. 4's curve (not a claim)
                for s in pretraining.SCALING_STEPS[scale]:
                    p.evaluation(run if s == steps else f"{run}@{s}")
        elif t in ("table1", "fig6"):
            for change in ([dict(horizon_mix=m) for m in pretraining.MIXES] if t == "table1"
                           else [dict(patterns=q) for q in pretraining.QUALITIES]):
                p.evaluation(p.pretrained(**change))
        elif t == "fig7":
            teacher, cells = p.pretrained(), shaping.region_cells(p.store)
            p.evaluation(teacher)                                   # OPD's ceiling, beside the fit
            for q in dict.fromkeys(q for q, _ in cells):
                student = f"{p.pretrained(patterns=q)}@student"
                p.evaluation(student)
                for d in (d for qq, d in cells if qq == q):
                    for m in ("grpo", "opd"):
                        p.posttrained(f"fig7-{m}-{q}-{d}", m, student=student, teacher=teacher if m == "opd" else None,
                                      difficulties=d, eval_every=0, eval_splits="ID", eval_difficulties=d)
        elif t == "fig9-10":
            student, teacher = f"{p.pretrained(patterns='4opt4sub')}@student", p.pretrained()
            for m in ("grpo", "opd"):
                p.posttrained(f"fig9-{m}-4opt4sub-long", m, student=student, teacher=teacher if m == "opd" else None,
                              difficulties="long", eval_every=0, ckpt_every=1, keep_checkpoints=0)
        elif t == "table4":
            a, b = p.pretrained(), p.pretrained(recipe="B")
            for arm, teacher in (("matched", a), ("crossed", b)):
                p.posttrained(f"table4-opd-{arm}", "opd", student=f"{a}@student", teacher=teacher,
                              topk=shaping.PHYSICS_OPD_TOPK, eval_at_start=False, eval_every=0)
            for model, corpus in ((f"{a}@student", ""), (a, ""), (b, ""), (b, a)):
                p.evaluation(model, corpus)
        elif t in ("mopd", "fig22"):
            n = len(merge.CASCADE)
            student = p.pretrained(domains=merge.CASCADE, patterns=merge.STUDENT_PATTERNS)
            if t == "mopd":                         # Fig. 22 reads weights only
                p.evaluation(student, domains=n)
            for regime in (merge.store_regimes(p.store) if t == "mopd" else ("shared_compatible",)):
                previous = student
                for i, d in enumerate(merge.CASCADE, start=1):     # one OPD run per stage, shared by regimes
                    teacher = p.pretrained(family=merge.CASCADE, domains=(d,), patterns=REGIMES[regime][d])
                    if t == "mopd":
                        p.evaluation(teacher)
                    name = merge.stage_name([(c, REGIMES[regime][c]) for c in merge.CASCADE[:i]])
                    p.posttrained(name, "opd", eval_domains=n, student=previous, teacher=teacher, domains=d,
                                  eval_every=0, eval_splits=",".join(merge.SPLITS))
                    previous = POSTTRAINED + name
        elif t in ("turnopd", "turnopd-ablation"):
            base = p.pretrained()
            student = f"{base}@student"
            p.evaluation(student)
            arms = ([turnopd.METHODS[m] for m in turnopd.store_methods(p.store)] if t == "turnopd"
                    else ("opd", "turnopd"))
            for m in arms:
                p.posttrained(f"turnopd-main-{m}", m, student=student, teacher=base, topk=TURNOPD_TOPK,
                              eval_at_start=False, **(turnopd.tcod_overrides(p.store) if m == "tcod" else {}))
            if t == "turnopd-ablation":
                for arm, flags in turnopd.ARMS.items():
                    if arm not in ("vanilla OPD", "both (TurnOPD)"):
                        p.posttrained(f"turnopd-ablation-{turnopd._slug(arm)}", "turnopd", student=student,
                                      teacher=base, topk=TURNOPD_TOPK, eval_at_start=False, **flags)
        p._row()
    return p


def hours(p: Plan, gpu_flops: float, mfu: float, rollout_mfu: float, rollout_tok_s: float | None) -> list[dict]:
    """Rows (one per table, then the total) in GPU-hours: training FLOPs at ``mfu`` of the peak,
    rollout FLOPs at ``rollout_mfu`` of it, or at ``rollout_tok_s`` tokens/s when that is given."""
    def roll(flops: float) -> float:
        return flops / (2.0 * p.n) / rollout_tok_s if rollout_tok_s else flops / (gpu_flops * rollout_mfu)
    rows = []
    for table, r in p.rows.items():
        pre = r["train_flops"] / (gpu_flops * mfu) / 3600
        update = r["post_update_flops"] / (gpu_flops * mfu) / 3600
        post = update + roll(r["post_rollout_flops"]) / 3600
        ev = roll(r["eval_flops"]) / 3600
        running = f", {r['running']} of them cut off at a checkpoint" if r["running"] else ""
        again = f" (+{r['again']} carried, trained again for the weights)" if r["again"] else ""
        rows.append({"table": table,
                     "artifacts": f"{r['pretrain']} pre-train{again}, {r['posttrain']} post-train{running}, "
                     f"{r['evals']} eval" + (f" (+{r['built']} already built)" if r["built"] else ""), "built": r["built"],
                     "pretrain_gpu_h": pre, "posttrain_gpu_h": post,
                     "posttrain_update_gpu_h": update, "eval_gpu_h": ev, "total_gpu_h": pre + post + ev,
                     "measured_core_h": r["measured_s"] / 3600 if p.rates else None})
    total = {"table": "total", "artifacts": f"{sum(r['pretrain'] for r in p.rows.values())} pre-train, "
             f"{sum(r['posttrain'] for r in p.rows.values())} post-train, {sum(r['evals'] for r in p.rows.values())} eval",
             "built": sum(r["built"] for r in p.rows.values())}
    if total["built"]:
        total["artifacts"] += f" (+{total['built']} already built)"
    for key in (*COLUMNS, "posttrain_update_gpu_h", "total_gpu_h"):
        total[key] = sum(r[key] for r in rows)
    total["measured_core_h"] = sum(r["measured_core_h"] for r in rows) if p.rates else None
    return rows + [total]


def _positive(name: str, value: float | None, most: float | None = None) -> None:
    if value is not None and not (value > 0 and (most is None or value <= most)):
        raise UsageError(f"{name} must be > 0{f' and <= {most:g}' if most else ''}, got {value:g}")


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="python -m reproduce.estimate", description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="paper", help="tiny | small | paper (default paper)")
    ap.add_argument("--gpu-flops", type=float, default=H100_BF16_DENSE, help="peak FLOP/s of one GPU")
    ap.add_argument("--mfu", type=float, default=0.35, help="training FLOP utilisation of the peak (assumed)")
    ap.add_argument("--rollout-mfu", type=float, default=0.05, help="rollout/evaluation FLOP utilisation (assumed)")
    ap.add_argument("--rollout-tok-s", type=float, default=None, help="measured rollout tokens/s (replaces --rollout-mfu)")
    ap.add_argument("--episode-tokens", type=int, default=None, help="tokens per episode (default: the upper bound)")
    ap.add_argument("--remaining", action="store_true",
                    help="cost only what the store (--root, --data-dir) has not built yet")
    ap.add_argument("--root", default="runs/reproduce", help="the store's runs folder (with --remaining)")
    ap.add_argument("--data-dir", default="data", help="the store's corpora folder (with --remaining)")
    ap.add_argument("--seed", type=int, default=0, help="the store's seed (with --remaining)")
    ap.add_argument("--claims", action="store_true",
                    help="a seed after 0 built with `python -m reproduce --claims`: only what the claims read")
    ap.add_argument("--measured", action="store_true",
                    help="with --remaining: also price what is left at the store's own measured rates (core-hours)")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")

    def run() -> int:
        a = ap.parse_args(argv)
        check_scale(a.scale)
        for name, most in (("gpu_flops", None), ("rollout_tok_s", None), ("episode_tokens", None), ("mfu", 1.0),
                           ("rollout_mfu", 1.0)):
            _positive("--" + name.replace("_", "-"), getattr(a, name), most)
        from reproduce.store import Store
        if a.measured and not a.remaining:
            raise UsageError("--measured prices what is left: pass --remaining too")
        store = Store(a.scale, Path(a.root), Path(a.data_dir), seed=a.seed, claims_only=a.claims and a.seed > 0)
        homes = [h for h in Path(a.root).glob(f"{a.scale}*") if h.name == a.scale or h.name.startswith(f"{a.scale}-seed")]
        p = plan(a.scale, a.episode_tokens, store, a.remaining, Rates(homes) if a.measured else None)
        rows = hours(p, a.gpu_flops, a.mfu, a.rollout_mfu, a.rollout_tok_s)
        cfg = p.pre_cfg
        rate = f"{a.rollout_tok_s:g} tokens/s (given)" if a.rollout_tok_s else f"{a.rollout_mfu:g} of the peak"
        print(f"# GPU-hours of `make reproduce-all SCALE={a.scale}` (one seed"
              + (f"; what {store.home} has not built yet" if a.remaining else "") + ")\n")
        for line in (
                "No GPU throughput has been measured in this project yet: every rate below is an assumption; "
                "replace it with scripts/gpu_check.sh's numbers (--mfu, --rollout-tok-s).",
                f"model: {p.n / 1e6:.1f}M parameters (pretrain.model.analytic_params, vocab {cfg.vocab_size})",
                f"pre-training: {cfg.steps} steps x {cfg.batch_size} x {cfg.block_size} tokens, "
                "FLOPs = pretrain.model.train_flops_per_token (6N + attention) x tokens",
                f"assumption: peak {a.gpu_flops:g} FLOP/s per GPU; training (pre-training, post-training updates) at "
                f"MFU {a.mfu:g}",
                f"assumption: rollouts and evaluations (2N FLOPs/token, decode is memory bound) at {rate}",
                f"assumption: {p.episode_tokens} tokens per episode (step limit x max turn tokens: every episode "
                "runs to the limit, an upper bound), all generated and all trained; a post-training update is "
                "6N/token, plus 2N for a distilling teacher's scoring",
                f"assumption: fig3-4's equal-trajectory arm trains {EQUAL_TRAJECTORY_FRACTION:g} x the preset's "
                "steps (the real count is measured from the two corpora)",
                "not counted: pre-training loss evaluations, corpus generation (CPU), the small probes (token "
                "views, per-turn KL); TurnOPD's / TCOD-F2B's shortened rollouts are counted at full depth"):
            print(f"- {line}")
        if p.rates:
            print(f"- measured (last column): {p.rates.step_s('opd', 'mid'):.0f} s per OPD step at mid, "
                  f"{p.rates.episode_s():.2f} s per evaluation episode, {p.rates.pretrain_tok_s():.0f} "
                  f"pre-training tokens/s, as the runs of every seed in {a.root} logged them (one process per core)")
        keys = (*COLUMNS, "total_gpu_h") + (("measured_core_h",) if p.rates else ())
        print(f"\n| table/figure | artifacts ({'to build' if a.remaining else 'new'}) | pre-train GPU-h | post-train GPU-h "
              f"| eval GPU-h | total GPU-h |" + (" measured core-h |" if p.rates else ""))
        print("|---|---|" + "---:|" * len(keys))
        for r in rows:
            b = "**" if r["table"] == "total" else ""
            print(f"| {b}{r['table']}{b} | {r['artifacts']} | " + " | ".join(f"{b}{r[k]:.1f}{b}" for k in keys) + " |")
        if a.json:
            Path(a.json).write_text(json.dumps({**{k: v for k, v in vars(a).items() if k != "json"},
                                                "episode_tokens": p.episode_tokens, "params": p.n, "rows": rows}))
        return 0
    return entry(run)


if __name__ == "__main__":
    sys.exit(main())
