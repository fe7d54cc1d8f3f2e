"""Skill graphs, worlds, the solver and the registry-wide gold-plan invariant."""
import random

import pytest

from planning_gym.config import SCALES, scale_graph
from planning_gym.env import PlanningEnv, Task
from planning_gym.graph import GraphConfigError, GraphParams, generate_graph
from planning_gym.solver import Solver, brute_force_length
from planning_gym.tasks import BINS, TaskSampler, difficulty
from planning_gym.world import DomainError, World, known_domains, load_domain

DOMAINS = known_domains()
RECIPES = ("A", "B")


def test_registry_has_the_three_paper_domains():
    assert {"fa", "lf", "ea"} <= set(DOMAINS)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("scale", ["tiny", "small"])
def test_every_gold_plan_succeeds_and_is_shortest(domain, recipe, scale):
    """Registry-wide invariant: for every domain x recipe, each gold plan reaches the goal in
    exactly the solver's number of steps, through the environment's own semantics."""
    world = World.build(domain, scale_graph(scale), seed=3, recipe=recipe)
    sampler = TaskSampler(world, seed=3)
    solver = Solver(world)
    for b in BINS:
        for task in sampler.sample("check", b, 12, held_out=False):
            plan = solver.gold_plan(task.goal, dict(task.inventory))
            assert len(plan) == solver.plan_length(task.goal, dict(task.inventory)) == sampler.horizon(task)
            assert difficulty(len(plan)) == b
            env = PlanningEnv(world, max_steps=20)
            env.reset(options={"task": task})
            for k, action in enumerate(plan):
                _, reward, terminated, truncated, info = env.step(action)
                assert info["valid"], (action, info["error"])
                assert terminated == (k == len(plan) - 1) and not truncated
            assert reward == 1.0


@pytest.mark.parametrize("seed", range(4))
def test_solver_matches_brute_force_on_small_graphs(seed):
    params = GraphParams(n_base=4, items_per_level=(3, 3), inputs_per_rule=(1, 3), rules_per_item=(1, 2),
                         count_range=(1, 2))
    world = World.build("fa", params, seed=seed)
    solver = Solver(world)
    rng = random.Random(seed)
    checked = 0
    for _ in range(60):
        goal = rng.randrange(world.n_items)
        pool = sorted(world.ancestors[goal] | {i for i in range(world.n_items) if i != goal})
        inv = {i: rng.randint(1, 2) for i in rng.sample(pool, rng.randint(0, 3))}
        fast = solver.plan_length(goal, inv)
        if fast is not None and fast > 8:
            continue
        assert fast == brute_force_length(world, goal, inv, limit=8), (goal, inv)
        if fast is not None:
            assert solver.lower_bound(goal, inv) <= fast          # the pruning bound is admissible
        checked += 1
    assert checked >= 30


def _all_shortest_craft_multisets(world, goal, inv, length):
    """Depth-first over raw states: the multiset of craft actions of every plan of ``length``."""
    from collections import Counter
    from planning_gym.env import apply_action
    actions = [world.action_text(("gather", i)) for i in range(world.n_items) if world.is_base(i)]
    actions += sorted({world.action_text(r) for r in range(len(world.rules))})
    found = set()

    def dfs(state, taken):
        if state.get(goal, 0) >= 1:
            if len(taken) == length:
                found.add(tuple(sorted(Counter(a for a in taken if not a.startswith(world.gather_verb)).items())))
            return
        if len(taken) == length:
            return
        for a in actions:
            nxt = dict(state)
            if apply_action(world, nxt, a) is None:
                dfs(nxt, taken + [a])
    dfs(dict(inv), [])
    return found


def test_optimal_allocations_are_every_shortest_plan():
    """The solver's set of optimal allocations equals, up to action order, the set of shortest
    plans found by exhaustive search (what the OOD hold-out relies on: *no* shortest plan leaks)."""
    params = GraphParams(n_base=3, items_per_level=(3, 2), inputs_per_rule=(1, 2), rules_per_item=(1, 2),
                         count_range=(1, 2))
    checked = multi = 0
    for seed, k in [(seed, k) for seed in range(3) for k in range(40)]:
        world = World.build("fa", params, seed=seed)
        solver = Solver(world)
        rng = random.Random(seed * 1000 + k)
        goal = rng.choice([i for i in range(world.n_items) if world.levels[i] >= 1])
        pool = sorted(world.ancestors[goal])
        inv = {i: rng.randint(1, 2) for i in rng.sample(pool, min(len(pool), rng.randint(0, 2)))}
        length = solver.plan_length(goal, inv)
        if length is None or length > 6:
            continue
        allocs = solver.optimal_allocations(goal, inv)
        as_text = {tuple(sorted((world.action_text(r), n) for r, n in a)) for a in allocs}
        assert as_text == _all_shortest_craft_multisets(world, goal, inv, length), (goal, inv)
        assert solver.optimal_allocations(goal, inv, limit=len(allocs) - 1) is None or len(allocs) == 1
        checked += 1
        multi += len(allocs) > 1
    assert checked >= 45 and multi >= 3


def test_solver_uses_per_unit_or_alternatives():
    """Two units of X, each cheap by a different rule thanks to the inventory: the optimum
    mixes the alternatives (a single-rule-per-item solver would say 3, not 2)."""
    from planning_gym.world import NamedRule
    # items: 0 p (base), 1 q (base), 2 x, 3 goal ;  x <- p (verb a) | x <- q (verb b) ; goal <- 2 x
    world = World("fa", "A", ["p", "q", "x", "g"], [0, 0, 1, 2],
                  [NamedRule("a", ((0, 1),), 2), NamedRule("b", ((1, 1),), 2), NamedRule("c", ((2, 2),), 3)],
                  "gather")
    solver = Solver(world)
    inv = {0: 1, 1: 1}
    assert solver.plan_length(3, inv) == 3 == brute_force_length(world, 3, inv)
    assert solver.gold_plan(3, inv) in (["a x", "b x", "c g"], ["b x", "a x", "c g"])


def test_graph_is_deterministic_and_seeds_are_independent():
    p = scale_graph("small")
    g0, again, g1 = generate_graph(p, 0), generate_graph(p, 0), generate_graph(p, 1)
    assert g0.rules == again.rules
    assert g0.rules != g1.rules
    # seed s+1 is not seed s shifted by one item
    shifted = [r.inputs for r in g0.rules[1:]]
    assert shifted != [r.inputs for r in g1.rules[:-1]]


def test_graph_structure_levels_and_dag():
    import networkx as nx
    g = generate_graph(scale_graph("small"), 0)
    nxg = g.to_networkx()
    assert nx.is_directed_acyclic_graph(nxg)
    for rule in g.rules:
        levels = [g.levels[i] for i, _ in rule.inputs]
        assert max(levels) == g.levels[rule.output] - 1     # one input from the level below
        assert len({i for i, _ in rule.inputs}) == len(rule.inputs)
    for item, alts in g.rules_of.items():
        assert len({g.rules[r].verb for r in alts}) == len(alts)   # an action names one rule


def test_recipes_share_items_but_not_procedures():
    a, b = (World.build("fa", scale_graph("small"), 0, r) for r in RECIPES)
    assert a.names == b.names and a.levels == b.levels
    assert [(r.inputs, r.output) for r in a.rules] != [(r.inputs, r.output) for r in b.rules]


def test_domains_change_wording_not_structure():
    worlds = [World.build(d, scale_graph("small"), 0) for d in ("fa", "lf", "ea")]
    assert len({tuple(w.names) for w in worlds}) == 3
    structures = {tuple((r.inputs, r.output) for r in w.rules) for w in worlds}
    assert len(structures) == 1
    assert worlds[0].levels == worlds[1].levels == worlds[2].levels


def test_rules_json_round_trip_gives_the_same_world():
    w = World.build("ea", scale_graph("tiny"), 5, "B")
    w2 = World.from_rules_json(w.to_rules_json())
    assert w2.names == w.names and w2.rules == w.rules and w2.gather_verb == w.gather_verb
    data = w.to_rules_json()
    assert set(data) == {"domain", "recipe", "items", "rules", "gather_verb", "errors"}
    assert set(data["rules"][0]) == {"verb", "inputs", "output", "recipe"}
    multi = World.build("ea", scale_graph("tiny"), 5, "B", paths="multi")
    again = World.from_rules_json(multi.to_rules_json())
    assert again.rules == multi.rules and again.taught.rules == multi.taught.rules and again.paths == "multi"
    assert set(data["items"][0]) == {"name", "level", "base"}


def test_new_domain_is_one_data_file(tmp_path):
    spec = load_domain("fa")
    spec = {**spec, "key": "zz", "gather_verb": "mine", "verbs": ["smelt", "cast", "draw", "temper"]}
    path = tmp_path / "zz.json"
    import json
    path.write_text(json.dumps(spec))
    w = World.build(str(path), scale_graph("tiny"), 0)
    assert w.domain == "zz" and w.gather_verb == "mine"
    assert {r.verb for r in w.rules} <= set(spec["verbs"])


@pytest.mark.parametrize("bad", [
    GraphParams(items_per_level=()),
    GraphParams(inputs_per_rule=(3, 2)),
    GraphParams(rules_per_item=(1, 9)),
    GraphParams(n_base=2, inputs_per_rule=(3, 3)),
    GraphParams(count_range=(0, 1)),
])
def test_impossible_graph_settings_are_refused(bad):
    with pytest.raises(GraphConfigError):
        generate_graph(bad, 0)


def test_unknown_domain_names_the_known_ones():
    with pytest.raises(DomainError, match="known: ea, fa, lf"):
        load_domain("nope")


def test_too_shallow_graph_cannot_fill_long_bin():
    world = World.build("fa", GraphParams(n_base=3, items_per_level=(2,), inputs_per_rule=(1, 2),
                                          count_range=(1, 1)), 0)
    with pytest.raises(GraphConfigError, match="needs 21\\+ steps"):
        TaskSampler(world, 0)                       # no goal is out of a memorised plan's reach
    with pytest.raises(GraphConfigError, match="long tasks"):
        TaskSampler(world, 0, goal_min_plan=2).sample("x", "long", 4, held_out=False)


def test_scales_are_valid():
    for s in SCALES:
        scale_graph(s).check()


def test_ood_tasks_make_a_reserved_item_on_every_shortest_plan_and_id_tasks_never():
    world = World.build("fa", scale_graph("small"), 0, paths="multi")
    sampler = TaskSampler(world, 0, ood_fraction=0.3)
    taught = sampler.taught
    for held_out in (True, False):
        for b in BINS:
            for task in sampler.sample("t", b, 6, held_out=held_out):
                allocs = sampler.solver.optimal_allocations(task.goal, dict(task.inventory))
                makes_reserved = [any(sampler.reserved(task.goal, taught.rules[r].output) for r, _ in a)
                                  for a in allocs]
                assert allocs and all(m == held_out for m in makes_reserved)
                assert sampler.solver.scratch_cost[task.goal] > 20     # a from-empty plan cannot fit


def test_multi_path_world_accepts_both_recipes_plans():
    """An A corpus and a B corpus of the multi-path world teach different, both valid, paths to
    the same goals; the single-path B world replaces A's rules (the named variant)."""
    params = scale_graph("small")
    a, b = (World.build("fa", params, 0, r, paths="multi") for r in RECIPES)
    assert a.rules == b.rules and a.taught.rules != b.taught.rules
    assert len({(r.verb, r.output) for r in a.rules}) == len(a.rules)     # one action, one rule
    assert World.build("fa", params, 0, "A").rules == a.taught.rules
    sampler = TaskSampler(a, 0)
    solvers = {r: Solver(w) for r, w in zip(RECIPES, (a, b))}
    differ = 0
    for task in sampler.sample("t", "mid", 10, held_out=False):
        plans = {r: s.gold_plan(task.goal, dict(task.inventory)) for r, s in solvers.items()}
        for plan in plans.values():
            if plan is None:
                continue
            env = PlanningEnv(a, max_steps=50)
            env.reset(options={"task": task})
            assert [env.step(x)[4]["valid"] for x in plan] == [True] * len(plan) and env.success
        differ += plans["A"] != plans["B"]
    assert differ >= 5
    single_b = World.build("fa", params, 0, "B")
    assert not {(r.inputs, r.output) for r in single_b.rules} & {(r.inputs, r.output) for r in a.taught.rules}


def test_training_plans_cover_exactly_the_tasks_a_blind_replay_solves():
    """`TrainingPlans.covers` (what keeps retrievable tasks out of test_id mid/long) agrees with
    replaying every remembered plan blindly through the environment, on random tasks."""
    from planning_gym.tasks import TrainingPlans, required_inventory
    world = World.build("fa", scale_graph("small"), 0, paths="multi")
    sampler = TaskSampler(world, 0)
    solver = sampler.solver
    train = [t for b in BINS for t in sampler.sample("train", b, 15, held_out=False)]
    index = TrainingPlans(sampler.taught)
    for t in train:
        index.add(t.goal, solver.gold_plan(t.goal, dict(t.inventory)))
    plan = solver.gold_plan(train[-1].goal, dict(train[-1].inventory))
    need = required_inventory(sampler.taught, plan)
    assert index.covers(Task(train[-1].goal, tuple(sorted(need.items()))))      # exactly what it needs
    if need:
        short = {**need}
        item = next(iter(short))
        short[item] -= 1
        reduced = Task(train[-1].goal, tuple(sorted((i, c) for i, c in short.items() if c)))
        env_says = any(_blind(world, reduced, p) for p in index.by_goal[reduced.goal])
        assert index.covers(reduced) == env_says
    agree = covered = 0
    for t in [t for b in ("mid", "long") for t in sampler.sample("probe", b, 25, held_out=False)]:
        env_says = any(_blind(world, t, p) for p in index.by_goal.get(t.goal, []))
        agree += index.covers(t) == env_says
        covered += env_says
    assert agree == 50 and 0 < covered < 50


def _blind(world, task, plan):
    from planning_gym.baselines import replay          # written apart from TrainingPlans
    return replay(world, task, plan)


def test_the_gym_needs_no_torch():
    """`planning_gym` is the bottom of the dependency chain: it imports (and makes a corpus
    config, a world and a baseline agent) with torch made unimportable."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "import planning_gym.make_data, planning_gym.baselines, planning_gym.corpus, planning_gym.constants\n"
            "from planning_gym.world import World\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
