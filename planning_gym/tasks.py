"""Task sampling: goals, start inventories, horizons, difficulty bins and the OOD hold-out.

A task's horizon is the length of its shortest plan (1-13) with the rules of the recipe the
corpus teaches (in a multi-path world the other recipe's rules may give shorter plans, which a
model trained on this corpus never sees).  Bins: short 1-5, mid 6-8,
long 9-13 (a corpus setting, ``horizon_bins``).  Tasks are drawn from the ``("tasks", recipe, pool, bin)`` stream, which does not
depend on the domain, so fa / lf / ea get the same abstract tasks (paper Table 11 is identical
across domains).

**Tasks that need planning.**  A test is worth something only if it cannot be passed by
replaying a remembered plan.  So:

* goals are *deep*: items whose shortest plan from an empty inventory is at least
  ``goal_min_plan`` steps (default 21, longer than the 20-step evaluation limit), so a
  memorised from-empty plan never fits;
* start inventories hold intermediates of several levels: a random production tree of the
  goal is drawn and each unit in it is either held at the start or left to make, so the
  shortest plan depends on exactly what is held, and two tasks rarely share one;
* `test_id`'s mid and long tasks are drawn after training and kept only if no training gold
  plan for the goal, replayed blindly from their start, reaches the goal within the step limit
  (`TrainingPlans`): retrieving one remembered plan never solves them.  (Short tasks are a few
  steps from the goal and have few distinct plans; they are only required to be new tasks.)

**OOD hold-out, compositional** (the paper's "a subset of item-index combinations per category
is reserved").  A deterministic hash reserves a fraction of all (goal, intermediate item) pairs:
training never makes that item on the way to that goal, though it makes it for other goals.  A
shortest plan is, up to the order of its actions, an allocation of rule firings
(`Solver.optimal_allocations`).  A task is OOD when every shortest plan of it makes a reserved
item, ID when none does, and is never used when they are mixed.  So no shortest plan of an OOD
task is ever a training plan, while every single rule it fires is used in training (the corpus
checks both on its rows); and a training plan for the same goal, replayed blindly, expects the
reserved item to be held, or goes around it.
"""
from __future__ import annotations

from collections import Counter
from functools import cached_property

import numpy as np

from .env import EVAL_STEP_LIMIT, Task, apply_action
from .graph import GraphConfigError
from .rng import stream, unit_hash
from .solver import Solver
from .world import World

BINS: dict[str, tuple[int, int]] = {"short": (1, 5), "mid": (6, 8), "long": (9, 13)}
MAX_HORIZON = 13
GOAL_MIN_PLAN = 21              # > the 20-step evaluation limit
MAX_SHORTEST_PLANS = 64         # tasks with more optimal allocations are not used


def difficulty(horizon: int, bins: dict[str, tuple[int, int]] = BINS) -> str:
    for name, (lo, hi) in bins.items():
        if lo <= horizon <= hi:
            return name
    raise ValueError(f"horizon {horizon} is outside the bins {bins}")


def bins_from(ranges) -> dict[str, tuple[int, int]]:
    """``((1, 5), (6, 8), (9, 13))`` -> the named bins short / mid / long."""
    return {name: (int(lo), int(hi)) for name, (lo, hi) in zip(BINS, ranges)}


def required_inventory(world: World, plan) -> Counter:
    """The least start inventory from which ``plan`` runs without an error (in ``world``)."""
    have, need = Counter(), Counter()
    for action in plan:
        verb, _, name = action.partition(" ")
        item = world.index[name]
        if verb != world.gather_verb:
            for inp, count in world.rules[world.rule_for_action[(verb, item)][0]].inputs:
                if have[inp] < count:
                    need[inp] += count - have[inp]
                    have[inp] = count
                have[inp] -= count
        have[item] += 1
    return need


class TrainingPlans:
    """The training pools' gold plans, by goal.

    ``covers(task)``: some training plan for the task's goal, replayed blindly from the task's
    start (failed actions change nothing, as in the environment), holds the goal within the step
    limit: an agent that only *retrieves* a remembered plan could solve the task.  `test_id`'s
    mid and long tasks are drawn so that none is covered.  A plan's least start inventory for an
    error-free run (a matrix row per plan) settles most checks at once; the rest are replayed."""

    def __init__(self, world: World, step_limit: int = EVAL_STEP_LIMIT):
        self.world, self.step_limit = world, step_limit
        self.rows: dict[int, list[np.ndarray]] = {}
        self.by_goal: dict[int, list[tuple[str, ...]]] = {}
        self.plans: set[tuple[str, ...]] = set()
        self._matrix: dict[int, np.ndarray] = {}

    def add(self, goal: int, plan) -> None:
        if tuple(plan) in self.plans:
            return
        self.plans.add(tuple(plan))
        self.by_goal.setdefault(goal, []).append(tuple(plan))
        vec = np.zeros(self.world.n_items, dtype=np.int32)
        for item, count in required_inventory(self.world, plan).items():
            vec[item] = count
        self.rows.setdefault(goal, []).append(vec)
        self._matrix.pop(goal, None)

    def covers(self, task: Task) -> bool:
        if task.goal not in self.rows:
            return False
        if task.goal not in self._matrix:
            self._matrix[task.goal] = np.stack(self.rows[task.goal])
        have = np.zeros(self.world.n_items, dtype=np.int32)
        for item, count in task.inventory:
            have[item] = count
        if (self._matrix[task.goal] <= have).all(axis=1).any():
            return True
        return any(self._replay_solves(task, plan) for plan in self.by_goal[task.goal])

    def _replay_solves(self, task: Task, plan) -> bool:
        inv = dict(task.inventory)
        for action in plan[:self.step_limit]:
            apply_action(self.world, inv, action)
            if inv.get(task.goal, 0) >= 1:
                return True
        return False


def deep_goals(world: World, min_plan: int) -> list[int]:
    solver = Solver(world, budget=MAX_HORIZON)
    return [i for i in range(world.n_items) if solver.scratch_cost[i] >= min_plan]


class TaskSampler:
    """Draws tasks of a given difficulty bin from one world (planned with its taught recipe)."""

    def __init__(self, world: World, seed: int, ood_fraction: float = 0.15, goal_min_plan: int = GOAL_MIN_PLAN,
                 bins: dict[str, tuple[int, int]] = BINS):
        self.world, self.seed, self.ood_fraction, self.bins = world, seed, ood_fraction, dict(bins)
        self.solver = Solver(world, budget=max(hi for _, hi in self.bins.values()))
        self.taught = self.solver.world
        self.goals = deep_goals(world, goal_min_plan)
        if not self.goals:
            raise GraphConfigError(
                f"no item of this graph needs {goal_min_plan}+ steps from an empty inventory; use a deeper "
                f"graph (more levels, larger count range) or a smaller goal_min_plan")
        self._first: dict[int, int | None] = {}
        self.horizon_cache: dict[tuple, int | None] = {}
        self.status_cache: dict[tuple, tuple] = {}

    def horizon(self, task: Task) -> int | None:
        if task.key not in self.horizon_cache:
            self.horizon_cache[task.key] = self.solver.plan_length(task.goal, dict(task.inventory))
        return self.horizon_cache[task.key]

    def reserved(self, goal: int, item: int) -> bool:
        """Whether making ``item`` on the way to ``goal`` is held out for OOD tests: a hash below
        ``ood_fraction``, and for every goal at least the lowest-hash crafted input of its own
        rules, so that small graphs have OOD tasks in every bin (a goal still gets none when the
        reserved item's rules are used for no other goal in training)."""
        if item == goal:
            return False
        h = unit_hash(self.seed, "ood", goal, item)
        return h < self.ood_fraction or item == self._first_reserved(goal)

    def _first_reserved(self, goal: int) -> int | None:
        if goal not in self._first:
            w = self.taught
            inner = {i for r in w.rules_of[goal] for i, _ in w.rules[r].inputs if not w.is_base(i)}
            self._first[goal] = min(inner, key=lambda i: unit_hash(self.seed, "ood", goal, i), default=None)
        return self._first[goal]

    def gold_rules(self, task: Task) -> frozenset:
        """The rules the task's gold plan fires."""
        return frozenset(r for r, _ in self.solver.gold_allocation(task.goal, dict(task.inventory)))

    def status(self, task: Task) -> tuple[str | None, frozenset]:
        """(``"id"`` | ``"ood"`` | None, the rules its shortest plans fire).  None: the task has
        shortest plans on both sides of the hold-out, or too many to check."""
        if task.key not in self.status_cache:
            allocs = self.solver.optimal_allocations(task.goal, dict(task.inventory), MAX_SHORTEST_PLANS)
            if not allocs:
                self.status_cache[task.key] = (None, frozenset())
            else:
                outputs = self.taught.rules
                held = {any(self.reserved(task.goal, outputs[r].output) for r, _ in a) for a in allocs}
                side = None if len(held) > 1 else ("ood" if held == {True} else "id")
                self.status_cache[task.key] = (side, frozenset(r for a in allocs for r, _ in a))
        return self.status_cache[task.key]

    def held_out(self, task: Task) -> bool:
        return self.status(task)[0] == "ood"

    def _draw(self, rng, reserved_pair: bool = False) -> Task:
        """A deep goal and a start inventory cut from one of its production trees.

        With ``reserved_pair`` the tree is steered through a reserved (goal, rule) pair, whose
        output and the items above it are left to make: the OOD set is drawn this way, since
        its tasks would otherwise be rare in the short bin (`status` still decides membership)."""
        w = self.taught
        forced: dict[int, int] = {}                   # item on the steered path -> the rule to use
        if reserved_pair and self.reserved_pairs:
            goal, item = rng.choice(self.reserved_pairs)
            forced = self._path_to(goal, item, rng)
        else:
            goal = rng.choice(self.goals)
        keep = rng.uniform(0.05, 0.95)              # the share of the tree already held
        inv: Counter = Counter()

        def expand(item: int) -> None:
            rule = w.rules[forced[item] if item in forced else rng.choice(w.rules_of[item])]
            for inp, count in rule.inputs:
                for _ in range(count):
                    if inp not in forced and rng.random() < (keep / 2 if w.is_base(inp) else keep):
                        inv[inp] += 1
                    elif not w.is_base(inp):
                        expand(inp)

        expand(goal)
        if rng.random() < 0.3:                       # a unit of a goal ancestor off this tree
            inv[rng.choice(sorted(w.ancestors[goal]))] += 1
        if rng.random() < 0.2:                       # a distractor the goal never needs
            others = [i for i in range(w.n_items) if i != goal and i not in w.ancestors[goal]]
            if others:
                inv[rng.choice(others)] += 1
        return Task(goal, tuple(sorted(inv.items())))

    @cached_property
    def reserved_pairs(self) -> list[tuple[int, int]]:
        w = self.taught
        return [(g, i) for g in self.goals for i in sorted(w.ancestors[g]) if not w.is_base(i) and self.reserved(g, i)]

    def _path_to(self, goal: int, target: int, rng) -> dict[int, int]:
        """A random chain of rules from ``goal`` down to ``target``: {item: rule to make it by}."""
        w = self.taught
        path, item = {target: rng.choice(w.rules_of[target])}, goal
        while item != target:
            options = [r for r in w.rules_of[item]
                       if any(i == target or target in w.ancestors[i] for i, _ in w.rules[r].inputs)]
            r = rng.choice(options)
            path[item] = r
            item = rng.choice([i for i, _ in w.rules[r].inputs if i == target or target in w.ancestors[i]])
        return path

    def sample(self, pool: str, bin_name: str, n: int, *, held_out: bool, exclude: set = frozenset(),
               novel_to: TrainingPlans | None = None, allowed_rules: set | None = None,
               unique: bool = True) -> list[Task]:
        """``n`` tasks whose horizon lies in ``bin_name``.

        ``held_out`` selects OOD tasks (True) or ID tasks (False).  ``exclude`` holds task keys
        that must not be drawn.  ``novel_to``: training plans none of which may be the drawn
        task's gold plan or run on it without an error (`TrainingPlans.covers`).
        ``allowed_rules``: the rules every shortest plan must stay within (the OOD set passes the
        rules training uses).  Training pools pass ``unique=False``: repeats are what a corpus
        of that size would contain anyway.
        """
        lo, hi = self.bins[bin_name]
        rng = stream(self.seed, "tasks", self.world.recipe, pool, bin_name)
        out: list[Task] = []
        seen: set = set()
        stale, max_stale = 0, 20_000            # draws in a row without a new task
        while len(out) < n:
            stale += 1
            if stale > max_stale:
                raise GraphConfigError(
                    f"could only draw {len(out)} of {n} {bin_name} tasks (horizon {lo}-{hi}) for pool "
                    f"'{pool}' from this graph; use a larger or deeper graph or fewer tasks")
            task = self._draw(rng, reserved_pair=held_out)
            if task.key in exclude or (unique and task.key in seen):
                continue
            h = self.horizon(task)
            if h is None or not lo <= h <= hi:
                continue
            side, rules = self.status(task)
            if side != ("ood" if held_out else "id"):
                continue
            if allowed_rules is not None and not rules <= allowed_rules:
                continue
            if novel_to is not None and (novel_to.covers(task) or tuple(
                    self.solver.gold_plan(task.goal, dict(task.inventory))) in novel_to.plans):
                continue
            seen.add(task.key)
            out.append(task)
            stale = 0
        return out
