"""The artifact store of the reproductions: corpora, pre-trained families, post-trained runs and
evaluations, each built once and reused by every table that needs it.

Why a store: the paper's tables share most of their runs (the 4 Opt fa model is Fig. 3's world-model
arm, Fig. 6's baseline, Fig. 7's teacher and Table 4's matched teacher), so `make reproduce-all`
must build each artifact once, in dependency order, and a second `make reproduce TABLE=...` must
cost only its missing pieces.  Every artifact lives at a path derived from what it *is*:

    data/<corpus name>                                  corpora (`planning_gym.make_data` names)
    runs/reproduce/<scale>/pretrain/<corpus name>       pre-trained models, one family per domain set
    runs/reproduce/<scale>/pretrain/<corpus name>@<family domains>   a model of another family's tokenizer
    runs/reproduce/<scale>/posttrain/<name>             post-trained runs (and MOPD cascades)
    runs/reproduce/<scale>/eval/<slug>/summary.json     evaluations (avg@8 / pass@8 tables, samples)
    runs/reproduce/<scale>/<table id>/                  each reproduction's table, figures, config

A *family* is every pre-trained model over one domain set.  Its base (the scale's default corpus:
world-model format, 4 Opt, S/M/L 100/100/100, recipe A) trains the family's tokenizer; every other
member copies it, so any two members can be teacher and student of an on-policy distillation.
A model may join a family whose domain set is not its corpus's (``family=``): MOPD's one-domain
teachers share the tokenizer of the three-domain student.
An artifact counts as built when its ``summary.json`` exists; a half-written one is resumed or
rebuilt, never read.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from planning_gym.config import CorpusConfig
from planning_gym.cli import UsageError
from planning_gym.constants import EVAL_K
from planning_gym.scales import REPRODUCE
from posttrain.config import EXECUTION_FIELDS
from pretrain import rundir

# a checkpoint's weights (pretrain.checkpoint; a large model's are sharded behind an index), which reproduce.carry
# leaves behind
WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
BUDGETS = REPRODUCE     # the reproductions' budgets per scale live with every other preset (planning_gym.scales)


class ReproductionError(RuntimeError):
    """A stage of a reproduction failed (the message names the stage and the folder)."""


class Busy(ReproductionError):
    """Another process holds an artifact's lock, and this store does not wait (``Store.wait``)."""


def _slug(path: Path, home: Path) -> str:
    try:
        rel = Path(path).resolve().relative_to(home.resolve())
    except ValueError:
        rel = Path(path)
    return str(rel).strip("/").replace("/", "__")


@dataclass
class Store:
    scale: str
    root: Path = Path("runs/reproduce")
    data_dir: Path = Path("data")
    log: object = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))
    seed: int = 0      # trains and samples every model of this store; the corpora are shared
    wait: bool = True  # on an artifact another process is building: wait for it (False: raise Busy)
    claims_only: bool = False   # build only what the scoreboard's claims read (seeds after 0, `--claims`)
    # how to build each artifact this process has asked for again, should it have been carried without
    # its weights (reproduce.carry): artifact -> a function that rebuilds it
    _origins: dict = field(default_factory=dict, repr=False, compare=False)
    # every evaluation this process has read (built or cached): folder -> the seconds it took to build
    evaluations_read: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.scale not in BUDGETS:
            raise ReproductionError(f"unknown scale {self.scale!r} (choose one of {', '.join(BUDGETS)})")
        self.root, self.data_dir = Path(self.root), Path(self.data_dir)

    @property
    def home(self) -> Path:
        """``<root>/<scale>`` for seed 0, ``<root>/<scale>-seed<s>`` for another seed."""
        return self.root / (self.scale if self.seed == 0 else f"{self.scale}-seed{self.seed}")

    @property
    def budget(self) -> dict:
        return BUDGETS[self.scale]

    def out(self, table_id: str) -> Path:
        path = self.home / table_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    # ----- corpora ---------------------------------------------------------------------------------
    def corpus_config(self, **changes) -> CorpusConfig:
        return CorpusConfig.from_scale(self.scale, **changes)

    def corpus(self, **changes) -> Path:
        """The corpus with these `CorpusConfig` changes (``domains=("fa",)`` by default)."""
        from planning_gym.corpus import write_corpus
        from planning_gym.make_data import same_corpus
        cfg = self.corpus_config(**changes)
        out = self.data_dir / cfg.name
        if same_corpus(out, cfg):
            return out
        with self._exclusive(out):
            if not same_corpus(out, cfg):
                self.log(f"[reproduce] corpus {out}")
                write_corpus(cfg, out, workers=1 if self.scale == "tiny" else 2, progress=False)
        return out

    # ----- pre-training ----------------------------------------------------------------------------
    def pretrained(self, family: tuple[str, ...] | None = None, steps: int | None = None, **changes) -> Path:
        """The family member pre-trained on ``corpus(**changes)``; the family base comes first.

        ``family`` is the domain set whose base provides the tokenizer (default: the corpus's own
        domains); a model of another family's tokenizer lives at ``<corpus name>@<family>``.
        ``steps``: train this many steps instead of the scale's preset (``<corpus name>-<N>steps``)."""
        cfg = self.corpus_config(**changes)
        family = tuple(family or cfg.domains)
        name = cfg.name + (f"-{steps}steps" if steps else "")
        run = self.home / "pretrain" / (name if family == cfg.domains else f"{name}@{'+'.join(family)}")
        self._origins[run] = lambda: self._pretrain(run, family, steps, changes, again=True)
        if rundir.is_finished(run):
            return run
        return self._pretrain(run, family, steps, changes)

    def _pretrain(self, run: Path, family: tuple[str, ...], steps: int | None, changes: dict, again: bool = False) -> Path:
        """Train ``run`` (resuming a cut-off one); ``again``: a run carried without its weights is trained
        anew, keeping its tokenizer (the one its carried evaluations were sampled with)."""
        from pretrain.train import main as pretrain_main
        base = self.corpus_config(domains=family)
        with self._exclusive(run):
            carried = _without_weights(run)
            if not carried and (again or rundir.is_finished(run)):
                return run                  # another process built it meanwhile
            carried_losses = _logged_losses(run) if carried else {}
            record = (rundir.read_train_config(run) or {}) if carried else {}
            threads = record.get("threads")
            if carried:
                self.log(f"[reproduce] {run} was carried without its weights; training it again"
                         + (f" on {threads} threads, as it was trained" if threads else ""))
                from pretrain.model import cpu_description
                here = cpu_description()
                if record.get("cpu") != here:     # older records name torch's capability at most, too little
                    there = record.get("cpu") or f"a CPU it did not describe ({record.get('cpu_capability', '?')})"
                    self.log(f"[reproduce] warning: {run} was trained on {there} and this CPU is {here}: trained "
                             "again, it may not be the same weights to the bit (its losses are compared after)")
                (run / rundir.SUMMARY).unlink(missing_ok=True)   # first: cut off from here on, it is unfinished
                for part in run.iterdir():
                    if part.name != rundir.TOKENIZER:
                        shutil.rmtree(part) if part.is_dir() else part.unlink()
            data = self.corpus(**changes)
            if run.name.partition("@")[0] != base.name and not (run / rundir.TOKENIZER / "tokenizer.json").is_file():
                # only the base's tokenizer is needed: take it while the base trains (or trains again)
                tokenizer = self.base_tokenizer(base.name) or self.pretrained(domains=family) / rundir.TOKENIZER
                shutil.rmtree(run / rundir.TOKENIZER, ignore_errors=True)
                run.mkdir(parents=True, exist_ok=True)
                shutil.copytree(tokenizer, run / rundir.TOKENIZER)
            from pretrain.checkpoint import latest_checkpoint
            resume = latest_checkpoint(run) is not None
            self.log(f"[reproduce] pre-train {run}{' (resuming)' if resume else ''}")
            argv = ["--data", str(data), "--out", str(run), "--scale", self.scale, "--set", "keep_checkpoints=100",
                    "--set", f"seed={self.seed}", "--set", f"cpu_bf16={str(self.pretrain_cpu_bf16()).lower()}"] + \
                (["--set", f"steps={steps}"] if steps else [])
            with _torch_threads(threads):
                if pretrain_main(argv + (["--resume"] if resume else [])) != 0:
                    raise ReproductionError(f"pre-training {run} failed")
            if carried_losses:
                self._check_retrained(run, carried_losses)
            return run

    def base_tokenizer(self, base: str) -> Path | None:
        """The tokenizer folder of the family base run ``base`` where it exists, else None. A fresh
        base puts it in place in one rename before it trains, and a carried base keeps it, so a family
        member, which needs nothing else of its base, need not wait for the base's training."""
        tokenizer = self.home / "pretrain" / base / rundir.TOKENIZER
        return tokenizer if (tokenizer / "tokenizer.json").is_file() else None

    def _check_retrained(self, run: Path, carried: dict[int, float]) -> None:
        """A carried run's evaluations were sampled from its old weights, and tables pair them with runs
        trained from the new ones: that holds only if training again gave the same model. The same
        seed, data and preset do on one machine (the logged losses agree to the bit); another machine's
        kernels may not. Records the comparison in the run (``retrained.json``) and warns on a mismatch."""
        again = _logged_losses(run)
        steps = sorted(set(carried) & set(again))
        worst = max((abs(carried[s] - again[s]) for s in steps), default=float("nan"))
        record = {"steps_compared": len(steps), "max_abs_loss_difference": worst,
                  "identical": bool(steps) and worst == 0.0}
        (run / rundir.RETRAINED).write_text(json.dumps(record, indent=1))
        if not record["identical"]:
            self.log(f"[reproduce] warning: {run} trained again is not the run that was carried (largest loss "
                     f"difference {worst:.3g} over {len(steps)} logged steps): its carried evaluations describe "
                     "other weights; the first post-training run from it sets aside what it would be paired with")

    def _set_aside_from(self, student: Path) -> None:
        """Before a run trains from ``student``: were it trained again into another model than the one
        carried (``retrained.json``), the carried evaluations of it and the carried runs that started
        from it (Fig. 7's "before" and its other method's runs) describe the old weights, and a table
        would pair them with this run. Set them aside once (`reproduce.carry.set_aside`), so the table
        builds them again from the weights this run starts from. A teacher trained again sets nothing
        aside: a run pairs with its student, not its teacher."""
        record_path = rundir.run_of(Path(student)) / rundir.RETRAINED
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        done = record.get("set_aside", {})
        if record.get("identical", True) or str(student) in done:
            return
        from reproduce.carry import STALE, set_aside
        moved = set_aside(self.home, Path(student))
        record_path.write_text(json.dumps({**record, "set_aside": {**done, str(student): [str(m) for m in moved]}},
                                          indent=1))
        self.log(f"[reproduce] {student} is another model than the one carried: {len(moved)} carried evaluations and "
                 f"post-training runs of its old weights set aside in {self.home / STALE}; they are built again "
                 "when a table needs them")

    def pretrain_cpu_bf16(self) -> bool:
        """One precision for every pre-training of this home (a seed): the scale's ``cpu_bf16``, unless
        a pre-training here already ran without it. A paired comparison within a seed (Fig. 3's two
        CoT formats, Fig. 6's data qualities) then never compares models trained at two precisions."""
        from planning_gym.cli import read_jsonl
        from pretrain.config import make_config

        def ran_bf16(run: Path) -> bool:      # asked for it, and no logged step ran without it (a CPU that can't)
            asked = (rundir.read_train_config(run) or {}).get("config", {}).get("cpu_bf16")
            return bool(asked) and all(r.get("bf16", True) for r in read_jsonl(rundir.metrics_path(run)) if "loss" in r)
        runs = [r.parent for r in (self.home / "pretrain").glob(f"*/{rundir.TRAIN_CONFIG}")]
        return make_config(self.scale).cpu_bf16 and all(map(ran_bf16, runs))

    def _forget(self, run: Path) -> bool:
        """Delete a post-training artifact carried without its weights, so that it is built again."""
        with self._exclusive(run):
            if _without_weights(run):
                self.log(f"[reproduce] {run} was carried without its weights; training it again")
                shutil.rmtree(run)
        return True

    def weights(self, model: Path) -> Path:
        """``model`` (a run, a checkpoint or an MOPD stage) with its weights on disk: an artifact restored
        from a carry (reproduce.carry) has its records and evaluations but no weights, and is built
        again, the way this process asked for it, before anything loads it. Returns ``model``.

        A run another process is training again (it was carried, and is unfinished now) is awaited,
        or with ``wait=False`` reported `Busy`, never handed on half-built."""
        model = Path(model)
        run = rundir.run_of(model)
        if not rundir.is_finished(run):
            with self._exclusive(run):          # its builder holds this lock until the run is finished
                pass
        if not _without_weights(model):
            return model
        owner = next((p for p in (model, *model.parents) if p in self._origins), None)
        if owner is None:
            raise ReproductionError(f"{model} was carried without its weights and this reproduction did not "
                                    f"ask the store for it, so it cannot be rebuilt here: delete it and rerun")
        self._origins[owner]()
        return model

    def checkpoint_path(self, run: Path, step: int | None = None) -> Path:
        """Where ``run``'s checkpoint at ``step`` (default: the scale's early ``student_step``) lives, built or not."""
        from pretrain.checkpoint import step_dir_name
        step = self.budget["student_step"] if step is None else step
        return Path(run) / rundir.CHECKPOINTS / step_dir_name(step)

    def checkpoint(self, run: Path, step: int | None = None) -> Path:
        """``run``'s checkpoint at ``step`` (default: the scale's early ``student_step``)."""
        step = self.budget["student_step"] if step is None else step
        ckpt = self.checkpoint_path(run, step)
        if not (ckpt / "trainer_state.json").is_file():
            raise ReproductionError(f"{run} has no checkpoint at step {step}")
        return ckpt

    # ----- post-training ---------------------------------------------------------------------------
    def _posttrain_budget(self, method: str = "opd") -> dict:
        """The scale's post-training settings for ``method`` (the shared budget, then the method's own
        overrides), evaluating in runs with this store's protocol."""
        own = self.budget.get("posttrain_per_method", {}).get(method, {})
        return {**self.budget["posttrain"], **own, "eval_k": EVAL_K, "seed": self.seed,
                "eval_tasks_per_cell": self.budget["eval_tasks_per_cell"] or 10**6}   # 0 in BUDGETS: every task

    def posttrain_config(self, method: str, **overrides):
        from posttrain.config import make_config
        values = {**self._posttrain_budget(method), **overrides}
        return make_config(method, self.scale, **values)

    def posttrained(self, name: str, method: str, student: Path, teacher: Path | None = None, **overrides) -> Path:
        """A post-training run ``posttrain/<name>`` (reused when finished, resumed when cut off)."""
        from pretrain.checkpoint import latest_checkpoint

        from posttrain.train import Trainer
        run = self.home / "posttrain" / name
        self._origins[run] = lambda: self._forget(run) and self.posttrained(name, method, student, teacher, **overrides)
        cfg = self.posttrain_config(method, **overrides)
        with self._exclusive(run):
            carried = _without_weights(run)      # restored by reproduce.carry: records and evaluations only
            wanted = {"config": dataclasses.asdict(cfg), "student": str(student), "teacher": str(teacher) if teacher else None}
            diff = _differences(run / rundir.TRAIN_CONFIG, wanted,
                                _defaults(cfg))
            if set(diff) == {"steps"} and not carried and _extendable(run, method, diff["steps"][0], cfg.steps):
                # only longer: the lr is constant, so training on from the checkpoint at the old last step
                # is the longer run (the budget sweep's rule); its summary goes until the new end
                self.log(f"[reproduce] {run} was built with steps={diff['steps'][0]}; extending it to {cfg.steps}")
                (run / rundir.SUMMARY).unlink(missing_ok=True)
            elif diff:       # built under other settings (a budget or default changed since), or a carried
                self.log(f"[reproduce] {run} was built with {_describe(diff)}; rebuilding it")   # run to extend
                shutil.rmtree(run)
            elif rundir.is_finished(run):
                return run
            if carried and run.exists():       # cut off while carried: its checkpoints hold no weights
                shutil.rmtree(run)
            resume = latest_checkpoint(run) is not None
            self.log(f"[reproduce] {method} {run}{' (resuming)' if resume else ''}")
            self.weights(student)
            self._set_aside_from(student)
            if teacher:
                self.weights(teacher)
            Trainer(cfg, Path(student), Path(teacher) if teacher else None, run, None, resume).fit()
            return run

    # ----- evaluation ------------------------------------------------------------------------------
    def evaluation(self, model: Path, corpus: Path | None = None, splits: tuple[str, ...] = ("ID", "OOD"),
                   difficulties: tuple[str, ...] | None = None) -> dict:
        """avg@8 / pass@8 of a run (its final checkpoint) or of a checkpoint folder, on ``corpus``'s
        test splits (default: the corpus the model was trained on). Cached under ``eval/``; an
        evaluation that covers more splits or difficulty bins than asked for is reused."""
        from engine.evaluate import evaluate, load_model_and_tokenizer
        model = Path(model)
        reused = corpus is None and self._final_eval(model, splits, difficulties)
        if reused:
            return self._note_cost(reused["_dir"], reused)
        out = self._eval_dir(model, corpus)
        with self._exclusive(out):
            if (out / "summary.json").is_file():
                cached = json.loads((out / "summary.json").read_text())
                if self._same_protocol(cached, splits, difficulties):
                    return self._note_cost(out, cached)
                self.log(f"[reproduce] {out} was evaluated under another protocol; evaluating again")
            net, tok, data = load_model_and_tokenizer(run_dir=self.weights(model))
            corpus = Path(corpus or data)
            self.log(f"[reproduce] evaluate {model} on {corpus.name}")
            tasks = self.budget["eval_tasks_per_cell"] or None
            return self._note_cost(out, evaluate(net, tok, corpus, k=EVAL_K, max_tasks_per_cell=tasks, seed=self.seed,
                                            out_dir=out, splits=splits, difficulties=difficulties, progress=False))

    def _note_cost(self, folder, summary: dict) -> dict:
        """``summary``, noting what its evaluation cost when it was built (a table reports it)."""
        self.evaluations_read[str(folder)] = float(summary.get("seconds") or 0.0)
        return summary

    def samples(self, model: Path, corpus: Path | None = None, splits: tuple[str, ...] = ("ID", "OOD"),
                difficulties: tuple[str, ...] | None = None) -> list[dict]:
        """The per-sample outcomes (with pattern labels and texts) behind `evaluation`."""
        summary = self.evaluation(model, corpus, splits=splits, difficulties=difficulties)
        out = Path(summary["_dir"]) if "_dir" in summary else self._eval_dir(Path(model), corpus)
        return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line]

    @contextlib.contextmanager
    def _exclusive(self, artifact: Path):
        """Hold the lock of ``artifact`` (a hidden ``.<name>.lock`` beside it), so that two
        reproductions sharing a store build each artifact once: the second waits, then reuses it."""
        artifact = Path(artifact)
        artifact.parent.mkdir(parents=True, exist_ok=True)
        with open(artifact.parent / f".{artifact.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not self.wait:
                    raise Busy(f"another process is building {artifact}") from None
                self.log(f"[reproduce] waiting for another process to finish {artifact}")
                fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _eval_dir(self, model: Path, corpus: Path | None) -> Path:
        # a run and its final checkpoint are one model: key the cache by the checkpoint
        from pretrain.checkpoint import final_checkpoint
        if rundir.is_finished(model):
            model = final_checkpoint(model) or model
        return self.home / "eval" / (_slug(model, self.home) + (f"__on__{Path(corpus).name}" if corpus else ""))

    def _same_protocol(self, summary: dict, splits=("ID", "OOD"), difficulties=None) -> bool:
        """Was this evaluation summary made with this store's k, seed and tasks per cell, and does it
        cover ``splits`` and ``difficulties`` (None: every bin)?"""
        per_cell = max((r["tasks"] for r in summary.get("table", []) if r["difficulty"] != "all"),
                       default=0)     # for summaries written before they recorded max_tasks_per_cell
        return summary.get("k") == EVAL_K and summary.get("seed", 0) == self.seed \
            and summary.get("max_tasks_per_cell", per_cell) == (self.budget["eval_tasks_per_cell"] or None) \
            and _covers(summary, splits, difficulties)

    def _final_eval(self, run: Path, splits=("ID", "OOD"), difficulties=None) -> dict | None:
        """A post-training run's own final evaluation, when it used this store's protocol."""
        try:
            cfg = rundir.read_train_config(run)["config"]
            step = rundir.read_summary(run)["final_eval"]["step"]
        except (KeyError, TypeError, UsageError):
            return None
        folder = run / rundir.EVAL / f"step_{step:06d}"
        wanted = self._posttrain_budget()
        if cfg.get("eval_k") != wanted["eval_k"] or cfg.get("eval_tasks_per_cell") != wanted["eval_tasks_per_cell"] \
                or cfg.get("seed") != self.seed \
                or not (folder / "summary.json").is_file():
            return None
        summary = json.loads((folder / "summary.json").read_text())
        return {**summary, "_dir": str(folder)} if _covers(summary, splits, difficulties) else None

    def describe(self) -> dict:
        return {"scale": self.scale, "seed": self.seed, "root": str(self.root), "data_dir": str(self.data_dir),
                "eval_k": EVAL_K, "claims_only": self.claims_only,
                **{k: v for k, v in self.budget.items()}}


def _without_weights(model: Path) -> bool:
    """Was ``model`` (a checkpoint, a run finished or cut off) restored from
    a carry (reproduce.carry) without its weights? A run is judged by its final (or newest) checkpoint."""
    from pretrain.checkpoint import final_checkpoint, latest_checkpoint
    model = Path(model)
    if (model / "trainer_state.json").is_file():                  # a checkpoint
        return not has_weights(model)
    ckpt = final_checkpoint(model) if rundir.is_finished(model) else latest_checkpoint(model)
    return ckpt is not None and not has_weights(ckpt)


@contextlib.contextmanager
def _torch_threads(n: int | None):
    """Run with ``n`` torch threads (None: as set), then as before: a carried run trains again with the
    count it was trained with, as its sums then come out in the same order and the weights to the bit."""
    import torch
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _logged_losses(run: Path) -> dict[int, float]:
    from planning_gym.cli import read_jsonl
    return {r["step"]: r["loss"] for r in read_jsonl(rundir.metrics_path(run)) if "loss" in r and "step" in r}


def has_weights(checkpoint: Path) -> bool:
    return any((Path(checkpoint) / name).is_file() for name in WEIGHTS)


def _covers(summary: dict, splits, difficulties) -> bool:
    """Did this evaluation run ``splits`` and ``difficulties`` (None: every bin)?  A summary without
    a record of either ran all of them."""
    def includes(have, wanted):
        return have is None or (wanted is not None and set(wanted) <= set(have))
    return includes(summary.get("splits"), splits) and includes(summary.get("difficulties"), difficulties)


def _differences(config_file: Path, wanted: dict, defaults: dict | None = None) -> dict:
    """``{setting: (recorded, wanted)}`` for what differs between a run's recorded
    ``train_config.json`` and ``wanted`` (empty if nothing or if there is no record yet). A setting
    the record predates counts as unchanged when ``wanted`` gives it its default (``defaults``);
    how a run executes (`posttrain.config.EXECUTION_FIELDS`: device, precision) never differs."""
    try:
        have = json.loads(Path(config_file).read_text())
    except (OSError, ValueError):
        return {}

    def flat(record: dict) -> dict:
        return {**{k: v for k, v in record.items() if k != "config"}, **record.get("config", {})}
    have, wanted = flat(have), flat(wanted)
    defaults = defaults or {}
    return {k: (have.get(k), v) for k, v in wanted.items() if k not in EXECUTION_FIELDS
            and have.get(k) != v and not (k not in have and k in defaults and defaults[k] == v)}


def _defaults(cfg) -> dict:
    """The declared defaults of a config dataclass (a record that predates a field had its default)."""
    return {f.name: f.default for f in dataclasses.fields(cfg) if f.default is not dataclasses.MISSING}


def _describe(diff: dict) -> str:
    return ", ".join(f"{k}={old!r} (now {new!r})" for k, (old, new) in diff.items())


def _changes(config_file: Path, wanted: dict, defaults: dict | None = None) -> str:
    """`_differences` as one line ('' when nothing differs)."""
    return _describe(_differences(config_file, wanted, defaults))


# Methods whose step t does not depend on the run's total step count (TurnOPD's blend weight is
# alpha_at(t, steps), TCOD-F2B's window grows every steps // 8): only these can be extended.
EXTENDABLE = ("grpo", "opd")


def _extendable(run: Path, method: str, old_steps, new_steps: int) -> bool:
    """Can a ``method`` run recorded with ``old_steps`` become the ``new_steps`` run by training on?
    Only when it is longer, the method's steps do not depend on the total, and the run holds a
    checkpoint to continue from (its metrics keep the old final evaluation as an intermediate one)."""
    from pretrain.checkpoint import latest_checkpoint
    return method in EXTENDABLE and isinstance(old_steps, int) and new_steps > old_steps \
        and latest_checkpoint(run) is not None

