"""The optional Gymnasium environment (`planning_gym.gym_env`): API checks, registration, determinism."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

gymnasium = pytest.importorskip("gymnasium")

from gymnasium.utils.env_checker import check_env  # noqa: E402

from planning_gym.config import SCALES  # noqa: E402
from planning_gym.env import Task  # noqa: E402
from planning_gym.gym_env import ENV_IDS, OBS_CHARSET, PlanningGymEnv, register_envs  # noqa: E402
from planning_gym.solver import Solver  # noqa: E402
from planning_gym.tasks import BINS, MAX_HORIZON  # noqa: E402


def _checked(env) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("domain", sorted(ENV_IDS))
def test_check_env_passes(domain):
    messages = _checked(PlanningGymEnv(domain=domain).unwrapped)
    assert not [m for m in messages if "spec" not in m], messages


def test_make_registered_ids():
    register_envs()                                     # idempotent
    for domain, env_id in ENV_IDS.items():
        env = gymnasium.make(env_id)
        assert env.unwrapped.domain == domain
        obs, info = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        assert {"goal", "horizon", "difficulty"} <= set(info)
        env.close()
    env = gymnasium.make("planning_gym.gym_env:planning_gym/LF-v0", scale="small")   # imports the module itself
    assert env.unwrapped.scale == "small" and env.reset(seed=2)[1]["goal"]
    env = gymnasium.make("planning_gym/FA-v0", difficulty="mid", max_steps=7, render_mode="ansi")
    messages = _checked(env.unwrapped)                  # with a spec: the render-mode checks run too
    assert not messages, messages
    obs, info = env.reset(seed=1)
    assert info["difficulty"] == "mid" and env.render() == obs


def test_same_seed_same_task_and_bins():
    env = PlanningGymEnv(domain="lf", scale="small")
    first = [env.reset(seed=s)[1] for s in range(12)]
    again = [PlanningGymEnv(domain="lf", scale="small").reset(seed=s)[1] for s in range(12)]
    assert first == again
    assert len({(i["goal"], tuple(sorted(i["initial_inventory"].items()))) for i in first}) > 6
    assert {i["difficulty"] for i in first} == set(BINS)    # difficulty=None draws every bin
    for bin_name, (lo, hi) in BINS.items():
        env = PlanningGymEnv(domain="ea", difficulty=bin_name)
        for s in range(4):
            _, info = env.reset(seed=s)
            assert info["difficulty"] == bin_name and lo <= info["horizon"] <= hi


def test_gold_plan_succeeds_and_step_limit_truncates():
    env = PlanningGymEnv(domain="fa", difficulty="short", max_steps=20)
    obs, info = env.reset(seed=5)
    solver = Solver(env.world, budget=MAX_HORIZON)
    plan = solver.gold_plan(env.task.goal, dict(env.task.inventory))
    assert len(plan) == info["horizon"]
    for k, action in enumerate(plan):
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.observation_space.contains(obs) and info["valid"]
        assert terminated == (k == len(plan) - 1) and not truncated
    assert reward == 1.0 and info["success"]

    env = PlanningGymEnv(domain="ea", max_steps=3)
    env.reset(seed=0)
    results = [env.step("assemble nothing") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True] and all(r[1] == 0.0 for r in results)


def test_options_task_and_charset():
    env = PlanningGymEnv(domain="ea", scale="tiny")
    goal = next(i for i in range(env.world.n_items) if not env.world.is_base(i))
    obs, info = env.reset(seed=0, options={"task": Task(goal)})
    assert info["goal"] == env.world.names[goal] and info["initial_inventory"] == {}
    for scale in SCALES:
        for domain in ENV_IDS:
            w = PlanningGymEnv(domain=domain, scale=scale).world
            assert set("".join(w.names) + "".join(w.verbs)) <= set(OBS_CHARSET)


def test_bad_arguments():
    with pytest.raises(ValueError):
        PlanningGymEnv(scale="huge")
    with pytest.raises(ValueError):
        PlanningGymEnv(difficulty="epic")
    with pytest.raises(ValueError):
        PlanningGymEnv(max_steps=0)
    with pytest.raises(RuntimeError):
        PlanningGymEnv().step("gather x")


def test_planning_gym_imports_without_gymnasium():
    code = ("import sys; sys.modules['gymnasium'] = None\n"
            "import planning_gym, planning_gym.env, planning_gym.world, planning_gym.tasks, planning_gym.corpus\n"
            "assert 'planning_gym.gym_env' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_exclude_corpus_keeps_its_test_tasks_out(tmp_path):
    from planning_gym.config import CorpusConfig
    from planning_gym.corpus import read_split, write_corpus
    from planning_gym.env import Task
    cfg = CorpusConfig.from_scale("tiny")
    write_corpus(cfg, tmp_path / "c", workers=1, progress=False)
    plain = PlanningGymEnv(scale="tiny", difficulty="short")
    env = PlanningGymEnv(scale="tiny", difficulty="short", exclude_corpus=str(tmp_path / "c"))
    tests = {(r["goal"], tuple(sorted((e["item"], e["count"]) for e in r["initial_inventory"])))
             for r in read_split(tmp_path / "c", "test_id")}
    assert env.excluded and len(env.excluded) == len(tests)

    def drawn(e, n):
        out = []
        for s in range(n):
            _, info = e.reset(seed=s)
            out.append((info["goal"], tuple(sorted(info["initial_inventory"].items()))))
        return out
    assert not set(drawn(env, 150)) & tests
    # the mechanism: exclude exactly what the plain environment draws, and none of it comes up
    seen = drawn(plain, 20)
    w = env.world
    env.excluded = {Task(w.index[g], tuple(sorted((w.index[i], c) for i, c in inv))).key for g, inv in seen}
    assert not set(drawn(env, 20)) & set(seen)
    with pytest.raises(ValueError, match="not a corpus of this world"):
        PlanningGymEnv(scale="tiny", seed=1, exclude_corpus=str(tmp_path / "c"))
