"""A real Gymnasium environment over `planning_gym.env.PlanningEnv` (optional: ``pip install .[gymnasium]``).

    import gymnasium as gym
    import planning_gym.gym_env                     # registers planning_gym/{FA,LF,EA}-v0
    env = gym.make("planning_gym/FA-v0", difficulty="short")
    obs, info = env.reset(seed=0)                  # info: goal, horizon, difficulty, ...
    obs, reward, terminated, truncated, info = env.step("gather moon dust")

Observations and actions are text (`gymnasium.spaces.Text`).  ``reset`` draws one task from the
world with `planning_gym.tasks.TaskSampler`, seeded only from gymnasium's ``self.np_random``, so
the same ``reset(seed=...)`` always gives the same task.  The sampler is built once per
environment with the world seed, as a corpus with that seed builds it, so the out-of-distribution
hold-out is the corpus's: every task drawn here is an in-distribution (``held_out=False``) task.
The step semantics, the observations and the step limit are exactly `PlanningEnv`'s.  An error
observation echoes the action, so observations lie in ``observation_space`` for actions drawn
from ``action_space`` (one line of printable ASCII, bounded length).

Importing `planning_gym` never needs gymnasium; importing this module does, and registers the ids
(``gym.make("planning_gym.gym_env:planning_gym/FA-v0")`` imports it on the way).
"""
from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium import spaces

from .config import SCALES, scale_graph
from .env import EVAL_STEP_LIMIT, PlanningEnv, Task
from .graph import GraphConfigError
from .tasks import BINS, TaskSampler
from .world import World

#: Every character an observation can hold: the templates, item names (lowercase ASCII words),
#: counts, and an action echoed back in an error (actions are drawn from `ACTION_CHARSET`).
OBS_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"
#: Actions are one line of printable ASCII.
ACTION_CHARSET = string.ascii_letters + string.digits + string.punctuation + " "
ENV_IDS = {"fa": "planning_gym/FA-v0", "lf": "planning_gym/LF-v0", "ea": "planning_gym/EA-v0"}
_POOL = "gym"          # the task stream's pool name; each reset adds a number drawn from np_random


def _sample_task(sampler: TaskSampler, pool: str, bin_name: str, exclude: set) -> Task:
    """One in-distribution task of ``bin_name`` (the single place that knows `TaskSampler.sample`)."""
    return sampler.sample(pool, bin_name, 1, held_out=False, exclude=exclude)[0]


class PlanningGymEnv(gymnasium.Env):
    """One domain's planning world as a text-in, text-out Gymnasium environment.

    ``domain``: ``fa`` | ``lf`` | ``ea`` (or a domain .json path); ``scale``: the graph size
    (``tiny`` | ``small`` | ``paper``); ``difficulty``: ``short`` | ``mid`` | ``long``, or None for
    a bin drawn per reset among those this world has tasks for; ``max_steps``: the step limit
    (truncation); ``seed``: the world seed (graph structure and names), not the task seed.
    The world is the corpus default (multi-path, terse errors).  Tasks come from the training
    distribution (never an OOD task); ``exclude_corpus`` (a corpus folder of the same world)
    keeps that corpus's ``test_id`` tasks out too, so training on this environment and testing
    on that corpus do not share a task.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, domain: str = "fa", scale: str = "tiny", difficulty: str | None = None,
                 max_steps: int = EVAL_STEP_LIMIT, seed: int = 0, render_mode: str | None = None,
                 exclude_corpus: str | None = None):
        if scale not in SCALES:
            raise ValueError(f"unknown scale '{scale}' (choose from {', '.join(SCALES)})")
        if difficulty is not None and difficulty not in BINS:
            raise ValueError(f"unknown difficulty '{difficulty}' (choose from {', '.join(BINS)}, or None)")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"unknown render_mode '{render_mode}' (choose from ansi, or None)")
        self.domain, self.scale, self.difficulty = domain, scale, difficulty
        self.max_steps, self.world_seed, self.render_mode = max_steps, seed, render_mode
        self.world = World.build(domain, scale_graph(scale), seed, paths="multi")
        self.env = PlanningEnv(self.world, max_steps=max_steps)
        self.sampler = TaskSampler(self.world, seed)
        self.excluded: set = set()
        if exclude_corpus is not None:
            from .corpus import read_split, read_worlds
            from .trajectory import task_of_row
            worlds = read_worlds(exclude_corpus)
            if [w.to_rules_json() for w in worlds.values()] != [self.world.to_rules_json()] * len(worlds) \
                    or (self.world.domain, "A") not in worlds:
                raise ValueError(f"{exclude_corpus} is not a corpus of this world ({domain}, {scale}, seed {seed})")
            self.excluded = {task_of_row(self.world, r).key for r in read_split(exclude_corpus, "test_id")}
        self._empty_bins: set[str] = set()

        name_len = max(len(n) for n in self.world.names)
        verb_len = max(len(v) for v in self.world.verbs)
        action_len = max(64, 2 * (verb_len + 1 + name_len))
        entry_len = name_len + len(" x") + 6 + len(", ")       # "name x123456, "
        obs_len = (len("Result: Error: ") + 2 * action_len + 3 * entry_len + 64
                   + len("\nGoal: ") + name_len + len("\nInventory: ") + self.world.n_items * entry_len)
        self.action_space = spaces.Text(max_length=action_len, min_length=1, charset=ACTION_CHARSET)
        self.observation_space = spaces.Text(max_length=obs_len, min_length=1, charset=OBS_CHARSET)
        self.task: Task | None = None
        self._task_info: dict[str, Any] = {}
        self._last_obs = ""

    # ----- API ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        """Draw a task (from ``self.np_random``), or start ``options["task"]`` (a `Task`)."""
        super().reset(seed=seed)
        task = (options or {}).get("task")
        bin_name = None
        if task is None:
            task, bin_name = self._draw()
        obs, info = self.env.reset(options={"task": task})      # checks a given task
        horizon = self.sampler.horizon(task)
        bin_name = bin_name or _bin_of(horizon)
        self.task = task
        w = self.world
        self._task_info = {"goal": w.names[task.goal], "horizon": horizon, "difficulty": bin_name,
                           "initial_inventory": {w.names[i]: c for i, c in task.inventory}}
        self._last_obs = obs
        return obs, {**info, **self._fresh_task_info()}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._last_obs = obs
        return obs, float(reward), bool(terminated), bool(truncated), {**info, **self._fresh_task_info()}

    def _fresh_task_info(self) -> dict[str, Any]:
        """The task's fields as new objects each call (callers may keep and modify infos)."""
        return {**self._task_info, "initial_inventory": dict(self._task_info["initial_inventory"])}

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    # ----- tasks --------------------------------------------------------------------------------
    def _draw(self) -> tuple[Task, str]:
        """A task of the configured bin, or of a bin drawn uniformly among the non-empty ones."""
        bins = [self.difficulty] if self.difficulty else list(BINS)
        order = [bins[int(i)] for i in self.np_random.permutation(len(bins))]   # same draws whatever
        pool = f"{_POOL}/{int(self.np_random.integers(2**63 - 1))}"              # bins proved empty
        for bin_name in order:
            if bin_name in self._empty_bins:
                continue
            try:
                return _sample_task(self.sampler, pool, bin_name, self.excluded), bin_name
            except GraphConfigError:
                if self.difficulty:
                    raise
                self._empty_bins.add(bin_name)
        raise GraphConfigError(f"this {self.scale} {self.domain} world has no in-distribution task of any difficulty")


def _bin_of(horizon: int | None) -> str | None:
    if horizon is None:
        return None
    return next((name for name, (lo, hi) in BINS.items() if lo <= horizon <= hi), None)


def register_envs() -> None:
    """Register ``planning_gym/FA-v0``, ``LF-v0`` and ``EA-v0`` (idempotent)."""
    for domain, env_id in ENV_IDS.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=PlanningGymEnv, kwargs={"domain": domain},
                               max_episode_steps=None)


register_envs()
