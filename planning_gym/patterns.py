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
Each defect is placed at random; long plans get more of them (``1 + horizon // defect_every``,
6 by default), so the errors of a suboptimal corpus grow with the horizon, as in the paper.
Where a plan has too few spots for a pattern's own mistake (D1 on a one-step task), the rest are
wasted turns as in D3, so every suboptimal row really is suboptimal.  Every suboptimal row is
also `honest`: its last action reaches the goal (the env ends the episode there, so a row that
acted on would show "the episode is over" errors), and D1/D2 place each error at its own spot in
the plan, so the agent never repeats a failure it has just seen.

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


def canonical_mixture(spec: str) -> str:
    """One spelling per mixture: an explicit set's parts sorted (``T4+T3`` -> ``T3+T4``), a preset
    as it is. The two spellings are one corpus (rows draw their pattern over the sorted names), so
    they must name one corpus folder and one teacher, not two."""
    return spec if spec in MIXTURES else "+".join(sorted(part.strip() for part in spec.split("+")))


_PREFIX = [("T1", re.compile(r"^Goal check: ")), ("T2", re.compile(r"^Step \d+/\d+: ")),
           ("T3", re.compile(r"^Plan( step \d+)?: ")), ("T4", re.compile(r"^Reason: ")),
           ("D1", re.compile(r"^Quick: ")), ("D2", re.compile(r"^Shortcut: ")),
           ("D3", re.compile(r"^Direct: ")), ("D4", re.compile(r"^Heuristic: "))]


# ----- what the agent does ------------------------------------------------------------------------
DEFECT_EVERY = 6        # one more defect per this many gold steps: ``1 + horizon // DEFECT_EVERY``
_DRAWS = 20             # fresh random draws before giving up on a world whose rules defeat the plan


def _feasible(world: World, inv: dict[int, int], action: str) -> bool:
    return apply_action(world, dict(inv), action) is None


def _prefix_states(world: World, inv0: dict[int, int], gold: list[str]) -> list[dict[int, int]]:
    """states[k]: the inventory after gold[:k] (failed insertions leave it unchanged)."""
    states, inv = [dict(inv0)], dict(inv0)
    for a in gold:
        apply_action(world, inv, a)
        states.append(dict(inv))
    return states


def _is_gather(world: World, action: str) -> bool:
    return action.startswith(world.gather_verb + " ")


def _waste_pool(world: World, goal: int) -> list[str]:
    """Gathers of base items the goal never needs (else any base item but the goal itself, which
    would end the episode early)."""
    base = [i for i in range(world.n_items) if world.is_base(i) and i != goal]
    useless = [i for i in base if i not in world.ancestors[goal]]
    if not (useless or base):
        raise ValueError("this world has no base item besides the goal to waste a turn on")
    return [world.action_text(("gather", i)) for i in (useless or base)]


def _with_errors(world: World, pattern: str, goal: int, inv0: dict[int, int], gold: list[str], n: int,
                 rng: random.Random) -> list[str]:
    """D1/D2: ``n`` failed actions, each before its own gold action (distinct spots, so never the
    same failure twice in a row); where the plan has too few spots, the rest are D3 wasted turns."""
    states = _prefix_states(world, inv0, gold)
    if pattern == "D1":            # the final synthesis, tried before gold[k]
        spots = {k: gold[-1] for k in range(len(gold) - 1) if not _feasible(world, states[k], gold[-1])}
    else:                          # D2: a synthesis tried before gold[k - 1], its last input
        spots = {k - 1: gold[k] for k in range(1, len(gold))
                 if not _is_gather(world, gold[k]) and not _feasible(world, states[k - 1], gold[k])}
    chosen = set(rng.sample(sorted(spots), min(n, len(spots))))
    actions = [a for k, g in enumerate(gold) for a in ([spots[k], g] if k in chosen else [g])]
    return _with_waste(actions, n - len(chosen), _waste_pool(world, goal), rng)


def _with_waste(actions: list[str], n: int, pool: list[str], rng: random.Random) -> list[str]:
    for _ in range(n):             # never after the last action: that one reaches the goal
        actions.insert(rng.randint(0, len(actions) - 1), rng.choice(pool))
    return actions


def _heuristic(world: World, goal: int, inv0: dict[int, int], gold: list[str], n: int,
               rng: random.Random) -> list[str]:
    """D4: the gathers of the plan first, ``n`` surplus units among them, then the syntheses; the
    goal-reaching action stays last and the goal itself is never a surplus unit."""
    body, final = gold[:-1], gold[-1:]
    gathers = [a for a in body if _is_gather(world, a)]
    crafts = [a for a in body if not _is_gather(world, a)]
    surplus = sorted(set(gathers)) or [world.action_text(("gather", i)) for i in sorted(world.ancestors[goal])
                                       if world.is_base(i)] or _waste_pool(world, goal)
    for _ in range(n):
        gathers.insert(rng.randint(0, len(gathers)), rng.choice(surplus))
    return gathers + crafts + final


def honest(world: World, goal: int, inv0: dict[int, int], actions: list[str]) -> bool:
    """Whether ``actions`` reach the goal with their last action and not before, and never try
    the same failed action twice in a row: what every suboptimal row must satisfy."""
    inv, last_failed = dict(inv0), None
    for a in actions:
        if inv.get(goal, 0) >= 1:
            return False
        failed = apply_action(world, inv, a) is not None
        if failed and a == last_failed:
            return False
        last_failed = a if failed else None
    return inv.get(goal, 0) >= 1


def act(pattern: str, world: World, goal: int, inv0: dict[int, int], gold: list[str],
        rng: random.Random, defect_every: int = DEFECT_EVERY) -> list[str]:
    """The actions an agent following ``pattern`` takes (``gold`` for optimal patterns).

    A suboptimal pattern adds ``1 + len(gold) // defect_every`` defects to ``gold`` and satisfies
    `honest`: the env ends the episode when the goal is held, and an agent that has just seen an
    error does not repeat it.  In worlds built by `graph` (one rule per verb and output) every
    draw is honest; a hand-written rules.json with shared (verb, output) rules could make extra
    stock fire another rule, so a draw is checked and redrawn."""
    if pattern in OPTIMAL:
        return list(gold)
    if pattern not in SUBOPTIMAL:
        raise ValueError(f"unknown pattern '{pattern}'")
    if defect_every < 1:
        raise ValueError(f"defect_every must be >= 1, got {defect_every}")
    if not gold:
        raise ValueError("a suboptimal row needs a task whose goal is not held yet")
    n = 1 + len(gold) // defect_every
    for _ in range(_DRAWS):
        if pattern == "D4":
            actions = _heuristic(world, goal, inv0, gold, n, rng)
        elif pattern == "D3":
            actions = _with_waste(list(gold), n, _waste_pool(world, goal), rng)
        else:
            actions = _with_errors(world, pattern, goal, inv0, gold, n, rng)
        if honest(world, goal, inv0, actions):
            return actions
    raise ValueError(f"could not place {pattern}'s defects in this plan without breaking it: {gold}")


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


def believed_inventory(world: World, inv: dict[int, int], action: str) -> dict[int, int]:
    """The state the agent expects after ``action``: it always believes its action works.

    * an action the env accepts: the true next state;
    * a rule action that fails for missing inputs: the rule the agent believed in is the first
      rule for (verb, item) in rules order, as in the env; the units it holds of that rule's
      inputs are consumed (only what it holds, clamped at zero) and one output is added;
    * any other failed action (unknown verb or item, no such rule, gathering a crafted item,
      malformed text): the state unchanged, since no rule says what it would do."""
    after = dict(inv)
    if apply_action(world, after, action) is None:
        return after
    verb, _, name = action.strip().partition(" ")
    item = world.index.get(name.strip())
    rules = world.rule_for_action.get((verb, item), []) if item is not None else []
    after = dict(inv)
    if rules:
        for i, c in world.rules[rules[0]].inputs:
            if after.get(i, 0) > c:
                after[i] -= c
            else:
                after.pop(i, None)
        after[item] = after.get(item, 0) + 1
    return after


def predict_line(world: World, inv: dict[int, int], action: str) -> str:
    """The world-model line: current state -> action -> the state the agent expects next
    (`believed_inventory`).  A suboptimal agent's wrong belief is written down as it would have
    been, consistent with the rule it tried, and the error observation that follows corrects it."""
    return (f"Predict: {world.format_inventory(inv)} -> {action} -> "
            f"{world.format_inventory(believed_inventory(world, inv, action))}")


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
