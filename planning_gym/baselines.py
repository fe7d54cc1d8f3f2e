"""Knowledge-free and recall baselines: the yardstick printed beside every model score.

Why this exists: a test split measures planning only if agents that cannot plan score low on it.
Two kinds of such agents are scripted here and played through `planning_gym.env.PlanningEnv`
on a corpus's test rows, with the evaluation's step limit (20):

* *knowledge-free* agents, which know the world's vocabulary but no plans:
  ``always-gather``, ``random-valid``, ``error-reader`` (and ``error-reader+verbs``);
* *recall* agents, which know the training rows but never plan: ``recall-nearest``,
  ``recall-cascade``, ``recall-any`` (an oracle upper bound on one-plan recall) and
  ``from-empty`` (one memorised plan per goal);
* ``solver``, the exact shortest plan from the true start: a check, it must score 100.

A model's avg@8 on a split means little unless it is well above these rows on that split.
`overlap` adds corpus statistics: the share of test rows whose gold plan occurs verbatim as a
training row's gold plan (same domain and recipe), whose goal occurs as a training goal, and
whose whole task (goal and initial inventory) does (0 by construction).

Definitions (exact; the tests pin them):

``always-gather``       gathers the world's base items round-robin (world index order, starting
                        with the first), never crafts.  A floor: it succeeds only on base goals
                        (those it reaches within the step limit).
``random-valid``        each turn, a uniformly random action among those valid in the current
                        state (every gather of a base item, every ``<verb> <item>`` with a rule
                        whose inputs are held); K samples per task (sample s of row R draws from
                        ``random.Random(f"random-valid:{seed}:{R}:{s}")``), scored as avg@K (mean
                        success) and pass@K (any success).
``recall-nearest``      never reads the state after the first observation: takes the training
                        row with the same goal (same domain and recipe) whose initial inventory
                        is most similar to the test task's, and replays its ``gold_actions``
                        blindly (invalid actions cost a turn and change nothing, as for any
                        agent).  Similarity of test inventory A and training inventory B (as
                        multisets): ``|A & B| - |B - A|``; ties: shorter gold plan, then earlier
                        row (``pretrain.jsonl`` rows, then ``posttrain.jsonl`` rows, file order).
                        No training row with the goal: fail.
``recall-cascade``      the same ranking, but the plans are replayed back to back, blindly, until
                        the step limit: what a model that retries remembered plans scores (the
                        strongest non-planning agent an audit found on ``test_id`` mid).
``recall-any``          oracle: success if ANY training row with the same goal has a gold plan
                        that reaches the goal when replayed blindly on the test task.  An upper
                        bound on what replaying one remembered plan could score.
``from-empty``          replays ``Solver(world, budget=200).gold_plan(goal, {})`` (the shortest
                        plan from an empty inventory: one memorised plan per goal), ignoring the
                        start inventory.  A goal whose from-empty lower bound exceeds the step
                        limit fails without the search (exact: the plan's last action makes it).
``error-reader``        knows item names, verbs and which items are base, but no rules.  Keeps a
                        stack of items to make, starting with the goal: a base item is gathered;
                        a crafted item is tried with the craft verbs in sorted order.  An error
                        that names the missing inputs (``cannot V X: missing A x2, B x1``, read
                        by the word ``missing`` and the ``Name xN`` list) keeps V as X's verb and
                        pushes the missing units (crafted ones first, then base ones, each in
                        the order listed); a success pops one unit; any other error (``no rule
                        to V X``, or the terse ``missing inputs``) moves X on to its next verb;
                        when X's verbs run out it gives up (fail).
``error-reader+verbs``  the same, but it knows each crafted item's verb (that of the item's first
                        rule) and tries only that one.
``solver``              replays ``Solver(world, budget=step_limit).gold_plan`` from the true
                        start inventory.

Deterministic baselines report avg@K = pass@K = their success rate.  Scores are percentages.

    python -m planning_gym.baselines --data data/fa-small [--step-limit 20] [--k 8]
        [--max-tasks-per-cell N] [--splits ID,OOD] [--difficulties short,mid,long] [--out DIR]

prints the table and writes ``baselines.md`` and ``baselines.json`` into ``--out`` (default:
the corpus folder).  Bad input: one ``error:`` line on stderr, exit status 2.
"""
from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .cli import Parser, entry
from .constants import DIFFICULTIES
from .corpus import CorpusError, read_split as load_rows, read_worlds as load_worlds, row_task, select_rows
from .env import EVAL_STEP_LIMIT, PlanningEnv, Task, apply_action
from .solver import Solver
from .world import World

SPLIT_FILES = {"test_id": "ID", "test_ood": "OOD"}
TRAIN_FILES = ("pretrain", "posttrain")
BASELINES = ("always-gather", "random-valid", "recall-nearest", "recall-cascade", "recall-any", "from-empty",
             "error-reader", "error-reader+verbs", "solver")
RANDOMISED = ("random-valid",)
FROM_EMPTY_BUDGET = 200

EnvFactory = Callable[[World, int], PlanningEnv]


class BaselineError(CorpusError):
    """Bad input: a missing corpus, a malformed file, an unknown split or difficulty."""


def default_env(world: World, step_limit: int) -> PlanningEnv:
    return PlanningEnv(world, max_steps=step_limit)


# ----- playing one episode --------------------------------------------------------------------------
def _result_line(obs: str) -> str:
    first = obs.split("\n", 1)[0]
    return first[len("Result: "):] if first.startswith("Result: ") else first


def replay(world: World, task: Task, actions: Sequence[str], step_limit: int = EVAL_STEP_LIMIT,
           env_factory: EnvFactory = default_env) -> bool:
    """Play ``actions`` blindly (errors ignored) through the environment; True if the goal is held
    within the step limit.  A plan that ends early ends the episode (fail unless the goal is held)."""
    env = env_factory(world, step_limit)
    env.reset(options={"task": task})
    if env.success:
        return True
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated:
            return True
        if truncated:
            return False
    return False


def replay_fast(world: World, task: Task, actions: Sequence[str], step_limit: int = EVAL_STEP_LIMIT) -> bool:
    """`replay` with the environment's transition function alone (no observation text): used by
    the recall-any oracle to test many plans; its chosen plan is re-played through the env."""
    inv = dict(task.inventory)
    if inv.get(task.goal, 0) >= 1:
        return True
    for action in actions[:step_limit]:
        apply_action(world, inv, action)
        if inv.get(task.goal, 0) >= 1:
            return True
    return False


def play_always_gather(world: World, task: Task, step_limit: int = EVAL_STEP_LIMIT,
                       env_factory: EnvFactory = default_env) -> bool:
    base = [i for i in range(world.n_items) if world.is_base(i)]
    actions = [world.action_text(("gather", base[t % len(base)])) for t in range(step_limit)] if base else []
    return replay(world, task, actions, step_limit, env_factory)


class _ValidActions:
    """The actions valid in an inventory, from the rules: every gather, and every craft action with
    a rule whose inputs are held (rules indexed by their first input, so a check is cheap)."""

    def __init__(self, world: World):
        self.world = world
        self.gathers = sorted(world.action_text(("gather", i)) for i in range(world.n_items) if world.is_base(i))
        self.by_first: dict[int, list[tuple[str, tuple]]] = {}
        for r, rule in enumerate(world.rules):
            if rule.inputs:
                self.by_first.setdefault(rule.inputs[0][0], []).append((world.action_text(r), rule.inputs))
        self.free = sorted({world.action_text(r) for r, rule in enumerate(world.rules) if not rule.inputs})

    def __call__(self, inv: dict[int, int]) -> list[str]:
        crafts = set(self.free)
        for item in inv:
            for text, inputs in self.by_first.get(item, ()):
                if text not in crafts and all(inv.get(i, 0) >= c for i, c in inputs):
                    crafts.add(text)
        return self.gathers + sorted(crafts)


def play_random_valid(world: World, task: Task, step_limit: int = EVAL_STEP_LIMIT, rng: random.Random | None = None,
                      env_factory: EnvFactory = default_env, valid: _ValidActions | None = None) -> bool:
    rng = rng or random.Random(0)
    valid = valid or _ValidActions(world)
    env = env_factory(world, step_limit)
    env.reset(options={"task": task})
    if env.success:
        return True
    while True:
        options = valid(env.inventory)
        _, _, terminated, truncated, _ = env.step(rng.choice(options))
        if terminated:
            return True
        if truncated:
            return False


_MISSING = re.compile(r"\bmissing\b(.*)$")
_UNITS = re.compile(r"^\s*(.+?)\s+x(\d+)\s*$")


def parse_missing(world: World, result: str) -> list[tuple[int, int]] | None:
    """``[(item, units), ...]`` of an error that lists missing inputs (``... missing A x2, B x1``),
    or None when the text lists none (``... missing inputs``, ``no rule to ...``, anything else)."""
    m = _MISSING.search(result)
    if not m:
        return None
    out = []
    for part in m.group(1).split(","):
        unit = _UNITS.match(part)
        if not unit or unit.group(1).strip() not in world.index or int(unit.group(2)) < 1:
            return None
        out.append((world.index[unit.group(1).strip()], int(unit.group(2))))
    return out or None


def play_error_reader(world: World, task: Task, step_limit: int = EVAL_STEP_LIMIT, know_verbs: bool = False,
                      env_factory: EnvFactory = default_env) -> bool:
    """The recipe-free error-reading script (see the module docstring)."""
    craft_verbs = [v for v in world.verbs if v != world.gather_verb]     # world.verbs is sorted

    def verbs_of(item: int) -> list[str]:
        if know_verbs:
            rules = world.rules_of.get(item)
            return [world.rules[rules[0]].verb] if rules else []
        return craft_verbs

    env = env_factory(world, step_limit)
    env.reset(options={"task": task})
    if env.success:
        return True
    stack = [task.goal]
    tried: dict[int, int] = {}          # item -> index of its current verb (kept while it works or explains)
    while stack:
        item = stack[-1]
        if world.is_base(item):
            verb = world.gather_verb
        else:
            choices = verbs_of(item)
            if tried.get(item, 0) >= len(choices):
                return False            # nothing left to try for this item: give up
            verb = choices[tried.get(item, 0)]
        obs, _, terminated, truncated, _ = env.step(f"{verb} {world.names[item]}")
        if terminated:
            return True
        if truncated:
            return False
        result = _result_line(obs)
        if not result.startswith("Error"):
            stack.pop()                 # one unit made
            continue
        if world.is_base(item):
            return False                # a gather that fails: nothing to go on
        missing = parse_missing(world, result)
        if missing is None:             # no rule, or inputs missing but not named: next verb
            tried[item] = tried.get(item, 0) + 1
            continue
        # make crafted inputs first (they may consume base units), in the order the error lists them
        todo = [i for i, n in missing if not world.is_base(i) for _ in range(n)]
        todo += [i for i, n in missing if world.is_base(i) for _ in range(n)]
        stack.extend(reversed(todo))
    return False


# ----- the training index -----------------------------------------------------------------------------
class TrainingIndex:
    """Training rows per (domain, recipe, goal name): candidate inventories for recall-nearest and
    the distinct gold plans for recall-any, built once."""

    def __init__(self, rows: Iterable[dict]):
        # best[(domain, recipe, goal)][inventory key] = (plan length, row order, plan)
        best: dict[tuple, dict[tuple, tuple]] = {}
        plans: dict[tuple, set] = {}
        self.n_rows = 0
        for order, row in enumerate(rows):
            self.n_rows += 1
            key = (row["domain"], row["recipe"], row["goal"])
            inv = tuple(sorted(Counter({e["item"]: int(e["count"]) for e in row["initial_inventory"]}).items()))
            plan = tuple(row["gold_actions"])
            cand = (len(plan), order, plan)
            slot = best.setdefault(key, {})
            if inv not in slot or cand < slot[inv]:
                slot[inv] = cand
            plans.setdefault(key, set()).add(plan)
        self.candidates = {key: [(dict(inv), *cand) for inv, cand in slot.items()] for key, slot in best.items()}
        self.plans = {key: sorted(ps, key=lambda p: (len(p), p)) for key, ps in plans.items()}

    def ranked(self, domain: str, recipe: str, goal: str, inventory: dict[str, int]) -> list[tuple[str, ...]]:
        """The gold plans of the training rows with this goal, most similar inventory first."""
        cands = sorted(self.candidates.get((domain, recipe, goal), ()),
                       key=lambda c: (-similarity(inventory, c[0]), c[1], c[2]))
        return [plan for _, _, _, plan in cands]

    def nearest(self, domain: str, recipe: str, goal: str, inventory: dict[str, int]) -> tuple[str, ...] | None:
        """The gold plan of the most similar training row with this goal, or None."""
        best_key, best_plan = None, None
        for inv, length, order, plan in self.candidates.get((domain, recipe, goal), ()):
            k = (-similarity(inventory, inv), length, order)
            if best_key is None or k < best_key:
                best_key, best_plan = k, plan
        return best_plan

    def goal_plans(self, domain: str, recipe: str, goal: str) -> list[tuple[str, ...]]:
        return self.plans.get((domain, recipe, goal), [])


def similarity(test_inv: dict, train_inv: dict) -> int:
    """``|A & B| - |B - A|`` for multisets A (the test inventory) and B (the training one)."""
    inter = sum(min(c, test_inv.get(i, 0)) for i, c in train_inv.items())
    extra = sum(max(0, c - test_inv.get(i, 0)) for i, c in train_inv.items())
    return inter - extra


# ----- corpus input -------------------------------------------------------------------------------------
def training_rows(corpus_dir: Path) -> list[dict]:
    """``pretrain.jsonl`` then ``posttrain.jsonl`` rows (file order; a missing file holds none)."""
    return [r for split in TRAIN_FILES for r in load_rows(corpus_dir, split, required=False)]


def _split_names(splits: Sequence[str]) -> list[str]:
    """Split names as ID / OOD (``test_id`` / ``test_ood`` accepted), in that order."""
    names = {v: v for v in SPLIT_FILES.values()} | {k: v for k, v in SPLIT_FILES.items()}
    bad = [s for s in splits if s not in names]
    if bad or not splits:
        raise BaselineError(f"unknown split(s) {', '.join(bad) or '(none given)'}; choose from ID, OOD")
    chosen = {names[s] for s in splits}
    return [v for v in SPLIT_FILES.values() if v in chosen]


def _difficulties(difficulties: Sequence[str] | None) -> list[str] | None:
    if difficulties is None:
        return None
    bad = sorted(set(difficulties) - set(DIFFICULTIES))
    if bad or not difficulties:
        raise BaselineError(f"unknown difficulty {', '.join(bad) or '(none given)'}; choose from {', '.join(DIFFICULTIES)}")
    chosen = [d for d in DIFFICULTIES if d in difficulties]
    return None if len(chosen) == len(DIFFICULTIES) else chosen


_task = row_task


# ----- running the baselines ------------------------------------------------------------------------------
class _WorldTools:
    def __init__(self, world: World, step_limit: int):
        self.valid = _ValidActions(world)
        self.solver = Solver(world, budget=step_limit)
        self.empty_solver = Solver(world, budget=FROM_EMPTY_BUDGET)
        self.from_empty: dict[int, list[str] | None] = {}

    def empty_plan(self, goal: int, step_limit: int) -> list[str] | None:
        """The from-empty plan, or None when even its lower bound exceeds the step limit (its last
        action makes the goal, so such a plan cannot succeed in time: skipping the search is exact)."""
        if self.empty_solver.lower_bound(goal, {}) > step_limit:
            return None
        if goal not in self.from_empty:
            self.from_empty[goal] = self.empty_solver.gold_plan(goal, {})
        return self.from_empty[goal]


def baseline_outcomes(worlds: dict, index: TrainingIndex, rows: Sequence[tuple[str, dict]], *,
                      step_limit: int = EVAL_STEP_LIMIT, k: int = 8, seed: int = 0,
                      baselines: Sequence[str] = BASELINES, env_factory: EnvFactory = default_env) -> list[dict]:
    """One outcome per (baseline, task, sample): ``rows`` are ``(split name, corpus row)`` pairs."""
    tools: dict[tuple, _WorldTools] = {}
    any_cache: dict[tuple, bool] = {}
    out = []
    for n, (split, row) in enumerate(rows):
        world, task = _task(worlds, row)
        rid = row.get("id", f"#{n}")
        wk = (world.domain, world.recipe)
        if wk not in tools:
            tools[wk] = _WorldTools(world, step_limit)
        tool = tools[wk]
        base = {"domain": row["domain"], "split": split, "difficulty": row["difficulty"], "task": rid}
        inv_names = {world.names[i]: c for i, c in task.inventory}
        for name in baselines:
            if name == "random-valid":
                for s in range(k):
                    rng = random.Random(f"random-valid:{seed}:{rid}:{s}")
                    ok = play_random_valid(world, task, step_limit, rng, env_factory, tool.valid)
                    out.append({**base, "baseline": name, "sample": s, "success": ok})
                continue
            if name == "always-gather":
                ok = play_always_gather(world, task, step_limit, env_factory)
            elif name == "recall-nearest":
                plan = index.nearest(row["domain"], row["recipe"], row["goal"], inv_names)
                ok = replay(world, task, plan or (), step_limit, env_factory)
            elif name == "recall-cascade":     # the nearest plans back to back, blind, until the limit
                plans = index.ranked(row["domain"], row["recipe"], row["goal"], inv_names)
                ok = replay(world, task, [a for p in plans for a in p][:step_limit], step_limit, env_factory)
            elif name == "recall-any":
                key = (wk, task.key)
                if key not in any_cache:
                    found = next((p for p in index.goal_plans(row["domain"], row["recipe"], row["goal"])
                                  if replay_fast(world, task, p, step_limit)), None)
                    any_cache[key] = replay(world, task, found or (), step_limit, env_factory)
                ok = any_cache[key]
            elif name == "from-empty":
                plan = tool.empty_plan(task.goal, step_limit)
                ok = replay(world, task, plan or (), step_limit, env_factory)
            elif name == "error-reader":
                ok = play_error_reader(world, task, step_limit, False, env_factory)
            elif name == "error-reader+verbs":
                ok = play_error_reader(world, task, step_limit, True, env_factory)
            elif name == "solver":
                plan = tool.solver.gold_plan(task.goal, dict(task.inventory))
                ok = replay(world, task, plan or (), step_limit, env_factory)
            else:
                raise BaselineError(f"unknown baseline '{name}' (known: {', '.join(BASELINES)})")
            out.append({**base, "baseline": name, "sample": 0, "success": bool(ok)})
    return out


def score(outcomes: list[dict], k: int) -> list[dict]:
    """Rows ``{domain, split, difficulty, baseline, tasks, avg@k, pass@k}`` per cell, with an ``all``
    difficulty per (domain, split) and, when there are several domains, a ``*`` domain."""
    by_task: dict[tuple, list[bool]] = {}
    for o in outcomes:
        by_task.setdefault((o["baseline"], o["domain"], o["split"], o["difficulty"], o["task"]), []).append(o["success"])
    domains = {o["domain"] for o in outcomes}
    cells: dict[tuple, list[list[bool]]] = {}
    for (name, domain, split, diff, _), samples in by_task.items():
        for d in ([domain, "*"] if len(domains) > 1 else [domain]):
            cells.setdefault((d, split, diff, name), []).append(samples)
            cells.setdefault((d, split, "all", name), []).append(samples)
    order_d = {d: i for i, d in enumerate((*DIFFICULTIES, "all"))}
    order_s = {s: i for i, s in enumerate(SPLIT_FILES.values())}
    order_b = {b: i for i, b in enumerate(BASELINES)}
    rows = []
    for (domain, split, diff, name) in sorted(cells, key=lambda c: (c[0] == "*", c[0], order_s.get(c[1], 9),
                                                                     order_d.get(c[2], 9), order_b.get(c[3], 99))):
        tasks = cells[(domain, split, diff, name)]
        rows.append({"domain": domain, "split": split, "difficulty": diff, "baseline": name, "tasks": len(tasks),
                     f"avg@{k}": 100.0 * sum(sum(s) / len(s) for s in tasks) / len(tasks),
                     f"pass@{k}": 100.0 * sum(any(s) for s in tasks) / len(tasks)})
    return rows


def baseline_rows(corpus_dir, worlds: dict, rows: Sequence[tuple[str, dict]], *, step_limit: int = EVAL_STEP_LIMIT,
                  k: int = 8, seed: int = 0) -> list[dict]:
    """`score` rows of every baseline on exactly these ``(split name, row)`` pairs (what
    `engine.evaluate` selected), with the corpus's training rows as the recall memory."""
    index = TrainingIndex(training_rows(corpus_dir))
    return score(baseline_outcomes(worlds, index, rows, step_limit=step_limit, k=k, seed=seed), k)


def run_baselines(corpus_dir, splits: Sequence[str] = ("ID", "OOD"), step_limit: int = EVAL_STEP_LIMIT, k: int = 8,
                  max_tasks_per_cell: int | None = None, difficulties: Sequence[str] | None = None, seed: int = 0,
                  env_factory: EnvFactory = default_env) -> dict:
    """Every baseline on the corpus's selected test tasks; also the corpus's `overlap`."""
    if step_limit < 1 or k < 1 or (max_tasks_per_cell is not None and max_tasks_per_cell < 1):
        raise BaselineError("step limit, k and max tasks per cell must be at least 1")
    t0 = time.time()
    corpus_dir = Path(corpus_dir)
    names = _split_names(splits)
    diffs = _difficulties(difficulties)
    worlds = load_worlds(corpus_dir)
    rows = []
    for split_file, name in SPLIT_FILES.items():
        if name in names:
            rows += [(name, r) for r in select_rows(load_rows(corpus_dir, split_file), max_tasks_per_cell, diffs)]
    if not rows:
        raise BaselineError(f"corpus {corpus_dir} has no test rows in the selected splits and difficulties")
    train = training_rows(corpus_dir)
    try:
        index = TrainingIndex(train)
        outcomes = baseline_outcomes(worlds, index, rows, step_limit=step_limit, k=k, seed=seed,
                                     env_factory=env_factory)
        over = overlap(corpus_dir, names, train=train)
    except (KeyError, TypeError) as exc:
        raise BaselineError(f"malformed corpus row in {corpus_dir}: missing or bad field {exc}") from None
    return {"corpus": str(corpus_dir), "step_limit": step_limit, "k": k, "seed": seed,
            "max_tasks_per_cell": max_tasks_per_cell, "splits": names, "difficulties": diffs,
            "baselines": list(BASELINES), "tasks": len(rows), "training_rows": index.n_rows,
            "errors": sorted({getattr(w, "errors", "full") for w in worlds.values()}),
            "rows": score(outcomes, k), "overlap": over,
            "seconds": round(time.time() - t0, 2)}


# ----- overlap ---------------------------------------------------------------------------------------------
def overlap(corpus_dir, splits: Sequence[str] = ("ID", "OOD"), train: list[dict] | None = None) -> dict:
    """Per test split (and per difficulty): % of test rows whose ``gold_actions`` equal some training
    row's ``gold_actions`` (same domain and recipe), whose goal is some training row's goal, and
    whose whole task (goal and inventory) is a training task (0 by construction)."""
    corpus_dir = Path(corpus_dir)
    train = training_rows(corpus_dir) if train is None else train
    plans, goals, tasks = set(), set(), set()
    for r in train:
        wk = (r["domain"], r["recipe"])
        plans.add((wk, tuple(r["gold_actions"])))
        goals.add((wk, r["goal"]))
        tasks.add((wk, r["goal"], _inv_key(r)))
    out = {}
    for split_file, name in SPLIT_FILES.items():
        if name not in _split_names(splits):
            continue
        test = load_rows(corpus_dir, split_file)
        cells: dict[str, list[dict]] = {"all": test}
        for d in DIFFICULTIES:
            cells[d] = [r for r in test if r.get("difficulty") == d]
        out[name] = {}
        for cell, rows in cells.items():
            n = len(rows)

            def pct(hit) -> float:
                return 100.0 * sum(1 for r in rows if hit(r)) / n if n else 0.0

            out[name][cell] = {
                "rows": n,
                "plan_in_training": pct(lambda r: ((r["domain"], r["recipe"]), tuple(r["gold_actions"])) in plans),
                "goal_in_training": pct(lambda r: ((r["domain"], r["recipe"]), r["goal"]) in goals),
                "task_in_training": pct(lambda r: ((r["domain"], r["recipe"]), r["goal"], _inv_key(r)) in tasks)}
    return out


def _inv_key(row: dict) -> tuple:
    return tuple(sorted(Counter({e["item"]: int(e["count"]) for e in row["initial_inventory"]}).items()))


# ----- tables ----------------------------------------------------------------------------------------------
def _cell(rows: list[dict]) -> dict:
    return {(r["domain"], r["split"], r["difficulty"], r["baseline"]): r for r in rows}


def baselines_markdown(result: dict) -> str:
    """The baseline table (pooled over domains when there are several) and the overlap table."""
    k, rows = result["k"], result["rows"]
    domain = "*" if any(r["domain"] == "*" for r in rows) else rows[0]["domain"]
    cell = _cell(rows)
    diffs = [d for d in (*DIFFICULTIES, "all") if any((domain, s, d, "solver") in cell for s in result["splits"])]
    lines = [f"## Baselines: `{result['corpus']}`", "",
             f"Step limit {result['step_limit']}; {result['tasks']} test tasks; {result['training_rows']} training rows"
             f"{'' if domain != '*' else '; all domains pooled'}; errors: {', '.join(result.get('errors', []))}. "
             f"Success in %; random-valid over K={k} seeds (avg@{k} / pass@{k}); the other baselines are "
             f"deterministic (avg@{k} = pass@{k}).", "",
             "| split | baseline | " + " | ".join(diffs) + " |", "|---|---|" + "---:|" * len(diffs)]
    for split in result["splits"]:
        some = [cell.get((domain, split, d, "solver")) for d in diffs]
        lines.append(f"| {split} | tasks | " + " | ".join(str(r["tasks"]) if r else "-" for r in some) + " |")
        for name in BASELINES:
            metrics = [f"avg@{k}", f"pass@{k}"] if name in RANDOMISED else [f"avg@{k}"]
            for m in metrics:
                label = f"{name} {m}" if name in RANDOMISED else name
                vals = [cell.get((domain, split, d, name)) for d in diffs]
                lines.append(f"| {split} | {label} | " + " | ".join(f"{r[m]:.1f}" if r else "-" for r in vals) + " |")
    ov = result.get("overlap") or {}
    if ov:
        lines += ["", "Overlap of the test rows with the training rows (pretrain + posttrain), % of test rows:", "",
                  "| split | difficulty | test rows | gold plan verbatim in training | goal in training | task in training |",
                  "|---|---|---:|---:|---:|---:|"]
        for split, by_diff in ov.items():
            for d, o in by_diff.items():
                if o["rows"]:
                    lines.append(f"| {split} | {d} | {o['rows']} | {o['plan_in_training']:.1f} | "
                                 f"{o['goal_in_training']:.1f} | {o['task_in_training']:.1f} |")
    return "\n".join(lines) + "\n"


def comparison_markdown(model_rows: list[dict], baseline_rows: list[dict], k: int) -> str:
    """A model's avg@k per (domain, split, difficulty) beside every baseline on the same tasks."""
    cell = _cell(baseline_rows)
    cols = [(n, m) for n in BASELINES for m in ((f"avg@{k}", f"pass@{k}") if n in RANDOMISED else (f"avg@{k}",))]
    head = [f"{n} {m}" if n in RANDOMISED else n for n, m in cols]
    lines = [f"Baselines on the same tasks (success %; random-valid over {k} seeds; see `planning_gym/baselines.py`):", "",
             f"| domain | split | difficulty | tasks | model avg@{k} | " + " | ".join(head) + " |",
             "|---|---|---|---|---:|" + "---:|" * len(cols)]
    for r in model_rows:
        vals = []
        for n, m in cols:
            b = cell.get((r["domain"], r["split"], r["difficulty"], n))
            vals.append(f"{b[m]:.1f}" if b else "-")
        lines.append(f"| {r['domain']} | {r['split']} | {r['difficulty']} | {r['tasks']} | {r[f'avg@{k}']:.2f} | "
                     + " | ".join(vals) + " |")
    return "\n".join(lines) + "\n"


# ----- CLI ---------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m planning_gym.baselines", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="corpus folder")
    p.add_argument("--step-limit", type=int, default=EVAL_STEP_LIMIT)
    p.add_argument("--k", type=int, default=8, help="random-valid samples per task")
    p.add_argument("--max-tasks-per-cell", type=int, help="first N tasks per domain x difficulty of each split")
    p.add_argument("--splits", default="ID,OOD")
    p.add_argument("--difficulties", help="comma-separated bins (short, mid, long; default all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="folder for baselines.md and baselines.json (default: the corpus folder)")

    def go() -> int:
        args = p.parse_args(argv)
        result = run_baselines(args.data, splits=[s.strip() for s in args.splits.split(",") if s.strip()],
                               step_limit=args.step_limit, k=args.k, max_tasks_per_cell=args.max_tasks_per_cell,
                               difficulties=None if args.difficulties is None
                               else [d.strip() for d in args.difficulties.split(",") if d.strip()], seed=args.seed)
        md = baselines_markdown(result)
        out = Path(args.out) if args.out else Path(args.data)
        out.mkdir(parents=True, exist_ok=True)
        (out / "baselines.md").write_text(md)
        (out / "baselines.json").write_text(json.dumps(result, indent=1) + "\n")
        print(md, end="")
        print(f"wrote {out / 'baselines.md'} and baselines.json ({result['seconds']:.1f} s)")
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
