"""make bench-gym: environment steps/s and verified trajectories/s, against a baseline in the same run.

* env steps/s: our `PlanningEnv.step` vs the naive rules.json implementation
  (`reference_env.reference_step`) on the same random action stream (a mix of valid and invalid
  actions, as a learning agent produces).  Target: >= 10k steps/s on one core.
* verified trajectories/s: `verify_row` (parse the text, replay every turn, compare every
  observation, replay the gold plan) over a generated corpus.
"""
from __future__ import annotations

import argparse
import random
import time

from planning_gym.config import CorpusConfig, scale_graph
from planning_gym.corpus import render_rows, sample_pools
from planning_gym.env import PlanningEnv, Task
from planning_gym.reference_env import reference_step
from planning_gym.trajectory import verify_row
from planning_gym.world import World

TARGET_STEPS_PER_S = 10_000


def action_stream(world: World, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    actions = [f"{world.gather_verb} {world.names[i]}" for i in range(world.n_items) if world.is_base(i)] * 3
    actions += [world.action_text(r) for r in range(len(world.rules))]
    actions += ["nonsense", f"{world.gather_verb} nothing"]
    return [rng.choice(actions) for _ in range(n)]


def naive_observation(data: dict, goal: str, inv: dict[str, int], result: str) -> str:
    held = ", ".join(f"{k} x{inv[k]}" for k in sorted(inv)) or "empty"
    return f"Result: {result}\nGoal: {goal}\nInventory: {held}"


def bench_steps(world: World, n: int, episode: int = 20) -> tuple[float, float]:
    """Evaluation-like episodes of ``episode`` steps; both sides build the same observation text."""
    stream = action_stream(world, n)
    task = Task(world.n_items - 1)
    env = PlanningEnv(world, max_steps=episode)
    t = time.perf_counter()
    for k, a in enumerate(stream):
        if k % episode == 0 or env.done:
            env.reset(options={"task": task})
        env.step(a)
    ours = n / (time.perf_counter() - t)
    data, goal = world.to_rules_json(), world.names[task.goal]
    t = time.perf_counter()
    for k, a in enumerate(stream):
        if k % episode == 0:
            inv = {}
        ok = reference_step(data, inv, a)
        naive_observation(data, goal, inv, "did" if ok else "Error")
    return ours, n / (time.perf_counter() - t)


_VERIFY_WORLD: list = []


def _verify_chunk(args: tuple[dict, list[dict]]) -> int:
    rules, rows = args
    if not _VERIFY_WORLD:
        _VERIFY_WORLD.append(World.from_rules_json(rules))
    for row in rows:
        verify_row(_VERIFY_WORLD[0], row)
    return len(rows)


def bench_verify(scale: str, n_rows: int, processes: int = 2) -> tuple[float, float]:
    """Verified trajectories/s in one process, and in ``processes`` worker processes (what
    corpus generation does on a multi-core machine; rows are shipped to the workers)."""
    from concurrent.futures import ProcessPoolExecutor
    cfg = CorpusConfig.from_scale(scale, patterns="4opt4sub", n_pretrain_per_bin=max(1, n_rows // 3),
                                  n_posttrain_per_bin=0, n_test_per_bin=4)
    world = World.build("fa", cfg.graph, cfg.seed)
    rows = render_rows(cfg, sample_pools(cfg, world), workers=1, progress=False)["pretrain"]
    t = time.perf_counter()
    for row in rows:
        verify_row(world, row)
    one = len(rows) / (time.perf_counter() - t)
    rules = world.to_rules_json()
    chunks = [(rules, rows[k::processes]) for k in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_verify_chunk, [(rules, rows[:processes])] * processes))   # start the workers
        t = time.perf_counter()
        done = sum(pool.map(_verify_chunk, chunks))
    return one, done / (time.perf_counter() - t)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gym")
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--rows", type=int, default=6000)
    args = p.parse_args(argv)
    print(f"{'scale':<7}{'env steps/s':>14}{'naive steps/s':>15}{'ratio':>8}{'verified traj/s':>17}"
          f"{'(2 processes)':>15}")
    worst = float("inf")
    for scale in ("tiny", "small", "paper"):
        world = World.build("fa", scale_graph(scale), 0)
        ours, naive = bench_steps(world, args.steps)
        worst = min(worst, ours)
        one, two = bench_verify(scale, args.rows)
        print(f"{scale:<7}{ours:>14,.0f}{naive:>15,.0f}{ours / naive:>7.1f}x{one:>17,.0f}{two:>15,.0f}")
    verdict = "meets" if worst >= TARGET_STEPS_PER_S else "MISSES"
    print(f"slowest env: {worst:,.0f} steps/s, {verdict} the target of {TARGET_STEPS_PER_S:,} steps/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
