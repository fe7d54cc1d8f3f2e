"""Planning patterns over many tasks: suboptimal rows stop at the goal, never repeat a failed
action back to back, predict what the agent believed, and every chain-of-thought format replays.

Tasks are built here (a random goal, random held units of its ancestors), not drawn by
`TaskSampler`, so these tests do not depend on the sampler's distribution.  Horizon-1 tasks are
kept on purpose: a base-item goal is where D4 used to act after the goal was held.
"""
import random

import pytest

from planning_gym.config import scale_graph
from planning_gym.env import PlanningEnv, Task, apply_action
from planning_gym.patterns import PATTERNS, SUBOPTIMAL, act, classify_trajectory, predict_line
from planning_gym.solver import Solver
from planning_gym.text import join_turns, split_turns
from planning_gym.trajectory import COT_FORMATS, RowError, build_row, verify_row
from planning_gym.world import World

ROW_SEEDS = range(3)


def _tasks(world: World, solver: Solver, n: int, seed: int) -> list[tuple[Task, list[str]]]:
    rng, out = random.Random(seed), []
    while len(out) < n:
        goal = rng.randrange(world.n_items)
        pool = sorted(world.ancestors[goal])
        inv = {i: rng.randint(1, 2) for i in rng.sample(pool, rng.randint(0, min(3, len(pool))))}
        task = Task(goal, tuple(sorted(inv.items())))
        h = solver.plan_length(goal, dict(task.inventory))
        if h is not None and 1 <= h <= 13:
            out.append((task, solver.gold_plan(goal, dict(task.inventory))))
    return out


@pytest.fixture(scope="module")
def cases():
    """(world, solver, task, gold) over the tiny and small worlds, recipes A and B."""
    out = []
    for scale, seed, recipe, n in (("tiny", 0, "A", 120), ("small", 0, "A", 160), ("small", 1, "B", 120)):
        world = World.build("fa", scale_graph(scale), seed, recipe)
        solver = Solver(world, budget=13)
        out += [(world, solver, t, g) for t, g in _tasks(world, solver, n, seed + 10)]
    assert {len(g) for *_, g in out} >= {1, 2, 6, 9}          # short, mid and long plans
    return out


def _rows(cases, patterns, cot_format="world_model"):
    for world, solver, task, gold in cases:
        for pattern in patterns:
            for s in ROW_SEEDS:
                row = build_row(world, task, gold, pattern, cot_format, "pretrain", f"{pattern}-{s}",
                                random.Random(s))
                yield world, solver, task, row


def _observations(row) -> list[str]:
    return [c for role, c in split_turns(row["text"]) if role == "env"][1:]


def _failed(obs: str) -> bool:
    return obs.startswith("Result: Error:")


def test_suboptimal_rows_stop_when_the_goal_is_held(cases):
    """No action after success (the env terminates), yet every row is longer than its gold plan."""
    for world, solver, task, row in _rows(cases, SUBOPTIMAL):
        env = PlanningEnv(world, max_steps=10_000)
        env.reset(options={"task": task})
        for k, action in enumerate(row["actions"]):
            assert not env.done, (row["pattern"], row["goal"], row["actions"], k)
            env.step(action)
        assert env.success and row["success"]
        assert "the episode is over" not in row["text"]
        assert len(row["actions"]) > len(row["gold_actions"]), row["pattern"]
        verify_row(world, row, solver)


def test_no_failed_action_is_repeated_back_to_back(cases):
    """D1/D2 insert errors, each at its own spot: the agent never retries the same failure at once."""
    n_errors = 0
    for world, _, task, row in _rows(cases, ("D1", "D2")):
        obs, actions = _observations(row), row["actions"]
        fails = [_failed(o) for o in obs]
        n_errors += sum(fails)
        for k in range(len(actions) - 1):
            assert not (fails[k] and fails[k + 1] and actions[k] == actions[k + 1]), (row["pattern"], actions)
        if len(row["gold_actions"]) >= 2:       # long enough for the pattern's own mistake
            assert any(fails), (row["pattern"], actions)
    assert n_errors > 0


@pytest.mark.parametrize("defect_every", [6, 3, 1])
def test_defect_count_is_one_plus_horizon_over_defect_every(cases, defect_every):
    for world, _, task, gold in cases[::3]:
        for pattern in SUBOPTIMAL:
            actions = act(pattern, world, task.goal, dict(task.inventory), gold, random.Random(len(gold)),
                          defect_every=defect_every)
            assert len(actions) - len(gold) == 1 + len(gold) // defect_every, (pattern, gold, actions)
    world, _, task, gold = cases[0]
    with pytest.raises(ValueError):
        act("D1", world, task.goal, dict(task.inventory), gold, random.Random(0), defect_every=0)


def _believed(world: World, inv: dict[int, int], action: str) -> dict[int, int]:
    """The test's own statement of the definition (see `predict_line`)."""
    after = dict(inv)
    if apply_action(world, after, action) is None:
        return after
    verb, _, name = action.partition(" ")
    rules = world.rule_for_action.get((verb, world.index.get(name)), [])
    after = dict(inv)
    if rules:
        for i, c in world.rules[rules[0]].inputs:
            after[i] = max(0, after.get(i, 0) - c)
        after[world.index[name]] = after.get(world.index[name], 0) + 1
    return after


def test_every_predict_line_states_what_the_agent_believed(cases):
    """Success: the true next state.  A failed rule action: its held inputs consumed (clamped at
    zero) and one output added, as if it had worked.  Each line starts from the observed state."""
    n_failed = 0
    for world, _, task, row in _rows(cases, PATTERNS):
        turns = split_turns(row["text"])
        for k in range(1, len(turns), 2):
            before = turns[k - 1][1].split("Inventory: ")[1]
            now, action, predicted = turns[k][1].split("\n")[1].removeprefix("Predict: ").split(" -> ")
            assert now == before and action == row["actions"][k // 2]
            if _failed(turns[k + 1][1]):
                n_failed += 1
                inv = {world.index[e.rsplit(" x", 1)[0]]: int(e.rsplit(" x", 1)[1])
                       for e in before.split(", ") if before != "empty"}
                assert predicted == world.format_inventory(_believed(world, inv, action)), (row["pattern"], turns[k])
            else:
                assert predicted == turns[k + 1][1].split("Inventory: ")[1]
    assert n_failed > 100


def test_predict_line_of_a_failed_action_by_hand():
    world = World.build("fa", scale_graph("tiny"), 0)
    r = next(r for r in world.rules if len(r.inputs) >= 2)
    (a, ca), (b, _) = r.inputs[:2]
    action = world.action_text(world.rules.index(r))
    inv = {a: ca + 1}                                # enough of one input, none of another
    assert apply_action(world, dict(inv), action) is not None
    expect = world.format_inventory({a: 1, r.output: 1})
    assert predict_line(world, inv, action).endswith(f"-> {action} -> {expect}")
    inv = {b: 1}
    for bad in (f"{world.gather_verb} {world.names[r.output]}", f"{r.verb} no such item", "dance"):
        assert predict_line(world, inv, bad) == f"Predict: {world.format_inventory(inv)} -> {bad} -> {world.format_inventory(inv)}"


def test_pattern_only_format_keeps_the_pattern_line_and_drops_predict(cases):
    assert "pattern_only" in COT_FORMATS
    for world, solver, _, row in _rows(cases[::4], PATTERNS, "pattern_only"):
        agent = [c for role, c in split_turns(row["text"]) if role == "agent"]
        assert all(len(t.split("\n")) == 2 and t.split("\n")[1].startswith("Action: ") for t in agent)
        assert "Predict:" not in row["text"]
        assert classify_trajectory(row["text"]) == row["pattern"]
        verify_row(world, row, solver)


@pytest.mark.parametrize("cot_format", ["world_model", "direct"])
def test_other_formats_still_verify(cases, cot_format):
    for world, solver, _, row in _rows(cases[::6], PATTERNS, cot_format):
        verify_row(world, row, solver)


def test_verify_row_rejects_an_action_after_the_goal(cases):
    """The guard that keeps the old D4 defect out of any corpus: replay stops at success."""
    world, solver, task, gold = next(c for c in cases if len(c[3]) == 1)
    row = build_row(world, task, gold, "T1", "direct", "pretrain", "late", random.Random(0))
    env = PlanningEnv(world, max_steps=10_000)
    obs = [env.reset(options={"task": task})[0]]
    actions = gold + gold                    # the goal is held after the first one
    obs += [env.step(a)[0] for a in actions]
    late = {**row, "actions": actions, "text": join_turns(obs, [f"Action: {a}" for a in actions])}
    with pytest.raises(RowError, match="after the episode ended"):
        verify_row(world, late)


def test_a_pattern_set_has_one_spelling_and_the_same_weights():
    from planning_gym.config import CorpusConfig
    from planning_gym.patterns import canonical_mixture, mixture_weights
    assert canonical_mixture("T4+T3") == canonical_mixture("T3+T4") == "T3+T4"
    assert mixture_weights(canonical_mixture("T4:2+D1")) == mixture_weights("T4:2+D1")
    assert canonical_mixture("4opt8sub") == "4opt8sub"
    assert CorpusConfig(patterns="T4+T1").name == CorpusConfig(patterns="T1+T4").name    # one folder, one teacher
