"""Abstract AND/OR skill graphs: the structure every domain shares.

Items are integers arranged in levels.  Level-0 items are base resources (one gather action
yields one unit).  Every higher item has one or more *rules* (OR alternatives); a rule needs all
of its inputs with counts (AND) and consumes them.  Inputs always come from lower levels, at
least one from the level just below, so the graph is a DAG and an item's level is meaningful.
Rules are drawn at random (counterfactual): nothing about them can be guessed, only learned.

The structure depends only on ``GraphParams`` and the seed.  A *recipe* (``"A"``, ``"B"``, ...)
redraws the rules over the same items from its own stream, giving the same goals reached by
different procedures (the knowledge-mismatch experiment).  ``avoid_verbs`` keeps a recipe's
alternatives off the verbs another recipe already uses for the same output, so that both sets
of rules can live in one world without one action meaning two things (`World.build`'s
multi-path world).  Surface names live elsewhere
(`domains.py`) so that wording can change without touching structure.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from .cli import UsageError
from .rng import stream


class GraphConfigError(UsageError, ValueError):
    """Generator settings that cannot produce a valid graph."""


@dataclass(frozen=True)
class GraphParams:
    n_base: int = 6                       # level-0 items
    items_per_level: tuple[int, ...] = (5, 4, 3)   # levels 1..depth
    inputs_per_rule: tuple[int, int] = (2, 3)      # min, max distinct inputs of a rule
    rules_per_item: tuple[int, int] = (1, 2)       # OR-branching: min, max alternatives
    count_range: tuple[int, int] = (1, 2)          # units of an input a rule consumes
    n_verbs: int = 4                               # abstract craft verbs (domains name them)

    @property
    def depth(self) -> int:
        return len(self.items_per_level)

    def check(self) -> None:
        lo, hi = self.inputs_per_rule
        if self.n_base < 1 or any(n < 1 for n in self.items_per_level):
            raise GraphConfigError("every level needs at least one item")
        if self.depth < 1:
            raise GraphConfigError("the graph needs at least one level above the base items")
        if not 1 <= lo <= hi:
            raise GraphConfigError(f"inputs_per_rule must satisfy 1 <= min <= max, got {self.inputs_per_rule}")
        if hi > self.n_base:
            raise GraphConfigError(f"inputs_per_rule max {hi} exceeds the {self.n_base} base items")
        rlo, rhi = self.rules_per_item
        if not 1 <= rlo <= rhi:
            raise GraphConfigError(f"rules_per_item must satisfy 1 <= min <= max, got {self.rules_per_item}")
        if rhi > self.n_verbs:
            raise GraphConfigError(f"{rhi} alternative rules need at least {rhi} verbs, got n_verbs={self.n_verbs}")
        clo, chi = self.count_range
        if not 1 <= clo <= chi:
            raise GraphConfigError(f"count_range must satisfy 1 <= min <= max, got {self.count_range}")


@dataclass(frozen=True)
class Rule:
    verb: int                                   # abstract verb index
    inputs: tuple[tuple[int, int], ...]         # ((item, count), ...) sorted by item
    output: int


@dataclass
class SkillGraph:
    params: GraphParams
    seed: int
    recipe: str
    levels: list[int]                           # level of each item
    rules: list[Rule]                           # in export order
    rules_of: dict[int, list[int]] = field(default_factory=dict)   # output -> rule indices

    @property
    def n_items(self) -> int:
        return len(self.levels)

    def is_base(self, item: int) -> bool:
        return self.levels[item] == 0

    def items_at(self, level: int) -> list[int]:
        return [i for i, lv in enumerate(self.levels) if lv == level]

    def to_networkx(self) -> nx.MultiDiGraph:
        """Items as nodes; one edge input -> output per (rule, input), keyed by rule index."""
        g = nx.MultiDiGraph()
        for i, lv in enumerate(self.levels):
            g.add_node(i, level=lv, base=lv == 0)
        for r, rule in enumerate(self.rules):
            for item, count in rule.inputs:
                g.add_edge(item, rule.output, key=r, count=count, verb=rule.verb)
        return g

    def ancestors(self, item: int) -> set[int]:
        """Every item that some rule choice may need to make ``item``."""
        seen: set[int] = set()
        todo = [item]
        while todo:
            x = todo.pop()
            for r in self.rules_of.get(x, ()):
                for inp, _ in self.rules[r].inputs:
                    if inp not in seen:
                        seen.add(inp)
                        todo.append(inp)
        return seen


def generate_graph(params: GraphParams, seed: int, recipe: str = "A",
                   avoid_verbs: dict[int, set[int]] | None = None) -> SkillGraph:
    """Draw a skill graph.  Same (params, seed, recipe, avoid_verbs) -> same graph, always."""
    params.check()
    levels = [0] * params.n_base
    for lv, n in enumerate(params.items_per_level, start=1):
        levels += [lv] * n
    by_level: list[list[int]] = [[] for _ in range(params.depth + 1)]
    for i, lv in enumerate(levels):
        by_level[lv].append(i)

    rng = stream(seed, "rules", recipe)
    rules: list[Rule] = []
    rules_of: dict[int, list[int]] = {}
    for item, lv in enumerate(levels):
        if lv == 0:
            continue
        below = [j for l2 in range(lv) for j in by_level[l2]]
        n_alt = rng.randint(*params.rules_per_item)
        if avoid_verbs is None:
            verbs = rng.sample(range(params.n_verbs), n_alt)
        else:
            free = [v for v in range(params.n_verbs) if v not in avoid_verbs.get(item, ())]
            if not free:
                raise GraphConfigError(f"a second recipe needs a free verb per item: n_verbs={params.n_verbs} "
                                       f"is used up by rules_per_item={params.rules_per_item}")
            verbs = rng.sample(free, min(n_alt, len(free)))
        signatures: set[tuple] = set()
        for verb in verbs:
            for _ in range(20):          # redraw if an alternative duplicates another's inputs
                k = min(rng.randint(*params.inputs_per_rule), len(below))
                first = rng.choice(by_level[lv - 1])
                rest = rng.sample([j for j in below if j != first], k - 1)
                inputs = tuple(sorted((j, rng.randint(*params.count_range)) for j in [first, *rest]))
                if tuple(j for j, _ in inputs) not in signatures:
                    break
            signatures.add(tuple(j for j, _ in inputs))
            rules_of.setdefault(item, []).append(len(rules))
            rules.append(Rule(verb=verb, inputs=inputs, output=item))
    return SkillGraph(params=params, seed=seed, recipe=recipe, levels=levels, rules=rules, rules_of=rules_of)
