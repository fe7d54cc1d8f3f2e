"""Corpus generation: pools, rows, checks and export.

Order of work (each step is deterministic given the config):
  1. build one world per domain (same abstract graph, different names and verbs);
  2. draw the test tasks first (``test_ood`` from held-out combinations, ``test_id`` from the
     rest), then the training pools with every test task and held-out combination excluded;
  3. render every row (pattern, chain of thought) and replay it through the environment —
     rows are independent, so this runs in several processes with identical output;
  4. assert the split invariants, then write rules, JSONL, Parquet, statistics and a card into
     a temporary folder that is renamed into place only when everything succeeded.
"""
from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tqdm import tqdm

from .config import SPLITS, CorpusConfig
from .env import Task
from .patterns import OPTIMAL, mixture_weights
from .rng import stream
from .solver import Solver
from .tasks import BINS, MAX_HORIZON, TaskSampler, is_held_out
from .trajectory import build_row, task_of_row, verify_row
from .world import World

CHUNK = 256


class SplitLeakError(AssertionError):
    """A test task or held-out combination found its way into a training pool."""


def code_fingerprint() -> str:
    """Hash of the generator's own source and domain files: a corpus is reused only if both its
    config and the code that wrote it are unchanged."""
    import hashlib
    root = Path(__file__).parent
    h = hashlib.sha256()
    for f in sorted([*root.glob("*.py"), *root.glob("domains/*.json")]):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def build_worlds(cfg: CorpusConfig) -> dict[str, World]:
    return {d: World.build(d, cfg.graph, cfg.seed, cfg.recipe) for d in cfg.domains}


def sample_pools(cfg: CorpusConfig, world: World) -> dict[str, list[tuple[str, Task]]]:
    """(bin, task) lists per split.  Depends only on structure and seed, not on the domain."""
    sampler = TaskSampler(world, cfg.seed, cfg.ood_fraction)
    pools: dict[str, list[tuple[str, Task]]] = {s: [] for s in SPLITS}
    for b in BINS:
        pools["test_ood"] += [(b, t) for t in sampler.sample("test_ood", b, cfg.n_test_per_bin, held_out=True)]
        pools["test_id"] += [(b, t) for t in sampler.sample("test_id", b, cfg.n_test_per_bin, held_out=False)]
    test_keys = {t.key for s in ("test_id", "test_ood") for _, t in pools[s]}
    for b, pct in zip(BINS, cfg.horizon_mix):
        n = round(cfg.n_pretrain_per_bin * pct / 100)
        if n:
            pools["pretrain"] += [(b, t) for t in sampler.sample("pretrain", b, n, held_out=False,
                                                                  exclude=test_keys, unique=False)]
        if cfg.n_posttrain_per_bin:
            pools["posttrain"] += [(b, t) for t in sampler.sample("posttrain", b, cfg.n_posttrain_per_bin,
                                                                   held_out=False, exclude=test_keys, unique=False)]
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


def _init_worker(cfg: CorpusConfig) -> None:
    _WORKER["cfg"] = cfg
    _WORKER["worlds"] = build_worlds(cfg)
    _WORKER["solvers"] = {d: Solver(w, budget=MAX_HORIZON) for d, w in _WORKER["worlds"].items()}


def _render_chunk(job: tuple[str, int, list[tuple[str, Task]]]) -> list[dict]:
    split, start, items = job
    cfg, rows = _WORKER["cfg"], []
    for offset, (b, task) in enumerate(items):
        i = start + offset
        for d, world in _WORKER["worlds"].items():
            rng = stream(cfg.seed, "row", split, i)      # same pattern and defects in every domain
            pattern = choose_pattern(cfg, split, rng)
            gold = _WORKER["solvers"][d].gold_plan(task.goal, dict(task.inventory))
            row = build_row(world, task, gold, pattern, cfg.cot_format, split,
                            f"{d}-{cfg.recipe}-{split}-{i:07d}", rng)
            verify_row(world, row, _WORKER["solvers"][d])
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
def check_splits(cfg: CorpusConfig, worlds: dict[str, World], rows: dict[str, list[dict]]) -> None:
    """No test task and no held-out combination in a training pool; OOD rows are all held out."""
    test_keys = set()
    for split in ("test_id", "test_ood"):
        for row in rows[split]:
            task = task_of_row(worlds[row["domain"]], row)
            if is_held_out(task, cfg.seed, cfg.ood_fraction) != (split == "test_ood"):
                raise SplitLeakError(f"{row['id']}: {split} row with the wrong hold-out status")
            test_keys.add((row["domain"], task.key))
    for split in ("pretrain", "posttrain"):
        for row in rows[split]:
            task = task_of_row(worlds[row["domain"]], row)
            if (row["domain"], task.key) in test_keys:
                raise SplitLeakError(f"{row['id']}: a test task appears in the {split} pool")
            if is_held_out(task, cfg.seed, cfg.ood_fraction):
                raise SplitLeakError(f"{row['id']}: a held-out combination appears in the {split} pool")


# ----- export --------------------------------------------------------------------------------------
def statistics(rows: dict[str, list[dict]]) -> list[dict]:
    """Paper Table 11: number of rows per gold-plan length, per split."""
    table = []
    for h in range(1, MAX_HORIZON + 1):
        table.append({"horizon": h, **{s: sum(r["horizon"] == h for r in rows[s]) for s in SPLITS}})
    table.append({"horizon": "total", **{s: len(rows[s]) for s in SPLITS}})
    return table


def stats_markdown(table: list[dict]) -> str:
    lines = ["| steps | " + " | ".join(SPLITS) + " |", "|---" * (len(SPLITS) + 1) + "|"]
    lines += [f"| {r['horizon']} | " + " | ".join(str(r[s]) for s in SPLITS) + " |" for r in table]
    return "\n".join(lines) + "\n"


def dataset_card(cfg: CorpusConfig, table: list[dict], pattern_counts: dict) -> str:
    fields = ("id, domain, recipe, split, horizon, difficulty, pattern, cot_format, goal, "
              "initial_inventory ([{item, count}]), actions, gold_actions, success, text")
    return f"""# planning-gym corpus `{cfg.name}`

Generated by `python -m planning_gym.make_data` (planning-gym).  Exact config: `config.json`.

- domains: {', '.join(cfg.domains)}; recipe {cfg.recipe}; chain of thought: {cfg.cot_format};
  pattern mixture: {cfg.patterns}; horizon mix S/M/L = {'/'.join(map(str, cfg.horizon_mix))} %; seed {cfg.seed}.
- splits: `pretrain` (language-model corpus), `posttrain` (RL / distillation prompts),
  `test_id`, `test_ood` (held-out goal/inventory combinations; never in a training pool).
- files: `<split>.jsonl` and `<split>.parquet` (same rows), `rules_*.json` (the rules every row
  was replayed against), `stats.csv` / `stats.md`.
- row fields: {fields}.
  `actions` are the actions actually taken (suboptimal ones included); `gold_actions` is a
  shortest plan; `text` is the whole multi-turn trajectory with `<|env|>` / `<|agent|>` markers.

## Rows per gold-plan length (paper Table 11 form)

{stats_markdown(table)}
## Rows per planning pattern

{json.dumps(pattern_counts, indent=1, sort_keys=True)}
"""


def write_corpus(cfg: CorpusConfig, out_dir: Path, workers: int = 1, progress: bool = True) -> dict:
    """Generate the corpus into ``out_dir`` atomically.  Returns the statistics table."""
    import datasets   # heavy import, only needed here
    datasets.disable_progress_bars()

    worlds = build_worlds(cfg)
    pools = sample_pools(cfg, next(iter(worlds.values())))
    rows = render_rows(cfg, pools, workers, progress)
    check_splits(cfg, worlds, rows)
    table = statistics(rows)

    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".tmp-{out_dir.name}-{os.getpid()}"
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
        (tmp / "stats.md").write_text(stats_markdown(table))
        pattern_counts = {s: {} for s in SPLITS}
        for s in SPLITS:
            for r in rows[s]:
                pattern_counts[s][r["pattern"]] = pattern_counts[s].get(r["pattern"], 0) + 1
        (tmp / "README.md").write_text(dataset_card(cfg, table, pattern_counts))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"table": table, "rows": {s: len(rows[s]) for s in SPLITS}}


def load_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
