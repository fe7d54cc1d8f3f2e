"""Corpus generation: pools, rows, checks and export.

Order of work (each step is deterministic given the config):
  1. build one world per domain (same abstract graph, different names and verbs);
  2. draw the training pools (no reserved (goal, item) pair), then ``test_id`` (new tasks; in
     the mid and long bins none solved by a training gold plan run from its start inventory)
     and ``test_ood`` (every shortest plan makes a reserved item and fires only rules the
     training rows use); `tasks.py` says why;
  3. render every row (pattern, chain of thought) and replay it through the environment —
     rows are independent, so this runs in several processes with identical output;
  4. assert the split invariants, then write rules, JSONL, Parquet, statistics and a card into
     a temporary folder that is renamed into place only when everything succeeded.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from .cli import UsageError
from .config import SPLITS, CorpusConfig
from .env import Task
from .patterns import OPTIMAL, mixture_weights
from .rng import stream
from .solver import Solver
from .tasks import BINS, TaskSampler, TrainingPlans
from .trajectory import build_row, task_of_row, verify_row
from .world import World

CHUNK = 256


class SplitLeakError(AssertionError):
    """A test task or held-out combination found its way into a training pool."""


def code_fingerprint(root: Path = Path(__file__).parent) -> str:
    """Hash of the generator's own source and domain files: a corpus is reused only if both its
    config and the code that wrote it are unchanged. ``scales.py`` is left out: what it gives a
    corpus (sizes, graph settings) is in the corpus's config already, and its other dials (a
    post-training budget) must not make every corpus rebuild."""
    import hashlib
    h = hashlib.sha256()
    readers = {"bench.py", "reference_env.py", "gym_env.py", "make_data.py", "cli.py", "scales.py"}  # write no corpus
    for f in sorted([*root.glob("*.py"), *root.glob("domains/*.json")]):
        if f.name in readers:
            continue
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def build_worlds(cfg: CorpusConfig) -> dict[str, World]:
    """One world per domain, keyed by the domain's key (``fa``), also for a domain file path."""
    worlds = [World.build(d, cfg.graph, cfg.seed, cfg.recipe, cfg.errors, cfg.paths) for d in cfg.domains]
    return {w.domain: w for w in worlds}


def make_sampler(cfg: CorpusConfig, world: World) -> TaskSampler:
    return TaskSampler(world, cfg.tasks_seed, cfg.ood_fraction, cfg.goal_min_plan, cfg.bins)


def sample_pools(cfg: CorpusConfig, world: World) -> dict[str, list[tuple[str, Task]]]:
    """(bin, task) lists per split.  Depends only on structure and seeds, not on the domain."""
    sampler = make_sampler(cfg, world)
    pools: dict[str, list[tuple[str, Task]]] = {s: [] for s in SPLITS}
    for b, pct in zip(BINS, cfg.horizon_mix):
        n = round(cfg.n_pretrain_per_bin * pct / 100)
        if n:
            pools["pretrain"] += [(b, t) for t in sampler.sample("pretrain", b, n, held_out=False, unique=False)]
        if cfg.n_posttrain_per_bin:
            pools["posttrain"] += [(b, t) for t in sampler.sample("posttrain", b, cfg.n_posttrain_per_bin,
                                                                   held_out=False, unique=False)]
    trained, plans = set(), TrainingPlans(sampler.taught)
    for split in ("pretrain", "posttrain"):
        for _, t in pools[split]:
            trained |= sampler.gold_rules(t)
            plans.add(t.goal, sampler.solver.gold_plan(t.goal, dict(t.inventory)))
    train_keys = {t.key for split in ("pretrain", "posttrain") for _, t in pools[split]}
    for b in BINS:
        # short tasks are one to five steps from the goal: few distinct plans exist, so they are
        # only required to be new tasks; mid and long ones must be new to every training plan
        novel = None if b == "short" else plans
        pools["test_id"] += [(b, t) for t in sampler.sample("test_id", b, cfg.n_test_per_bin, held_out=False,
                                                             exclude=train_keys, novel_to=novel)]
        pools["test_ood"] += [(b, t) for t in sampler.sample("test_ood", b, cfg.n_test_per_bin, held_out=True,
                                                              exclude=train_keys, allowed_rules=trained)]
    return pools


def choose_pattern(cfg: CorpusConfig, split: str, rng) -> str:
    """Training rows follow the quality mixture; test rows show an optimal reference."""
    mix = mixture_weights(cfg.patterns)
    if split.startswith("test"):
        mix = {p: w for p, w in mix.items() if p in OPTIMAL} or {"T1": 1.0}
    names = sorted(mix)
    return rng.choices(names, weights=[mix[p] for p in names])[0]


# ----- rendering (runs in worker processes) -----------------------------------------------------------
_WORKER: dict = {}


def _die_with_parent() -> None:
    """Linux: a worker gets SIGTERM when its parent dies, so killing `make data` leaves no orphans."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _init_worker(cfg: CorpusConfig) -> None:
    _die_with_parent()
    _WORKER["cfg"] = cfg
    _WORKER["worlds"] = build_worlds(cfg)
    _WORKER["solvers"] = {d: Solver(w, budget=cfg.max_horizon) for d, w in _WORKER["worlds"].items()}


def _render_chunk(job: tuple[str, int, list[tuple[str, Task]]]) -> list[dict]:
    split, start, items = job
    cfg, rows = _WORKER["cfg"], []
    for offset, (b, task) in enumerate(items):
        i = start + offset
        for d, world in _WORKER["worlds"].items():
            rng = stream(cfg.rows_seed, "row", split, i)      # same pattern and defects in every domain
            pattern = choose_pattern(cfg, split, rng)
            gold = _WORKER["solvers"][d].gold_plan(task.goal, dict(task.inventory))
            row = build_row(world, task, gold, pattern, cfg.cot_format, split,
                            f"{d}-{cfg.recipe}-{split}-{i:07d}", rng, defect_every=cfg.defect_every, bins=cfg.bins)
            verify_row(world, row, _WORKER["solvers"][d], cfg.bins)
            rows.append(row)
    return rows


def render_rows(cfg: CorpusConfig, pools: dict, workers: int = 1, progress: bool = True) -> dict[str, list[dict]]:
    jobs = [(s, k, pools[s][k:k + CHUNK]) for s in SPLITS for k in range(0, len(pools[s]), CHUNK)]
    bar = tqdm(total=sum(len(p) for p in pools.values()) * len(cfg.domains), desc="rows", unit="row",
               disable=not progress)
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    if workers <= 1:
        _init_worker(cfg)
        results = map(_render_chunk, jobs)
    else:
        pool = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(cfg,))
        results = pool.map(_render_chunk, jobs)
    for (split, _, _), rows in zip(jobs, results):
        out[split] += rows
        bar.update(len(rows))
    bar.close()
    if workers > 1:
        pool.shutdown()
    return out


# ----- invariants -----------------------------------------------------------------------------------
def _craft_multiset(world: World, actions) -> tuple:
    return tuple(sorted(Counter(a for a in actions if not a.startswith(world.gather_verb + " ")).items()))


def check_splits(cfg: CorpusConfig, worlds: dict[str, World], rows: dict[str, list[dict]]) -> None:
    """The split contract, checked on the rows themselves:

    * no test task in a training pool; no mid or long ``test_id`` task has a training gold plan
      as its gold plan, or one that runs from its start inventory without an error;
    * every ``test_ood`` task is held out, and no shortest plan of it (up to action order) is
      the gold plan of a training row, while every rule its shortest plans fire is used by one;
    * no training or ``test_id`` task is held out."""
    samplers = {d: make_sampler(cfg, w) for d, w in worlds.items()}
    train_tasks, train_plans, train_multisets, train_actions = set(), set(), set(), set()
    indexes = {d: TrainingPlans(s.taught) for d, s in samplers.items()}
    for split in ("pretrain", "posttrain"):
        for row in rows[split]:
            d, world = row["domain"], worlds[row["domain"]]
            task = task_of_row(world, row)
            indexes[d].add(task.goal, row["gold_actions"])
            if samplers[d].status(task)[0] != "id":
                raise SplitLeakError(f"{row['id']}: a held-out (or ambiguous) task appears in the {split} pool")
            train_tasks.add((d, task.key))
            train_plans.add((d, tuple(row["gold_actions"])))
            train_multisets.add((d, _craft_multiset(world, row["gold_actions"])))
            train_actions |= {(d, a) for a in row["gold_actions"]}
    for split in ("test_id", "test_ood"):
        for row in rows[split]:
            d, world = row["domain"], worlds[row["domain"]]
            task, sampler = task_of_row(world, row), samplers[d]
            if (d, task.key) in train_tasks:
                raise SplitLeakError(f"{row['id']}: a {split} task appears in a training pool")
            if sampler.status(task)[0] != ("ood" if split == "test_ood" else "id"):
                raise SplitLeakError(f"{row['id']}: {split} row with the wrong hold-out status")
            if split == "test_id":
                if row["difficulty"] != "short" and ((d, tuple(row["gold_actions"])) in train_plans
                                                     or indexes[d].covers(task)):
                    raise SplitLeakError(f"{row['id']}: a training gold plan solves this test_id task")
                continue
            taught = sampler.taught
            for alloc in sampler.solver.optimal_allocations(task.goal, dict(task.inventory)):
                fired = [taught.action_text(r) for r, n in alloc for _ in range(n)]
                if (d, _craft_multiset(world, fired)) in train_multisets:
                    raise SplitLeakError(f"{row['id']}: a shortest plan of an OOD task is a training plan")
                if any((d, a) not in train_actions for a in fired):
                    raise SplitLeakError(f"{row['id']}: an OOD plan fires a rule no training row uses")


# ----- export --------------------------------------------------------------------------------------
def statistics(rows: dict[str, list[dict]], max_horizon: int) -> list[dict]:
    """Paper Table 11: number of rows per gold-plan length, per split."""
    table = []
    for h in range(1, max_horizon + 1):
        table.append({"horizon": h, **{s: sum(r["horizon"] == h for r in rows[s]) for s in SPLITS}})
    table.append({"horizon": "total", **{s: len(rows[s]) for s in SPLITS}})
    return table


def stats_markdown(table: list[dict]) -> str:
    lines = ["| steps | " + " | ".join(SPLITS) + " |", "|---" * (len(SPLITS) + 1) + "|"]
    lines += [f"| {r['horizon']} | " + " | ".join(str(r[s]) for s in SPLITS) + " |" for r in table]
    return "\n".join(lines) + "\n"


def dataset_card(cfg: CorpusConfig, table: list[dict], pattern_counts: dict, baselines_md: str) -> str:
    fields = ("id, domain, recipe, split, horizon, difficulty, pattern, cot_format, goal, "
              "initial_inventory ([{item, count}]), actions, gold_actions, success, text")
    configs = "\n".join(f"  - split: {s}\n    path: {s}.jsonl" for s in SPLITS)
    return f"""---
configs:
- config_name: default
  data_files:
{configs}
---
# planning-gym corpus `{cfg.name}`

Generated by `python -m planning_gym.make_data` (planning-gym).  Exact config: `config.json`.
`datasets.load_dataset("<this folder>")` gives the four splits.

- domains: {', '.join(cfg.domains)}; recipe {cfg.recipe} taught in a {cfg.paths}-path world; chain of thought:
  {cfg.cot_format}; pattern mixture: {cfg.patterns}; horizon mix S/M/L = {'/'.join(map(str, cfg.horizon_mix))} %;
  error detail: {cfg.errors}; seed {cfg.seed} (tasks {cfg.tasks_seed}, rows {cfg.rows_seed}).
- splits: `pretrain` (language-model corpus), `posttrain` (RL / distillation prompts), and two test splits:
  - `test_id`: new tasks from the training distribution (goals that need {cfg.goal_min_plan}+ steps from an
    empty inventory, start inventories cut from a production tree); in the mid and long bins, no training
    gold plan replayed blindly from a task's start reaches its goal within the step limit.
  - `test_ood`: a compositional hold-out: a share ({cfg.ood_fraction}) of (goal, intermediate item) pairs is
    reserved (and at least one per goal): training never makes that item on the way to that goal. Every
    shortest plan of an OOD task makes a reserved item, so none is a training plan, and every rule it fires
    is used by some training row.
- files: `<split>.jsonl` and `<split>.parquet` (same rows), `rules_*.json` (the rules every row
  was replayed against), `stats.csv` / `stats.md`.
- row fields: {fields}.
  `actions` are the actions actually taken (suboptimal ones included); `gold_actions` is a
  shortest plan; `text` is the whole multi-turn trajectory with `<|env|>` / `<|agent|>` markers.

## What the test splits measure: baselines and overlap with training

A split measures planning only if agents that do not plan score low on it.
{baselines_md.split(chr(10), 2)[2]}
## Rows per gold-plan length (paper Table 11 form)

{stats_markdown(table)}
## Rows per planning pattern

{json.dumps(pattern_counts, indent=1, sort_keys=True)}
"""


def _remove_stale_tmp(out_dir: Path) -> None:
    """Delete ``.tmp-<name>-<pid>`` folders left by killed writers (their process is gone)."""
    for tmp in out_dir.parent.glob(f".tmp-{out_dir.name}-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_corpus(cfg: CorpusConfig, out_dir: Path, workers: int = 1, progress: bool = True) -> dict:
    """Generate the corpus into ``out_dir`` atomically.  Returns the statistics table."""
    import datasets   # heavy import, only needed here
    datasets.disable_progress_bars()

    worlds = build_worlds(cfg)
    pools = sample_pools(cfg, next(iter(worlds.values())))
    rows = render_rows(cfg, pools, workers, progress)
    check_splits(cfg, worlds, rows)
    table = statistics(rows, cfg.max_horizon)

    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
    _remove_stale_tmp(out_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for d, world in worlds.items():
            fname = f"rules_{cfg.recipe}.json" if len(worlds) == 1 else f"rules_{d}_{cfg.recipe}.json"
            (tmp / fname).write_text(json.dumps(world.to_rules_json(), indent=1) + "\n")
        for split in SPLITS:
            with open(tmp / f"{split}.jsonl", "w") as f:
                for row in rows[split]:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            if rows[split]:
                datasets.Dataset.from_list(rows[split]).to_parquet(str(tmp / f"{split}.parquet"))
        (tmp / "config.json").write_text(json.dumps({**cfg.to_dict(), "generator": code_fingerprint()}, indent=1) + "\n")
        with open(tmp / "stats.csv", "w") as f:
            f.write("horizon," + ",".join(SPLITS) + "\n")
            f.writelines(f"{r['horizon']}," + ",".join(str(r[s]) for s in SPLITS) + "\n" for r in table)
        from .baselines import baselines_markdown, run_baselines    # reads the files just written
        baselines = run_baselines(tmp)
        baselines["corpus"] = cfg.name
        del baselines["seconds"]                                   # the files stay byte-identical
        baselines_md = baselines_markdown(baselines)
        (tmp / "baselines.json").write_text(json.dumps(baselines, indent=1) + "\n")
        (tmp / "stats.md").write_text(stats_markdown(table) + "\n" + baselines_md)
        pattern_counts = {s: {} for s in SPLITS}
        for s in SPLITS:
            for r in rows[s]:
                pattern_counts[s][r["pattern"]] = pattern_counts[s].get(r["pattern"], 0) + 1
        (tmp / "README.md").write_text(dataset_card(cfg, table, pattern_counts, baselines_md))
        write_manifest(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir, ignore_errors=True)
        try:
            tmp.rename(out_dir)
        except OSError:     # a concurrent writer of the same config got there first: same bytes, keep theirs
            if not (out_dir / MANIFEST).is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"table": table, "rows": {s: len(rows[s]) for s in SPLITS}, "baselines": baselines}


def load_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ----- reading a corpus folder (evaluation, baselines, post-training) -------------------------------------
class CorpusError(UsageError, ValueError):
    """A corpus folder that is missing, incomplete or corrupt."""


MANIFEST = "manifest.json"
MANIFEST_FILES = ("config.json", *(f"{s}.jsonl" for s in SPLITS))


def _file_record(path: Path) -> dict:
    import hashlib
    h, rows = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            rows += chunk.count(b"\n")
    return {"sha256": h.hexdigest(), "rows": rows}


def _manifest_text(folder: Path) -> str:
    files = {name: _file_record(Path(folder) / name) for name in MANIFEST_FILES if (Path(folder) / name).is_file()}
    return json.dumps({"files": files}, indent=1) + "\n"


def write_manifest(folder: Path) -> None:
    """``manifest.json``: row count and SHA-256 of the config and every split, so a reader can tell
    a complete corpus from a truncated or edited one."""
    (Path(folder) / MANIFEST).write_text(_manifest_text(folder))


def verify_corpus(folder: Path) -> str:
    """The corpus digest after checking the files against ``manifest.json``; CorpusError names the
    first file that is missing, truncated or changed. The digest hashes the splits' hashes -- the
    rows a model sees -- and not ``config.json``, so a corpus regenerated byte-identically by newer
    generator code (its fingerprint in config.json changed) is still the corpus a run was trained
    on. A hand-made corpus without a manifest cannot be checked, but still gets a digest, so a run
    that records it notices later changes."""
    return _checked_digests(Path(folder))[0]


def corpus_digests(folder: Path) -> set[str]:
    """Every digest a run may have recorded for this corpus: `verify_corpus`'s, and the one runs
    recorded before 2026-12-06, which also hashed config.json (and so its generator fingerprint)."""
    return set(_checked_digests(Path(folder)))


def _checked_digests(folder: Path) -> tuple[str, str]:
    """(rows digest, pre-2026-12-06 digest) from one read of the files, after checking them."""
    import hashlib
    text = _manifest_text(folder)
    try:
        want = json.loads((folder / MANIFEST).read_text())["files"]
    except FileNotFoundError:
        want = None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorpusError(f"corrupt {folder / MANIFEST}: {exc}") from None
    got = json.loads(text)["files"]
    for name, record in (want or {}).items():
        if name not in got:
            raise CorpusError(f"corpus {folder} lacks {name}")
        if got[name] != record:
            raise CorpusError(f"corpus {folder}: {name} does not match its manifest ({got[name]['rows']} rows, "
                              f"manifest {record['rows']}; changed or truncated): regenerate it with `make data`")
    rows = {name: record for name, record in got.items() if name != "config.json"}
    return (hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16],
            hashlib.sha256(text.encode()).hexdigest()[:16])


def read_worlds(corpus_dir) -> dict[tuple[str, str], World]:
    """Every ``rules_*.json`` of a corpus as ``{(domain, recipe): World}``."""
    corpus_dir = Path(corpus_dir)
    if not corpus_dir.is_dir():
        raise CorpusError(f"corpus folder {corpus_dir} does not exist")
    worlds = {}
    for path in sorted(corpus_dir.glob("rules_*.json")):
        try:
            world = World.from_rules_json(json.loads(path.read_text()))
        except Exception as exc:
            raise CorpusError(f"corrupt rules file {path}: {type(exc).__name__}: {exc}") from None
        worlds[(world.domain, world.recipe)] = world
    if not worlds:
        raise CorpusError(f"{corpus_dir} is not a planning-gym corpus (no rules_*.json)")
    return worlds


def read_split(corpus_dir, split: str, required: bool = True) -> list[dict]:
    """The rows of ``<split>.jsonl`` (none when the file is absent and not ``required``)."""
    path = Path(corpus_dir) / f"{split}.jsonl"
    if not path.is_file():
        if required:
            raise CorpusError(f"corpus {corpus_dir} has no {split}.jsonl")
        return []
    try:
        return load_rows(path)
    except (OSError, ValueError) as exc:
        raise CorpusError(f"cannot read {path}: {exc}") from None


def row_task(worlds: dict, row: dict) -> tuple[World, Task]:
    """The (world, task) of a corpus row, from the worlds `read_worlds` returned."""
    from .trajectory import RowError
    world = worlds.get((row.get("domain"), row.get("recipe")))
    if world is None:
        raise CorpusError(f"row {row.get('id')}: no rules for domain {row.get('domain')!r} recipe {row.get('recipe')!r}")
    try:
        return world, task_of_row(world, row)
    except RowError as exc:
        raise CorpusError(str(exc)) from None


def task_key(row: dict) -> str:
    """What a row's task *is* (domain, goal, starting inventory), as a short hash. A row's ``id`` is
    its position in its split, and corpora of different horizon mixtures draw different mid and long
    test tasks, so only this key says whether two evaluations ran the same task."""
    what = json.dumps([row["domain"], row["goal"], row["initial_inventory"]], sort_keys=True)
    return hashlib.sha1(what.encode()).hexdigest()[:16]


def select_rows(rows: list[dict], max_per_cell: int | None, difficulties=None) -> list[dict]:
    """The first ``max_per_cell`` rows of each (domain, difficulty) cell, in file order (only the
    ``difficulties`` bins when given): the one selection models and baselines are scored on."""
    if difficulties is not None:
        rows = [r for r in rows if r.get("difficulty") in difficulties]
    if max_per_cell is None:
        return list(rows)
    seen: dict[tuple, int] = {}
    out = []
    for r in rows:
        key = (r.get("domain"), r.get("difficulty"))
        if seen.get(key, 0) < max_per_cell:
            seen[key] = seen.get(key, 0) + 1
            out.append(r)
    return out
