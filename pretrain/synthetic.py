"""A small, self-contained synthetic planning corpus in the gym's text protocol.

Why this exists: the tokenizer, trainer and benchmark must be testable and benchmarkable without
the gym's corpus generator. These rows follow the same protocol (`planning_gym.text`): a goal and
inventory observation, then agent turns (a world-model line and one ``Action:`` line) answered by
environment observations. The little world is consistent (gathering adds one unit, a recipe
consumes its inputs), so a model can actually learn it, and trajectory lengths vary from 1 to
about 13 actions, as in the paper, which is what makes packing pay off against padding.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from planning_gym.text import join_turns

BASES = ["ash root", "moon dust", "ember salt", "river clay", "frost petal", "iron moss"]
PRODUCTS = ["moon elixir", "ember glass", "frost ink", "clay golem", "root tonic", "star lantern"]
VERBS = {"gather": "gather", "craft": "brew"}


def _recipes(seed: int) -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    return {p: {b: rng.randint(1, 4) for b in rng.sample(BASES, rng.randint(2, 3))} for p in PRODUCTS}


def _fmt(inv: dict[str, int]) -> str:
    held = [f"{k} x{v}" for k, v in sorted(inv.items()) if v > 0]
    return ", ".join(held) if held else "nothing"


def synthetic_row(rng: random.Random, recipes: dict[str, dict[str, int]], idx: int, split: str) -> dict:
    """One trajectory row with the export-contract fields the pre-training code reads."""
    goal = rng.choice(PRODUCTS)
    need = recipes[goal]
    inv = {b: rng.randint(0, c) for b, c in need.items()}
    if rng.random() < 0.3:  # some clutter in the inventory
        extra = rng.choice(BASES)
        inv[extra] = inv.get(extra, 0) + rng.randint(1, 2)
    observations = [f"Goal: {goal}\nInventory: {_fmt(inv)}"]
    turns: list[str] = []
    plan = [b for b, c in need.items() for _ in range(max(0, c - inv.get(b, 0)))]
    wasted = rng.random() < 0.25
    actions: list[str] = []
    while True:
        if wasted and turns and rng.random() < 0.5:
            action, wasted = f"{VERBS['craft']} {goal}", False  # premature attempt: an error turn
            missing = ", ".join(b for b, c in need.items() if inv.get(b, 0) < c)
            obs = f"Error: cannot {action}, missing {missing}.\nInventory: {_fmt(inv)}"
        elif plan:
            item = plan.pop(0)
            action = f"{VERBS['gather']} {item}"
            inv[item] = inv.get(item, 0) + 1
            obs = f"You gather {item}.\nInventory: {_fmt(inv)}"
        else:
            action = f"{VERBS['craft']} {goal}"
            for b, c in need.items():
                inv[b] -= c
            inv[goal] = 1
            obs = f"You brew {goal}.\nInventory: {_fmt(inv)}\nGoal reached."
        turns.append(f"Plan: {action} -> {_fmt(inv)}\nAction: {action}")
        observations.append(obs)
        actions.append(action)
        if inv.get(goal):
            break
    return {
        "id": f"syn-{split}-{idx}", "domain": "syn", "recipe": "A", "split": split,
        "horizon": len(actions), "goal": goal, "actions": actions, "success": True,
        "text": join_turns(observations, turns),
    }


def synthetic_rows(n: int, seed: int = 0, split: str = "pretrain", recipe_seed: int = 0) -> list[dict]:
    rng = random.Random(f"{seed}-{split}")
    recipes = _recipes(recipe_seed)
    return [synthetic_row(rng, recipes, i, split) for i in range(n)]


def write_synthetic_corpus(folder: str | Path, n_pretrain: int = 400, n_test: int = 60, seed: int = 0) -> Path:
    """Write pretrain/posttrain/test_id/test_ood JSONL files into ``folder``; return it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sizes = {"pretrain": n_pretrain, "posttrain": n_test, "test_id": n_test, "test_ood": n_test}
    for split, n in sizes.items():
        rows = synthetic_rows(n, seed=seed, split=split, recipe_seed=seed + (1 if split == "test_ood" else 0))
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return folder
