"""Build one table's pre-trainings and evaluations in several processes, then let the table read them.

    python -m reproduce TABLE --scale small --workers 2        (make reproduce TABLE=fig6 SCALE=small WORKERS=2)

Why this exists: a table asks the store for its artifacts one after another, so one process builds
them one at a time, and a second process on the same table waits on the first one's lock rather
than moving on. Yet most of a pre-training table is independent models: Fig. 6 is four, each ~35
min of training and ~25 min of evaluation on one core at ``small``, so a 2-core machine or a
2-GPU node can build them two at a time. The list of what a table needs comes from
`reproduce.estimate.plan`, which mirrors the table modules. Worker ``i`` of ``n`` takes trainings
before evaluations, of each kind its own share first (every n-th unit from i); it builds a unit once
its inputs exist (a family member needs its base, an evaluation its run), and skips one whose lock
another worker holds, coming back to it. Post-training runs and anything the plan cannot name
exactly (Fig. 3's equal-trajectory arm) are left to the table, which then finds the rest built.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pretrain import rundir
from reproduce.store import Busy, ReproductionError, Store


def needs(table: str, store: Store) -> tuple[list[tuple[str, str]], dict]:
    """The table's pre-training and evaluation units (in the table's order) and how to request each run."""
    from reproduce.estimate import plan
    p = plan(store.scale, store=store)
    return p.needs.get(table, []), p.requests


def ready(store: Store, unit: tuple[str, str], requests: dict) -> bool:
    """Are a unit's inputs built: a family member's base (its tokenizer), an evaluation's run?"""
    from reproduce.estimate import run_key
    kind, key = unit
    if kind == "eval":
        return rundir.is_finished(store.home / "pretrain" / run_key(key))
    request = requests[key]
    cfg = store.corpus_config(**{k: v for k, v in request.items() if k not in ("family", "steps")})
    base = store.corpus_config(domains=tuple(request["family"] or cfg.domains)).name
    return key == base or rundir.is_finished(store.home / "pretrain" / base)


def build(store: Store, unit: tuple[str, str], requests: dict) -> None:
    from reproduce.estimate import model_path
    kind, key = unit
    if kind == "pretrain":
        store.pretrained(**requests[key])
    else:
        store.evaluation(model_path(store, key))


def work(store: Store, units: list[tuple[str, str]], requests: dict, index: int, workers: int,
         poll: float = 5.0) -> int:
    """Worker ``index`` of ``workers``: build every unit that no other worker is building; return
    how many this worker built or found built."""
    mine = units[index::workers]
    # trainings before evaluations (a training gates evaluations; an evaluation gates nothing), each kind
    # this worker's share first
    pending = sorted(units, key=lambda u: (u[0] != "pretrain", u not in mine))
    store.wait = False                      # a held lock raises Busy: take another unit instead of waiting
    done = 0
    while pending:
        for unit in pending:
            if not ready(store, unit, requests):
                continue
            try:
                build(store, unit, requests)
            except Busy:
                continue
            pending.remove(unit)
            done += 1
            break                           # back to the top of the list: this worker's own share first
        else:
            time.sleep(poll)                # everything left is being built elsewhere or waits for it
    return done


def run_workers(table: str, store: Store, workers: int, say=print) -> None:
    """``workers`` processes of `work` on one table and store (one thread each, or cores / workers)."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    out = store.out(table)
    command = [sys.executable, "-m", "reproduce.workers", table, "--scale", store.scale, "--root", str(store.root),
               "--data-dir", str(store.data_dir), "--seed", str(store.seed), "--of", str(workers)]
    t0 = time.time()
    procs = []
    for i in range(workers):
        log = open(out / f"worker-{i}.log", "w")
        procs.append((subprocess.Popen([*command, "--index", str(i)], stdout=log, stderr=subprocess.STDOUT, env=env),
                      log))
    failed = []
    for i, (proc, log) in enumerate(procs):
        if proc.wait():
            failed.append(i)
        log.close()
    if failed:
        raise ReproductionError(f"worker(s) {', '.join(map(str, failed))} of {table} failed "
                                f"(see {out}/worker-<i>.log)")
    say(f"[reproduce] {table}: {workers} workers built its pre-trainings and evaluations in "
        f"{(time.time() - t0) / 60:.1f} min")


def main(argv: list[str] | None = None) -> int:
    from planning_gym.cli import Parser, entry
    p = Parser(prog="python -m reproduce.workers", description=__doc__.split("\n")[0])
    p.add_argument("table")
    p.add_argument("--scale", required=True)
    p.add_argument("--root", default="runs/reproduce")
    p.add_argument("--data-dir", default="data")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--of", type=int, required=True)

    def go() -> int:
        args = p.parse_args(argv)
        store = Store(args.scale, Path(args.root), Path(args.data_dir), seed=args.seed)
        units, requests = needs(args.table, store)
        done = work(store, units, requests, args.index, args.of)
        print(f"[reproduce] worker {args.index} of {args.of}: all {len(units)} units of {args.table} are built "
              f"({done} passed through this worker)")
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
