"""Eight planning patterns: how an agent's chain of thought is shaped, and what it does.

Optimal patterns follow a shortest plan and differ only in wording:
  T1 Goal       "Goal check: ..."  names the goal and the item it works toward this turn
  T2 Step       "Step k/N: ..."    counts its way through the plan
  T3 Planning   "Plan: ..."        writes the whole plan in the first turn, then follows it
  T4 Reasoning  "Reason: ..."      justifies each action by the rule it uses
Suboptimal patterns take extra turns and then recover (the episode still succeeds):
  D1 Quick      tries the final synthesis at once (an error), then builds the parts
  D2 Shortcut   tries a synthesis one step before its inputs are all there (an error)
  D3 Direct     acts without looking ahead and wastes a turn on an item the goal never needs
  D4 Heuristic  gathers every base item first, and one unit more than needed
Each defect is placed at random; long plans get more of them (``1 + horizon // 6``), so the
errors of a suboptimal corpus grow with the horizon, as in the paper.  Where a plan is too short
for a pattern's own mistake (D1 on a one-step task), the defect is a wasted turn as in D3, so
every suboptimal row really is suboptimal.

`classify_turn` / `classify_trajectory` recognise the pattern of model outputs from the first
line of each agent turn, for the pattern histograms of the analysis stage.
"""
from __future__ import annotations

import random
import re

from .env import apply_action
from .text import split_turns
from .world import World

OPTIMAL = ("T1", "T2", "T3", "T4")
SUBOPTIMAL = ("D1", "D2", "D3", "D4")
PATTERNS = OPTIMAL + SUBOPTIMAL
PATTERN_NAMES = {"T1": "Goal", "T2": "Step", "T3": "Planning", "T4": "Reasoning",
                 "D1": "Quick", "D2": "Shortcut", "D3": "Direct", "D4": "Heuristic"}
OTHERS = "Others"

# Pattern mixtures of the paper (Opt:Sub quality dial); weights per pattern.
MIXTURES: dict[str, dict[str, float]] = {
    "1opt": {"T1": 1.0},
    "4opt": {p: 1.0 for p in OPTIMAL},
    "4opt4sub": {p: 1.0 for p in PATTERNS},
    "4opt8sub": {**{p: 1.0 for p in OPTIMAL}, **{p: 2.0 for p in SUBOPTIMAL}},
}



def mixture_weights(spec: str) -> dict[str, float]:
    """Pattern weights of a mixture: a preset name (``4opt8sub``) or an explicit set such as
    ``T1+T2+D1`` (equal weights) or ``T1:2+D1:1`` — what the MOPD regimes need per teacher."""
    if spec in MIXTURES:
        return dict(MIXTURES[spec])
    weights: dict[str, float] = {}
    for part in spec.split("+"):
        name, _, w = part.strip().partition(":")
        try:
            weight = float(w) if w else 1.0
        except ValueError:
            weight = -1.0
        if name not in PATTERNS or weight <= 0 or name in weights:
            raise ValueError(f"bad pattern mixture '{spec}': use one of {', '.join(MIXTURES)} "
                             f"or a set like T1+T2+D1 / T1:2+D1:1 over {', '.join(PATTERNS)}")
        weights[name] = weight
    return weights


_PREFIX = [("T1", re.compile(r"^Goal check: ")), ("T2", re.compile(r"^Step \d+/\d+: ")),
           ("T3", re.compile(r"^Plan( step \d+)?: ")), ("T4", re.compile(r"^Reason: ")),
           ("D1", re.compile(r"^Quick: ")), ("D2", re.compile(r"^Shortcut: ")),
           ("D3", re.compile(r"^Direct: ")), ("D4", re.compile(r"^Heuristic: "))]


# ----- what the agent does ------------------------------------------------------------------------
def _feasible(world: World, inv: dict[int, int], action: str) -> bool:
    return apply_action(world, dict(inv), action) is None


def _prefix_inventory(world: World, inv0: dict[int, int], actions: list[str], upto: int) -> dict[int, int]:
    inv = dict(inv0)
    for a in actions[:upto]:
        apply_action(world, inv, a)
    return inv


def act(pattern: str, world: World, goal: int, inv0: dict[int, int], gold: list[str],
        rng: random.Random) -> list[str]:
    """The actions an agent following ``pattern`` takes (``gold`` for optimal patterns)."""
    if pattern in OPTIMAL:
        return list(gold)
    actions = list(gold)
    n_defects = 1 + len(gold) // 6
    if pattern == "D4":            # gathers first (still executable: more stock never hurts) ...
        gathers = [a for a in actions if a.startswith(world.gather_verb + " ")]
        actions = gathers + [a for a in actions if not a.startswith(world.gather_verb + " ")]
        base_needed = sorted(set(gathers)) or [world.action_text(("gather", i))
                                                for i in range(world.n_items) if world.is_base(i)]
        for _ in range(n_defects):  # ... plus surplus units it never uses
            pos = rng.randint(0, len(gathers))
            actions.insert(pos, rng.choice(base_needed))
        return actions
    for _ in range(n_defects):
        spots: list[int] = []
        if pattern == "D1":        # the final synthesis, tried too early
            final = actions[-1]
            spots = [k for k in range(len(actions) - 1)
                     if not _feasible(world, _prefix_inventory(world, inv0, actions, k), final)]
            if spots:
                actions.insert(rng.choice(spots), final)
        elif pattern == "D2":      # a synthesis one step before its last input is there
            spots = [k for k in range(1, len(actions))
                     if not actions[k].startswith(world.gather_verb + " ")
                     and not _feasible(world, _prefix_inventory(world, inv0, actions, k - 1), actions[k])]
            if spots:
                k = rng.choice(spots)
                actions.insert(k - 1, actions[k])
        if not spots:              # D3, or a plan too short for the pattern's own mistake:
            useless = [i for i in range(world.n_items)
                       if world.is_base(i) and i != goal and i not in world.ancestors[goal]]
            pool = useless or [i for i in range(world.n_items) if world.is_base(i) and i != goal]
            actions.insert(rng.randint(0, len(actions) - 1), world.action_text(("gather", rng.choice(pool))))
    return actions


# ----- what the agent writes ------------------------------------------------------------------------
def pattern_line(pattern: str, world: World, goal: int, actions: list[str], k: int) -> str:
    """The first chain-of-thought line of turn ``k`` (0-based) for ``pattern``."""
    action = actions[k]
    verb, _, item = action.partition(" ")
    if pattern == "T1":
        return f"Goal check: {world.names[goal]} needs {item} now"
    if pattern == "T2":
        return f"Step {k + 1}/{len(actions)}: {action}"
    if pattern == "T3":
        return f"Plan: {'; '.join(actions)}" if k == 0 else f"Plan step {k + 1}: {action}"
    if pattern == "T4":
        idx = world.index[item]
        if verb == world.gather_verb:
            return f"Reason: {item} is a base item, so {verb} it"
        rule = world.rules[world.rule_for_action[(verb, idx)][0]]
        need = ", ".join(f"{world.names[i]} x{c}" for i, c in rule.inputs)
        return f"Reason: {item} takes {need}, so {verb} it"
    prefix = {"D1": "Quick", "D2": "Shortcut", "D3": "Direct", "D4": "Heuristic"}[pattern]
    return f"{prefix}: {action}"


def predict_line(world: World, inv: dict[int, int], action: str) -> str:
    """The world-model line: current state -> action -> the state the agent expects next.

    The expectation assumes the action works, so a suboptimal agent's wrong guesses are
    written down too (its world model is what the later error observation corrects)."""
    after = dict(inv)
    if apply_action(world, after, action) is not None:
        verb, _, item = action.partition(" ")
        idx = world.index.get(item.strip())
        if idx is not None:
            after[idx] = after.get(idx, 0) + 1
    return f"Predict: {world.format_inventory(inv)} -> {action} -> {world.format_inventory(after)}"


# ----- recognising patterns in text ----------------------------------------------------------------
def classify_turn(agent_turn: str) -> str | None:
    first = agent_turn.lstrip("\n").split("\n", 1)[0]
    for name, rx in _PREFIX:
        if rx.match(first):
            return name
    return None


def classify_trajectory(text: str) -> str:
    """The pattern of most agent turns, if it covers at least half of them; else ``Others``."""
    turns = [c for role, c in split_turns(text) if role == "agent"]
    if not turns:
        return OTHERS
    votes: dict[str, int] = {}
    for t in turns:
        p = classify_turn(t)
        if p is not None:
            votes[p] = votes.get(p, 0) + 1
    if not votes:
        return OTHERS
    best = max(sorted(votes), key=lambda p: votes[p])
    return best if 2 * votes[best] >= len(turns) else OTHERS
