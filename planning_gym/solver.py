"""Exact shortest plans.

Every action adds exactly one unit of one item, and rules only take inputs from lower levels,
so a plan is fully described by how many times each rule fires and each base item is gathered,
and any such count vector that balances (for every item: initial + produced - consumed >= what
is still needed) can be scheduled bottom-up.  The shortest plan is therefore the integer program

    minimise  sum(n_r) + sum(g_b)   subject to the balance of every item,

which we solve exactly by walking items from the goal downwards (decreasing level, so all of an
item's consumers are decided before it) and trying every split of its deficit over its OR
alternatives, with memoisation and a plan-length budget to bound the search.
`tests/test_solver.py` checks it against breadth-first search over raw states.

Gold plans are emitted depth first (make an item's inputs, higher-level inputs first, then the
item), which reads like a recipe and is always executable: building a level-l item only
consumes items below level l, so nothing made earlier for the same rule is eaten later.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import product

from .env import apply_action
from .world import World

INF = float("inf")
DEFAULT_BUDGET = 40


def _splits(total: int, parts: int):
    """All ways to write ``total`` as an ordered sum of ``parts`` non-negative integers."""
    if parts == 1:
        yield (total,)
        return
    for first in range(total, -1, -1):
        for rest in _splits(total - first, parts - 1):
            yield (first, *rest)


class Solver:
    def __init__(self, world: World, budget: int = DEFAULT_BUDGET):
        self.world = world = world.taught          # plans use the procedures the corpus teaches
        self.budget = budget
        self._cached = lru_cache(maxsize=200_000)(self._solve)
        # the search behind a plan length is kept for the few most recent tasks: the sampler asks
        # for a task's shortest-plan allocations right after its length
        self._search = lru_cache(maxsize=64)(self._search)
        # Cost of one unit from an empty inventory: exact by the recursion below, because with
        # nothing held no unit can be shared and every unit of an input is made afresh.
        self.scratch_cost = [0.0] * world.n_items
        for i in sorted(range(world.n_items), key=lambda j: world.levels[j]):
            alts = world.rules_of.get(i, [])
            self.scratch_cost[i] = 1 + (min(sum(c * self.scratch_cost[j] for j, c in world.rules[r].inputs)
                                            for r in alts) if alts else 0)

    def lower_bound(self, goal: int, inventory: dict[int, int]) -> float:
        """Admissible bound: a held unit of Y saves at most Y's scratch cost (making Y first from
        nothing turns any plan that starts with Y into one that starts without it)."""
        return self.scratch_cost[goal] - sum(c * self.scratch_cost[i] for i, c in inventory.items())

    # ----- public API -------------------------------------------------------------------------
    def plan_length(self, goal: int, inventory: dict[int, int]) -> int | None:
        """Length of a shortest plan from ``inventory`` to holding ``goal``; None if > budget."""
        cost, _ = self._cached(goal, _key(inventory))
        return None if cost == INF else int(cost)

    def can_reach(self, goal: int, inventory: dict[int, int], steps_left: int) -> bool:
        n = self.plan_length(goal, inventory)
        return n is not None and n <= steps_left

    def gold_allocation(self, goal: int, inventory: dict[int, int]) -> tuple:
        """How often each rule fires in `gold_plan` (``((rule, times), ...)``; ``()`` if none)."""
        return self._cached(goal, _key(inventory))[1]

    def gold_plan(self, goal: int, inventory: dict[int, int]) -> list[str] | None:
        """A shortest plan as action texts (depth-first order); None if longer than the budget."""
        cost, alloc = self._cached(goal, _key(inventory))
        if cost == INF:
            return None
        return self._schedule(goal, dict(inventory), dict(alloc))

    def optimal_allocations(self, goal: int, inventory: dict[int, int], limit: int = 64) -> list[tuple] | None:
        """Every optimal rule allocation (``((rule, times), ...)``) of the task: the shortest plans
        up to the order of their actions.  ``[]`` if no plan fits the budget; None if there are
        more than ``limit`` (the caller cannot check them all)."""
        search = self._search(goal, _key(inventory))
        if search is None:
            return []
        _, rel, have, choices, start = search
        w, pos, out = self.world, {item: k for k, item in enumerate(rel)}, set()

        def walk(k: int, demands: tuple, alloc: tuple) -> bool:
            while k < len(rel):
                item, deficit = rel[k], max(0, demands[0] - have[k])
                alts = w.rules_of.get(item, [])
                if deficit and alts:
                    for split in choices[(k, demands)]:
                        rest, more = list(demands[1:]), list(alloc)
                        for n, r in zip(split, alts):
                            if n:
                                more.append((r, n))
                                for inp, c in w.rules[r].inputs:
                                    rest[pos[inp] - k - 1] += n * c
                        if not walk(k + 1, tuple(rest), tuple(more)):
                            return False
                    return True
                k, demands = k + 1, demands[1:]
            out.add(tuple(sorted(alloc)))
            return len(out) <= limit

        if not walk(0, start, ()):
            return None
        return sorted(out)

    # ----- the integer program ----------------------------------------------------------------
    def _solve(self, goal: int, inv_key: tuple) -> tuple[float, tuple]:
        if dict(inv_key).get(goal, 0) >= 1:
            return 0, ()
        search = self._search(goal, inv_key)
        if search is None:
            return INF, ()
        total, rel, have, choices, start = search
        # Walk the first optimal choice at each item to recover how often each rule fires.
        w, pos, alloc = self.world, {item: k for k, item in enumerate(rel)}, {}
        k, demands = 0, start
        while k < len(rel):
            item, deficit, rest = rel[k], max(0, demands[0] - have[k]), list(demands[1:])
            alts = w.rules_of.get(item, [])
            if deficit and alts:
                for n, r in zip(choices[(k, demands)][0], alts):
                    if n:
                        alloc[r] = n
                        for inp, c in w.rules[r].inputs:
                            rest[pos[inp] - k - 1] += n * c
            k, demands = k + 1, tuple(rest)
        return total, tuple(sorted(alloc.items()))

    def _search(self, goal: int, inv_key: tuple):
        """The memoised search: (cost, items, held units, optimal splits per state, start), or
        None when the goal is held or no plan fits the budget."""
        w, inv = self.world, dict(inv_key)
        if inv.get(goal, 0) >= 1 or self.lower_bound(goal, inv) > self.budget:
            return None
        rel = sorted(w.ancestors[goal] | {goal}, key=lambda i: (-w.levels[i], i))
        pos = {item: k for k, item in enumerate(rel)}
        have = [inv.get(i, 0) for i in rel]
        budget = self.budget
        choices: dict[tuple, list[tuple]] = {}

        @lru_cache(maxsize=None)
        def best(k: int, demands: tuple) -> float:
            if k == len(rel):
                return 0
            if sum(max(0, d - h) for d, h in zip(demands, have[k:])) > budget:
                return INF          # every missing unit costs at least one action
            item, deficit, rest = rel[k], max(0, demands[0] - have[k]), demands[1:]
            alts = w.rules_of.get(item, [])
            if deficit == 0 or not alts:          # nothing to make, or a base item to gather
                return deficit + best(k + 1, rest)
            best_cost, best_splits = INF, []
            for split in _splits(deficit, len(alts)):
                new = list(rest)
                for n, r in zip(split, alts):
                    for inp, c in w.rules[r].inputs:
                        new[pos[inp] - k - 1] += n * c
                cost = deficit + best(k + 1, tuple(new))
                if cost < best_cost:
                    best_cost, best_splits = cost, [split]
                elif cost == best_cost and cost < INF:
                    best_splits.append(split)
            choices[(k, demands)] = best_splits
            return best_cost

        start = tuple(1 if i == goal else 0 for i in rel)
        total = best(0, start)
        if total > budget:
            return None
        return total, rel, have, choices, start

    # ----- scheduling -------------------------------------------------------------------------
    def _schedule(self, goal: int, inv: dict[int, int], alloc: dict[int, int]) -> list[str]:
        w, plan = self.world, []

        def make(item: int) -> None:
            alts = w.rules_of.get(item, [])
            if not alts:
                plan.append(w.action_text(("gather", item)))
                inv[item] = inv.get(item, 0) + 1
                return
            r = next(r for r in alts if alloc.get(r, 0) > 0)
            alloc[r] -= 1
            for inp, c in sorted(w.rules[r].inputs, key=lambda ic: (-w.levels[ic[0]], ic[0])):
                while inv.get(inp, 0) < c:
                    make(inp)
            for inp, c in w.rules[r].inputs:
                inv[inp] -= c
            inv[item] = inv.get(item, 0) + 1
            plan.append(w.action_text(r))

        make(goal)
        return plan


def _key(inventory: dict[int, int]) -> tuple:
    return tuple(sorted((i, c) for i, c in inventory.items() if c > 0))


def brute_force_length(world: World, goal: int, inventory: dict[int, int], limit: int = 12) -> int | None:
    """Breadth-first search over raw inventories (for tests on small graphs only)."""
    start = _key(inventory)
    if dict(start).get(goal, 0) >= 1:
        return 0
    actions = [world.action_text(("gather", i)) for i in range(world.n_items) if world.is_base(i)]
    actions += sorted({world.action_text(r) for r in range(len(world.rules))})
    frontier, seen = [start], {start}
    for depth in range(1, limit + 1):
        nxt = []
        for state, action in product(frontier, actions):
            inv = dict(state)
            if apply_action(world, inv, action) is None:
                if inv.get(goal, 0) >= 1:
                    return depth
                key = _key(inv)
                if key not in seen:
                    seen.add(key)
                    nxt.append(key)
        frontier = nxt
    return None
