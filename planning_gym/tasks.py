"""Task sampling: goals, initial inventories, horizons, difficulty bins and OOD hold-outs.

A task's horizon is the length of its shortest plan (1-13).  Bins: short 1-5, mid 6-8,
long 9-13.  Tasks are drawn from the ``("tasks", recipe, pool, bin)`` stream, which does not
depend on the domain, so fa / lf / ea get the same abstract tasks (paper Table 11 is identical
across domains).

OOD hold-out: a task's *combination* is its goal with the set of items it starts holding.  A
deterministic hash of the combination (under the corpus seed) marks a fraction of all
combinations as held out: those appear only in ``test_ood``, never in a training pool or in
``test_id``.  Membership is a pure function, so any row can be checked against it later.
"""
from __future__ import annotations

from .env import Task
from .graph import GraphConfigError
from .rng import stream, unit_hash
from .solver import Solver
from .world import World

BINS: dict[str, tuple[int, int]] = {"short": (1, 5), "mid": (6, 8), "long": (9, 13)}
MAX_HORIZON = 13


def difficulty(horizon: int) -> str:
    for name, (lo, hi) in BINS.items():
        if lo <= horizon <= hi:
            return name
    raise ValueError(f"horizon {horizon} is outside 1..{MAX_HORIZON}")


def is_held_out(task: Task, seed: int, fraction: float) -> bool:
    return unit_hash(seed, "ood", task.combo) < fraction


class TaskSampler:
    """Draws tasks of a given difficulty bin from one world."""

    def __init__(self, world: World, seed: int, ood_fraction: float = 0.15):
        self.world, self.seed, self.ood_fraction = world, seed, ood_fraction
        self.solver = Solver(world, budget=MAX_HORIZON)
        self.horizon_cache: dict[tuple, int | None] = {}

    def horizon(self, task: Task) -> int | None:
        if task.key not in self.horizon_cache:
            self.horizon_cache[task.key] = self.solver.plan_length(task.goal, dict(task.inventory))
        return self.horizon_cache[task.key]

    def held_out(self, task: Task) -> bool:
        return is_held_out(task, self.seed, self.ood_fraction)

    def _draw(self, rng) -> Task:
        w = self.world
        goal = rng.randrange(w.n_items)
        inv: dict[int, int] = {}
        if rng.random() > 0.3:                   # 70 %: start with a few useful items
            pool = sorted(w.ancestors[goal])
            for item in rng.sample(pool, min(len(pool), rng.randint(1, 3))):
                inv[item] = rng.randint(1, 2)
        if rng.random() < 0.2:                   # sometimes a distractor the goal never needs
            others = [i for i in range(w.n_items) if i != goal and i not in w.ancestors[goal]]
            if others:
                inv[rng.choice(others)] = 1
        return Task(goal, tuple(sorted(inv.items())))

    def sample(self, pool: str, bin_name: str, n: int, *, held_out: bool, exclude: set = frozenset(),
               unique: bool = True) -> list[Task]:
        """``n`` tasks whose horizon lies in ``bin_name``.

        ``held_out`` selects OOD combinations (True) or keeps them out (False); ``exclude`` holds
        task keys that must not be drawn (the test sets, for training pools).  Training pools pass
        ``unique=False``: small graphs have few short tasks, and repeats are what a corpus of that
        size would contain anyway.
        """
        lo, hi = BINS[bin_name]
        rng = stream(self.seed, "tasks", self.world.recipe, pool, bin_name)
        out: list[Task] = []
        seen: set = set()
        attempts, max_attempts = 0, 2000 + 400 * n
        while len(out) < n:
            attempts += 1
            if attempts > max_attempts:
                raise GraphConfigError(
                    f"could only draw {len(out)} of {n} {bin_name} tasks (horizon {lo}-{hi}) for pool "
                    f"'{pool}' from this graph; use a larger or deeper graph or fewer tasks")
            task = self._draw(rng)
            if task.key in exclude or (unique and task.key in seen):
                continue
            if self.held_out(task) != held_out:
                continue
            h = self.horizon(task)
            if h is None or not lo <= h <= hi:
                continue
            seen.add(task.key)
            out.append(task)
        return out
