"""Environment semantics (the export contract) and fuzzing of step()."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planning_gym.config import scale_graph
from planning_gym.env import PlanningEnv, Task, apply_action
from planning_gym.world import NamedRule, World


def hand_world(errors="full"):
    # 0 ash (base), 1 dew (base), 2 salve: brew <- 2 ash | brew <- 1 dew (same verb: order decides)
    # 3 charm: infuse <- salve + dew
    rules = [NamedRule("brew", ((0, 2),), 2), NamedRule("brew", ((1, 1),), 2), NamedRule("infuse", ((1, 1), (2, 1)), 3)]
    return World("fa", "A", ["ash", "dew", "salve", "charm"], [0, 0, 1, 2], rules, "gather", errors)


def test_gather_adds_one_unit_of_a_base_item():
    w, inv = hand_world(), {}
    assert apply_action(w, inv, "gather ash") is None and inv == {0: 1}
    assert apply_action(w, inv, "gather salve") == "cannot gather salve: not a base item"
    assert inv == {0: 1}


def test_rule_action_uses_first_feasible_rule_in_order():
    w = hand_world()
    inv = {0: 2, 1: 1}
    assert apply_action(w, inv, "brew salve") is None
    assert inv == {1: 1, 2: 1}            # first rule (2 ash) consumed, dew untouched
    inv = {0: 1, 1: 1}
    assert apply_action(w, inv, "brew salve") is None
    assert inv == {0: 1, 2: 1}            # first rule infeasible -> second (dew) applied


@pytest.mark.parametrize("action,error", [
    ("", "expected '<verb> <item>'"),
    ("brew", "expected '<verb> <item>'"),
    ("fly salve", "unknown verb 'fly'"),
    ("brew moon", "unknown item 'moon'"),
    ("infuse salve", "no rule to infuse salve"),
    ("infuse charm", "cannot infuse charm: missing dew x1, salve x1"),
    ("gather ash\ngather dew", "action must be one line"),
])
def test_errors_are_observations_and_leave_state_unchanged(action, error):
    env = PlanningEnv(hand_world(), max_steps=5)
    env.reset(options={"task": Task(3, ((0, 1),))})
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["error"] == error and not info["valid"]
    assert f"Result: Error: {error}" in obs and "Goal: charm" in obs and "Inventory: ash x1" in obs
    assert env.inventory == {0: 1} and reward == 0.0 and not terminated and not truncated


def test_terse_errors_do_not_give_away_the_recipe():
    """The default error detail says that inputs are missing, not which: the rules must be learned."""
    for errors, expected in (("terse", "cannot infuse charm: missing inputs"),
                             ("full", "cannot infuse charm: missing dew x1, salve x1")):
        inv = {0: 1}
        assert apply_action(hand_world(errors), inv, "infuse charm") == expected and inv == {0: 1}
    assert World.build("fa", scale_graph("tiny"), 0).errors == "terse"
    round_trip = World.from_rules_json(hand_world("terse").to_rules_json())
    assert round_trip.errors == "terse"


def test_success_terminates_with_reward_and_truncation_at_step_limit():
    env = PlanningEnv(hand_world(), max_steps=3)
    env.reset(options={"task": Task(3)})
    for a in ("gather dew", "gather dew", "brew salve"):
        obs, r, term, trunc, _ = env.step(a)
    assert not term and trunc and r == 0.0                    # 3 turns used, charm not made
    env.reset(options={"task": Task(3, ((1, 2),))})
    env.step("brew salve")
    obs, r, term, trunc, info = env.step("infuse charm")
    assert term and not trunc and r == 1.0 and info["success"] and "Goal reached" in obs
    obs, r, term, trunc, info = env.step("gather ash")        # after the end: an error, no change
    assert r == 0.0 and not info["valid"] and env.inventory == {3: 1}


def test_invalid_turns_count_toward_the_step_limit():
    env = PlanningEnv(hand_world(), max_steps=2)
    env.reset(options={"task": Task(3)})
    env.step("nonsense")
    _, _, term, trunc, _ = env.step("still nonsense")
    assert trunc and not term


def test_observation_states_goal_inventory_and_result():
    env = PlanningEnv(hand_world())
    obs, info = env.reset(options={"task": Task(3, ((0, 2), (1, 1)))})
    assert obs == "Result: new task\nGoal: charm\nInventory: ash x2, dew x1"
    obs, *_ = env.step("brew salve")
    assert obs == "Result: did brew salve\nGoal: charm\nInventory: dew x1, salve x1"


WORLD = World.build("lf", scale_graph("tiny"), 1)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40), st.sampled_from(sorted(WORLD.names)), st.sampled_from(sorted(WORLD.verbs)))
def test_step_never_raises_and_errors_change_nothing(text, item, verb):
    env = PlanningEnv(WORLD, max_steps=50)
    env.reset(options={"task": Task(WORLD.n_items - 1, ((0, 1),))})
    for action in (text, f"{verb} {item}", f"{verb}  {text}", f"{text} {item}"):
        before = dict(env.inventory)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and obs.startswith("Result: ")
        if not info["valid"]:
            assert env.inventory == before
        else:
            assert sum(env.inventory.values()) <= sum(before.values()) + 1
        if terminated or truncated:
            break


def test_env_agrees_with_the_naive_rules_json_reference():
    import random
    from planning_gym.reference_env import reference_step
    world = World.build("ea", scale_graph("small"), 4, "B")
    data = world.to_rules_json()
    actions = [f"{v} {n}" for v in world.verbs for n in world.names] + ["bogus", "fetch"]
    rng = random.Random(0)
    valid = 0
    for episode in range(30):
        env = PlanningEnv(world, max_steps=10_000)
        env.reset(options={"task": Task(world.n_items - 1)})
        ref: dict[str, int] = {}
        for _ in range(200):
            a = rng.choice(actions)
            _, _, _, _, info = env.step(a)
            ok = reference_step(data, ref, a)
            assert ok == info["valid"], a
            assert ref == {world.names[i]: c for i, c in env.inventory.items()}
            valid += ok
            if env.done:
                break
    assert valid > 100
