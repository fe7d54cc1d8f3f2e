"""The multi-turn text environment (Gymnasium-style API, no gymnasium dependency).

    env = PlanningEnv(world, max_steps=20)
    obs, info = env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step("brew moon elixir")

Action grammar, one line: ``<verb> <item>`` — the verb is the first word, the item the rest of
the line.  Semantics (independent tools rely on them, keep them exact):

* the domain's gather verb on a base item adds one unit of it;
* ``<verb> <output>`` applies the first rule in ``rules.json`` order with that verb and that
  output whose inputs the inventory holds, consuming the inputs and adding one output;
* anything else (malformed, unknown verb or item, missing inputs) is a turn that returns an
  ``Error: ...`` observation and leaves the inventory unchanged.  Never an exception.  How much
  a missing-inputs error says is the world's ``errors`` setting: ``terse`` (the default: only
  that inputs are missing) or ``full`` (which inputs, and how many).

The episode terminates with reward 1 when the goal is held, and is truncated at ``max_steps``
turns (invalid turns count: they cost the agent a turn, as in the paper's step limit).
"""
from __future__ import annotations

from dataclasses import dataclass

from .world import World

EVAL_STEP_LIMIT = 20


@dataclass(frozen=True)
class Task:
    """A goal item and an initial inventory (item index -> count), in one world."""
    goal: int
    inventory: tuple[tuple[int, int], ...] = ()

    @property
    def key(self) -> tuple:
        return (self.goal, self.inventory)

    @property
    def combo(self) -> tuple:
        """The item-index combination (goal, held item set): the unit held out for OOD tests."""
        return (self.goal, tuple(i for i, _ in self.inventory))


def apply_action(world: World, inv: dict[int, int], action: str) -> str | None:
    """Apply ``action`` to ``inv`` in place.  Returns None on success, else the error text."""
    if not isinstance(action, str):
        return "action must be text"
    if "\n" in action.strip() or "\r" in action.strip():
        return "action must be one line"
    verb, _, item_name = action.strip().partition(" ")
    item_name = item_name.strip()
    if not verb or not item_name:
        return "expected '<verb> <item>'"
    if verb not in world.verbs:
        return f"unknown verb '{verb}'"
    item = world.index.get(item_name)
    if item is None:
        return f"unknown item '{item_name}'"
    if verb == world.gather_verb:
        if not world.is_base(item):
            return f"cannot {verb} {item_name}: not a base item"
        inv[item] = inv.get(item, 0) + 1
        return None
    rules = world.rule_for_action.get((verb, item))
    if not rules:
        return f"no rule to {verb} {item_name}"
    for r in rules:
        inputs = world.rules[r].inputs
        if all(inv.get(i, 0) >= c for i, c in inputs):
            for i, c in inputs:
                inv[i] -= c
                if inv[i] == 0:
                    del inv[i]
            inv[item] = inv.get(item, 0) + 1
            return None
    if world.errors == "terse":
        return f"cannot {verb} {item_name}: missing inputs"
    need = world.rules[rules[0]].inputs
    missing = ", ".join(f"{world.names[i]} x{c - inv.get(i, 0)}" for i, c in need if inv.get(i, 0) < c)
    return f"cannot {verb} {item_name}: missing {missing}"


class PlanningEnv:
    def __init__(self, world: World, max_steps: int = EVAL_STEP_LIMIT):
        self.world, self.max_steps = world, max_steps
        self.task: Task | None = None
        self.inventory: dict[int, int] = {}
        self.steps = 0
        self.done = True

    # ----- text ---------------------------------------------------------------------------------
    def _observation(self, result: str) -> str:
        w = self.world
        return (f"Result: {result}\nGoal: {w.names[self.task.goal]}\n"
                f"Inventory: {w.format_inventory(self.inventory)}")

    def _info(self, valid: bool, error: str | None) -> dict:
        return {"valid": valid, "error": error, "success": self.success, "steps": self.steps,
                "inventory": dict(self.inventory)}

    @property
    def success(self) -> bool:
        return self.task is not None and self.inventory.get(self.task.goal, 0) >= 1

    # ----- API ----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Start the task in ``options["task"]`` (a `Task`).  ``seed`` is accepted for API
        compatibility; tasks come from `planning_gym.tasks`, which owns task randomness."""
        task = (options or {}).get("task")
        if not isinstance(task, Task):
            raise TypeError("reset(options={'task': Task(...)}) is required")
        if not 0 <= task.goal < self.world.n_items or any(not 0 <= i < self.world.n_items or c < 1
                                                          for i, c in task.inventory):
            raise ValueError("task refers to items outside this world")
        self.task, self.inventory, self.steps = task, dict(task.inventory), 0
        self.done = self.success
        return self._observation("new task"), self._info(True, None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self.done:
            return self._observation("Error: the episode is over"), 0.0, self.success, not self.success, \
                self._info(False, "the episode is over")
        self.steps += 1
        error = apply_action(self.world, self.inventory, action)
        if error is None:
            result = f"did {action.strip()}"
        else:
            result = f"Error: {error}"
        terminated = self.success
        truncated = not terminated and self.steps >= self.max_steps
        self.done = terminated or truncated
        if terminated:
            result += ". Goal reached"
        reward = 1.0 if terminated else 0.0
        return self._observation(result), reward, terminated, truncated, self._info(error is None, error)
