"""One corpus row: a task played through the environment by a pattern, written as text.

Rows are produced by *running* the environment, so every observation in ``text`` is what the
environment said; `verify_row` then replays the row from its text alone (parse each agent turn,
step a fresh environment, compare every observation) before a row is written to disk.

Chain-of-thought formats:
  ``world_model``   pattern line, then ``Predict: state -> action -> expected next state``, then the action
  ``pattern_only``  pattern line, then the action (the planning pattern without the world model)
  ``direct``        the action line alone
The pattern classifier reads the pattern line, so it recognises a row's pattern in the first
two formats and says ``Others`` for ``direct``.
"""
from __future__ import annotations

import random

from .cli import UsageError
from .env import PlanningEnv, Task
from .patterns import DEFECT_EVERY, OTHERS, act, classify_trajectory, pattern_line, predict_line
from .solver import Solver
from .tasks import BINS, difficulty
from .text import ACTION_PREFIX, join_turns, parse_action, split_turns
from .world import World

COT_FORMATS = ("world_model", "pattern_only", "direct")
PATTERN_LINE_FORMATS = ("world_model", "pattern_only")     # formats whose turns open with the pattern line
ROW_FIELDS = ("id", "domain", "recipe", "split", "horizon", "difficulty", "pattern", "cot_format",
              "goal", "initial_inventory", "actions", "gold_actions", "success", "text")
_NO_LIMIT = 10_000


class RowError(UsageError, ValueError):
    """A row whose text, actions or outcome disagree with the environment."""


def agent_turn(world: World, pattern: str, cot_format: str, goal: int, actions: list[str], k: int,
               inventory: dict[int, int]) -> str:
    action_line = f"{ACTION_PREFIX} {actions[k]}"
    if cot_format == "direct":
        return action_line
    lines = [pattern_line(pattern, world, goal, actions, k)]
    if cot_format == "world_model":
        lines.append(predict_line(world, inventory, actions[k]))
    return "\n".join([*lines, action_line])


def build_row(world: World, task: Task, gold: list[str], pattern: str, cot_format: str, split: str,
              row_id: str, rng: random.Random, defect_every: int = DEFECT_EVERY, bins: dict = BINS) -> dict:
    """Play ``task`` as ``pattern`` would (`act`; ``defect_every`` sets how many defects a
    suboptimal row gets) through a fresh environment and render the row."""
    if cot_format not in COT_FORMATS:
        raise ValueError(f"unknown cot_format '{cot_format}' (choose from {', '.join(COT_FORMATS)})")
    inv0 = dict(task.inventory)
    actions = act(pattern, world, task.goal, inv0, gold, rng, defect_every)
    env = PlanningEnv(world, max_steps=_NO_LIMIT)
    obs, _ = env.reset(options={"task": task})
    observations, turns, success = [obs], [], False
    for k in range(len(actions)):
        turns.append(agent_turn(world, pattern, cot_format, task.goal, actions, k, env.inventory))
        obs, _, success, _, _ = env.step(actions[k])
        observations.append(obs)
    return {
        "id": row_id, "domain": world.domain, "recipe": world.recipe, "split": split,
        "horizon": len(gold), "difficulty": difficulty(len(gold), bins), "pattern": pattern,
        "cot_format": cot_format, "goal": world.names[task.goal],
        "initial_inventory": [{"item": world.names[i], "count": c} for i, c in task.inventory],
        "actions": actions, "gold_actions": list(gold), "success": bool(success),
        "text": join_turns(observations, turns),
    }


def task_of_row(world: World, row: dict) -> Task:
    try:
        inv = tuple(sorted((world.index[e["item"]], int(e["count"])) for e in row["initial_inventory"]))
        return Task(world.index[row["goal"]], inv)
    except (KeyError, TypeError, ValueError) as e:
        raise RowError(f"row {row.get('id')}: bad goal or initial_inventory ({e!r})") from None


def verify_row(world: World, row: dict, solver: Solver | None = None, bins: dict = BINS) -> None:
    """Replay ``row`` from its text through a fresh environment; raise RowError on any mismatch."""
    rid = row.get("id")
    missing = [f for f in ROW_FIELDS if f not in row]
    if missing:
        raise RowError(f"row {rid}: missing fields {missing}")
    task = task_of_row(world, row)
    turns = split_turns(row["text"])
    env = PlanningEnv(world, max_steps=_NO_LIMIT)
    obs, _ = env.reset(options={"task": task})
    if not turns or turns[0] != ("env", obs):
        raise RowError(f"row {rid}: first observation differs from the environment's")
    taken, success = [], False
    for k in range(1, len(turns), 2):
        role, content = turns[k]
        action = parse_action(content) if role == "agent" else None
        if action is None:
            raise RowError(f"row {rid}: turn {k} is not an agent turn with an action")
        if env.done:               # the env ended the episode: nothing may follow
            raise RowError(f"row {rid}: action '{action}' after the episode ended")
        taken.append(action)
        obs, _, success, _, _ = env.step(action)
        if k + 1 >= len(turns) or turns[k + 1] != ("env", obs):
            raise RowError(f"row {rid}: observation after '{action}' differs from the environment's")
    if taken != list(row["actions"]):
        raise RowError(f"row {rid}: actions field differs from the actions in the text")
    if success != row["success"]:
        raise RowError(f"row {rid}: success is {row['success']} but the replay says {success}")
    gold = PlanningEnv(world, max_steps=_NO_LIMIT)
    gold.reset(options={"task": task})
    ok = False
    for action in row["gold_actions"]:
        _, _, ok, _, info = gold.step(action)
        if not info["valid"]:
            raise RowError(f"row {rid}: gold action '{action}' is invalid")
    if not ok or len(row["gold_actions"]) != row["horizon"]:
        raise RowError(f"row {rid}: gold plan does not reach the goal in {row['horizon']} steps")
    if solver is not None and solver.plan_length(task.goal, dict(task.inventory)) != row["horizon"]:
        raise RowError(f"row {rid}: the solver's shortest plan is not {row['horizon']} steps")
    if row["difficulty"] != difficulty(row["horizon"], bins):
        raise RowError(f"row {rid}: difficulty {row['difficulty']} does not match horizon {row['horizon']}")
    expected = row["pattern"] if row["cot_format"] in PATTERN_LINE_FORMATS else OTHERS
    if classify_trajectory(row["text"]) != expected:
        raise RowError(f"row {rid}: the classifier does not recognise pattern {row['pattern']}")
