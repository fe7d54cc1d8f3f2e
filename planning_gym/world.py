"""A concrete world: an abstract skill graph dressed in a domain's names and verbs.

`World` is what the environment, the solver and the corpus generator use.  It can be built two
ways that give the same object: from (domain, graph params, seed, recipe), or from an exported
``rules.json`` alone — the file independent tools read, so that anyone can replay our data with
exactly our semantics (SPEC §2, "Export contract").

Domains are data: a JSON file with a gather verb, craft verbs and word lists for item names
(`planning_gym/domains/*.json`).  A new domain is one more such file (or a path to one).
The index map abstract item -> surface name is drawn from the ``("surface", domain)`` stream,
independent of the structure stream, so wording changes never change structure.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from .cli import UsageError
from .graph import GraphParams, SkillGraph, generate_graph
from .rng import stream

DOMAIN_DIR = Path(__file__).parent / "domains"
ERROR_DETAILS = ("terse", "full")
PATHS = ("multi", "single")
_DOMAIN_FIELDS = ("key", "name", "gather_verb", "verbs", "base_modifiers", "base_nouns",
                  "crafted_modifiers", "crafted_nouns")


class DomainError(UsageError, ValueError):
    """An unknown or malformed domain description."""


def known_domains() -> list[str]:
    return sorted(p.stem for p in DOMAIN_DIR.glob("*.json"))


def load_domain(key_or_path: str) -> dict:
    """Load a domain by key (``fa``, ``lf``, ``ea``) or from a JSON file path."""
    path = Path(key_or_path)
    if not (path.suffix == ".json" and path.exists()):
        path = DOMAIN_DIR / f"{key_or_path}.json"
    if not path.exists():
        raise DomainError(f"unknown domain '{key_or_path}' (known: {', '.join(known_domains())}, or a path to a domain .json)")
    try:
        spec = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DomainError(f"domain file {path} is not valid JSON: {e}") from None
    missing = [f for f in _DOMAIN_FIELDS if f not in spec]
    if missing:
        raise DomainError(f"domain file {path} lacks fields: {', '.join(missing)}")
    words = [spec["gather_verb"], *spec["verbs"]]
    if any(not isinstance(w, str) or not w or " " in w or w != w.lower() for w in words):
        raise DomainError(f"domain {spec['key']}: verbs must be single lowercase words")
    if len(set(words)) != len(words):
        raise DomainError(f"domain {spec['key']}: verbs must be distinct")
    return spec


def _draw_names(spec: dict, kind: str, n: int, rng) -> list[str]:
    """``n`` distinct ``modifier noun`` names.  When the pools are large enough no word is used
    twice (each pool shuffled, paired by position): more word types is what lets the paper-scale
    BPE grow toward its 3000 tokens.  Smaller pools fall back to distinct pairs."""
    mods, nouns = list(spec[f"{kind}_modifiers"]), list(spec[f"{kind}_nouns"])
    if n > len(mods) * len(nouns):
        raise DomainError(f"domain {spec['key']} has names for {len(mods) * len(nouns)} {kind} items; the graph needs {n}")
    if n <= min(len(mods), len(nouns)):
        rng.shuffle(mods)
        rng.shuffle(nouns)
        return [f"{m} {w}" for m, w in zip(mods[:n], nouns[:n])]
    return rng.sample([f"{m} {w}" for m in mods for w in nouns], n)


@dataclass(frozen=True)
class NamedRule:
    verb: str
    inputs: tuple[tuple[int, int], ...]      # ((item index, count), ...)
    output: int
    recipe: str = "A"                        # the recipe whose procedures this rule belongs to


class World:
    """Items, rules and verbs of one (domain, recipe).  Item identity is an integer index.

    ``errors`` is how much a failed synthesis tells the agent: ``terse`` (``cannot forge X:
    missing inputs``) or ``full`` (``... missing A x2, B x1``: the recipe, given away by the
    error; a recipe-free script that reads these errors solves most tasks).  It is part of the
    observation semantics, so it travels with the rules in ``rules.json``.

    A world may hold the rules of several recipes (the *multi-path* world: A's and B's paths to
    the same goals are both valid).  ``recipe`` is the one whose procedures this world's corpus
    teaches; `taught` is the world restricted to it, which plans gold trajectories.
    """

    def __init__(self, domain: str, recipe: str, names: list[str], levels: list[int],
                 rules: list[NamedRule], gather_verb: str, errors: str = "terse"):
        if errors not in ERROR_DETAILS:
            raise DomainError(f"errors must be one of {', '.join(ERROR_DETAILS)}, got '{errors}'")
        self.domain, self.recipe, self.errors = domain, recipe, errors
        self.names, self.levels = list(names), list(levels)
        self.rules, self.gather_verb = list(rules), gather_verb
        self.index = {n: i for i, n in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise DomainError("item names must be unique")
        self.rules_of: dict[int, list[int]] = {}
        self.rule_for_action: dict[tuple[str, int], list[int]] = {}
        for r, rule in enumerate(self.rules):
            self.rules_of.setdefault(rule.output, []).append(r)
            self.rule_for_action.setdefault((rule.verb, rule.output), []).append(r)
        self.verbs = sorted({r.verb for r in self.rules} | {gather_verb})

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, domain: str, params: GraphParams, seed: int, recipe: str = "A",
              errors: str = "terse", paths: str = "single") -> "World":
        """The world of ``recipe``.  ``paths="single"``: only that recipe's rules exist.
        ``paths="multi"``: recipe A's rules and a second recipe's (B for an A corpus, the corpus's
        own recipe otherwise) both exist, the second drawn on verbs A leaves free per item."""
        if paths not in PATHS:
            raise DomainError(f"paths must be one of {', '.join(PATHS)}, got '{paths}'")
        spec = load_domain(domain)
        if paths == "single":
            return cls.from_graph(spec, generate_graph(params, seed, recipe), seed, errors)
        base = generate_graph(params, seed, "A")
        taken: dict[int, set[int]] = {}
        for rule in base.rules:
            taken.setdefault(rule.output, set()).add(rule.verb)
        other = generate_graph(params, seed, "B" if recipe == "A" else recipe, avoid_verbs=taken)
        return cls.from_graph(spec, base, seed, errors, also=other, taught=recipe)

    @classmethod
    def from_graph(cls, spec: dict, graph: SkillGraph, seed: int, errors: str = "terse",
                   also: SkillGraph | None = None, taught: str | None = None) -> "World":
        if graph.params.n_verbs > len(spec["verbs"]):
            raise DomainError(f"domain {spec['key']} has {len(spec['verbs'])} verbs, the graph needs {graph.params.n_verbs}")
        rng = stream(seed, "surface", spec["key"])     # the index map: wording only
        n_base = sum(1 for lv in graph.levels if lv == 0)
        base_names = _draw_names(spec, "base", n_base, rng)
        crafted_names = _draw_names(spec, "crafted", graph.n_items - n_base, rng)
        names = [base_names.pop() if lv == 0 else crafted_names.pop() for lv in graph.levels]
        verbs = rng.sample(spec["verbs"], graph.params.n_verbs)
        rules = [NamedRule(verbs[r.verb], r.inputs, r.output, g.recipe)
                 for g in ([graph, also] if also is not None else [graph]) for r in g.rules]
        return cls(spec["key"], taught or graph.recipe, names, graph.levels, rules, spec["gather_verb"], errors)

    # ----- the export contract --------------------------------------------------------------
    def to_rules_json(self) -> dict:
        return {
            "domain": self.domain,
            "recipe": self.recipe,
            "gather_verb": self.gather_verb,
            "errors": self.errors,
            "items": [{"name": n, "level": lv, "base": lv == 0} for n, lv in zip(self.names, self.levels)],
            "rules": [{"verb": r.verb, "inputs": {self.names[i]: c for i, c in r.inputs},
                       "output": self.names[r.output], "recipe": r.recipe} for r in self.rules],
        }

    @classmethod
    def from_rules_json(cls, data: dict) -> "World":
        try:
            names = [it["name"] for it in data["items"]]
            levels = [int(it["level"]) for it in data["items"]]
            index = {n: i for i, n in enumerate(names)}
            rules = [NamedRule(r["verb"], tuple(sorted((index[k], int(c)) for k, c in r["inputs"].items())),
                               index[r["output"]], r.get("recipe", data["recipe"])) for r in data["rules"]]
            # Files written before the knob existed listed the missing inputs.
            return cls(data["domain"], data["recipe"], names, levels, rules, data["gather_verb"],
                       data.get("errors", "full"))
        except (KeyError, TypeError, ValueError) as e:
            raise DomainError(f"malformed rules.json: {e!r}") from None

    # ----- helpers ----------------------------------------------------------------------------
    @cached_property
    def taught(self) -> "World":
        """This world with only the taught recipe's rules (itself when it holds no others)."""
        if all(r.recipe == self.recipe for r in self.rules):
            return self
        return World(self.domain, self.recipe, self.names, self.levels,
                     [r for r in self.rules if r.recipe == self.recipe], self.gather_verb, self.errors)

    @property
    def paths(self) -> str:
        return "multi" if len({r.recipe for r in self.rules}) > 1 else "single"

    @property
    def n_items(self) -> int:
        return len(self.names)

    def is_base(self, item: int) -> bool:
        return self.levels[item] == 0

    @cached_property
    def ancestors(self) -> list[frozenset[int]]:
        """ancestors[i]: every item some rule choice may need in order to make item i."""
        out: list[frozenset[int]] = [frozenset()] * self.n_items
        for i in sorted(range(self.n_items), key=lambda j: self.levels[j]):
            acc: set[int] = set()
            for r in self.rules_of.get(i, ()):
                for inp, _ in self.rules[r].inputs:
                    acc.add(inp)
                    acc |= out[inp]
            out[i] = frozenset(acc)
        return out

    def action_text(self, rule_or_gather: int | tuple[str, int]) -> str:
        """Text of a rule application (rule index) or a gather (``("gather", item)``)."""
        if isinstance(rule_or_gather, tuple):
            return f"{self.gather_verb} {self.names[rule_or_gather[1]]}"
        rule = self.rules[rule_or_gather]
        return f"{rule.verb} {self.names[rule.output]}"

    @cached_property
    def _name_rank(self) -> list[int]:
        order = sorted(range(self.n_items), key=lambda i: self.names[i])
        rank = [0] * self.n_items
        for r, i in enumerate(order):
            rank[i] = r
        return rank

    def format_inventory(self, inv: dict[int, int]) -> str:
        """``a x2, b x1`` in alphabetical order of names, or ``empty``."""
        items = sorted((i for i, c in inv.items() if c > 0), key=self._name_rank.__getitem__)
        return ", ".join(f"{self.names[i]} x{inv[i]}" for i in items) if items else "empty"
