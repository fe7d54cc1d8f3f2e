"""Build one table's trainings and evaluations in several processes, then let the table read them.

    python -m reproduce TABLE --scale small --workers 2        (make reproduce TABLE=fig6 SCALE=small WORKERS=2)
    python -m reproduce fig7 --scale small --workers 2 --only 'fig7-grpo-*,*@student'   (part of a table)

Why this exists: a table asks the store for its artifacts one after another, so one process builds
them one at a time, and a second process on the same table waits on the first one's lock rather
than moving on. Yet most of a table is independent runs: Fig. 6 is four models, each ~35 min of
training and ~25 min of evaluation on one core at ``small``; Fig. 7 is eighteen post-training runs
from three students. A 2-core machine or a 2-GPU node can build them two at a time. The list of
what a table needs comes from `reproduce.estimate.plan`, which mirrors the table modules. Worker
``i`` of ``n`` takes pre-trainings first, then post-trainings, then evaluations, of each kind its own
share first (every n-th unit from i); it builds a unit once its inputs exist (a family member needs
its base's tokenizer, so it trains beside a carried base; an evaluation its run; a post-training its
student and teacher; an MOPD stage the stage before it), and skips one whose lock another worker
holds, coming back to it. A run restored from a carry without its weights, which a unit still to
build loads, trains again as a pre-training unit of its own, so that a post-training's student and
teacher train again side by side. A unit that fails is logged and left, with the units that need it; the
worker builds the rest, then exits with status 2, so one error does not idle a core for the rest of an unattended session. Anything the plan
cannot name exactly (Fig. 3's equal-trajectory arm, until both arms have trained) is left to the
table, which then finds the rest built. ``--only`` builds a part of a table (say, what fits in one working session) and writes no table.
"""
from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import time
from pathlib import Path

from planning_gym.cli import UsageError
from pretrain import rundir
from reproduce.store import Busy, ReproductionError, Store


def needs(table: str, store: Store) -> tuple[list[tuple[str, str]], dict]:
    """The table's units -- ("pretrain", key), ("eval", model key), ("posttrain", run name) -- in the
    table's order, and how to ask the store for each training."""
    from reproduce.estimate import plan
    p = plan(store.scale, store=store)
    return p.needs.get(table, []), p.requests


def inputs(store: Store, unit: tuple[str, str], requests: dict) -> list[str]:
    """The runs a unit needs first (run keys: a pre-training run, or ``posttrain:<name>``): a family
    member's base (its tokenizer), an evaluation's run, a post-training run's student and teacher
    (an MOPD stage's student is the stage before it)."""
    from reproduce.estimate import run_key
    kind, key = unit
    if kind == "eval":
        return [run_key(key)]
    if kind == "posttrain":
        return [run_key(m) for m in (requests[key]["student"], requests[key]["teacher"]) if m]
    request = requests[key]
    cfg = store.corpus_config(**{k: v for k, v in request.items() if k not in ("family", "steps")})
    base = store.corpus_config(domains=tuple(request["family"] or cfg.domains)).name
    return [] if key == base else [base]


def trained_again(store: Store, units: list[tuple[str, str]], requests: dict) -> set[str]:
    """The pre-training runs among ``units`` that were carried without their weights and that a unit
    still to build loads. The store trains such a run again only when something loads it, inside
    that unit's build, so a post-training whose student and teacher were both carried would train them
    one after the other in one worker; as units of their own, two workers train them side by side."""
    from reproduce.estimate import plan
    from reproduce.store import _without_weights
    todo = plan(store.scale, store=store, remaining=True).unbuilt
    loaded = {run for unit in units if unit in todo for run in inputs(store, unit, requests)}
    return {key for kind, key in units if kind == "pretrain" and key in loaded
            and rundir.is_finished(store.home / "pretrain" / key) and _without_weights(store.home / "pretrain" / key)}


def unit_of(run: str) -> tuple[str, str]:
    """The unit that builds the run of a run key."""
    from reproduce.estimate import POSTTRAINED
    return ("posttrain", run[len(POSTTRAINED):]) if run.startswith(POSTTRAINED) else ("pretrain", run)


def ready(store: Store, unit: tuple[str, str], requests: dict) -> bool:
    return has_base_tokenizer(store, unit, requests) or all(
        rundir.is_finished(store.home / kind / name) for kind, name in map(unit_of, inputs(store, unit, requests)))


def has_base_tokenizer(store: Store, unit: tuple[str, str], requests: dict) -> bool:
    """A family member needs only its base's tokenizer, which exists before the base has trained
    (and is carried with it): it starts beside its base rather than after it."""
    base = inputs(store, unit, requests) if unit[0] == "pretrain" else []
    return bool(base) and store.base_tokenizer(base[0]) is not None


def build(store: Store, unit: tuple[str, str], requests: dict, again: set[str] = frozenset()) -> None:
    """Ask the store for ``unit`` as the table would, its inputs first: a finished input returns at
    once, but the store then knows how it was made, so one carried without its weights is rebuilt
    before it is loaded, and one built under other settings (an MOPD stage before this one) is
    rebuilt before anything trains on it. ``again``: pre-trainings to train again now, before anything
    loads them (`trained_again`)."""
    from reproduce.estimate import model_path
    kind, key = unit
    first = [] if has_base_tokenizer(store, unit, requests) else inputs(store, unit, requests)
    for needed in map(unit_of, first):
        if needed != unit and needed[1] in requests:
            build(store, needed, requests, again)
    if kind == "pretrain":
        run = store.pretrained(**requests[key])
        if key in again:
            store.weights(run)
    elif kind == "posttrain":
        r = requests[key]
        teacher = model_path(store, r["teacher"]) if r["teacher"] else None
        store.posttrained(key, r["method"], model_path(store, r["student"]), teacher, **r["overrides"])
    else:
        store.evaluation(model_path(store, key))


def chosen(store: Store, units: list[tuple[str, str]], requests: dict, only: str) -> list[tuple[str, str]]:
    """The units whose key matches one of ``only``'s comma-separated globs (all of them for ""), and
    the pre-trainings those need, in the table's order."""
    globs = [g.strip() for g in only.split(",") if g.strip()]
    picked = {u for u in units if not globs or any(fnmatch.fnmatchcase(u[1], g) for g in globs)}
    frontier = list(picked)
    while frontier:
        for needed in map(unit_of, inputs(store, frontier.pop(), requests)):
            if needed in units and needed not in picked:
                picked.add(needed)
                frontier.append(needed)
    return [u for u in units if u in picked]


def work(store: Store, units: list[tuple[str, str]], requests: dict, index: int, workers: int,
         poll: float = 5.0) -> tuple[int, list[tuple[str, str]]]:
    """Worker ``index`` of ``workers``: build every unit that no other worker is building. Returns how
    many units this worker built or found built, and those it could not build: a unit that fails is
    reported and left, with every unit that needs it, and the worker goes on with the rest -- an
    unattended session should not idle a core for hours on one unit's error."""
    mine = units[index::workers]
    # pre-trainings first (they gate the rest), then post-trainings (the longest), then evaluations; each
    # kind this worker's share first
    rank = {"pretrain": 0, "posttrain": 1, "eval": 2}
    pending = sorted(units, key=lambda u: (rank[u[0]], u not in mine))
    store.wait = False                      # a held lock raises Busy: take another unit instead of waiting
    again = trained_again(store, units, requests)
    done, failed = 0, []
    while pending:
        for unit in pending:
            if not ready(store, unit, requests):
                continue
            try:
                build(store, unit, requests, again)
            except Busy:
                continue
            except (ReproductionError, UsageError) as exc:
                store.log(f"[reproduce] error: {unit[0]} {unit[1]} failed: {exc}")
                failed += [unit, *_needing(store, unit, pending, requests)]
                pending = [u for u in pending if u not in failed]
                break
            pending.remove(unit)
            done += 1
            break                           # back to the top of the list: this worker's own share first
        else:
            time.sleep(poll)                # everything left is being built elsewhere or waits for it
    return done, failed


def _needing(store: Store, unit: tuple[str, str], pending: list[tuple[str, str]], requests: dict) -> list:
    """The pending units that need ``unit``'s run, directly or through another pending unit."""
    lost, found = {unit}, []
    for _ in pending:                       # a chain is at most as long as the list
        more = [u for u in pending if u not in lost and any(unit_of(k) in lost for k in inputs(store, u, requests))]
        if not more:
            break
        lost.update(more)
        found += more
    return found


def worker_command(table: str, store: Store, workers: int, only: str = "") -> list[str]:
    """The command of one worker (without its ``--index``): the same store, seed and claims."""
    return [sys.executable, "-m", "reproduce.workers", table, "--scale", store.scale, "--root", str(store.root),
            "--data-dir", str(store.data_dir), "--seed", str(store.seed), "--of", str(workers), "--only", only,
            *(["--claims"] if store.claims_only else [])]


def run_workers(table: str, store: Store, workers: int, say=print, only: str = "") -> None:
    """``workers`` processes of `work` on one table and store (one thread each, or cores / workers);
    ``only``: just the units `chosen` by these globs."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    out = store.out(table)
    command = worker_command(table, store, workers, only)
    t0 = time.time()
    procs = []
    for i in range(workers):
        log = open(out / f"worker-{i}.log", "a")   # a second --only run of this table writes beside it
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
    say(f"[reproduce] {table}: {workers} worker(s) built {'the units matching ' + repr(only) if only else 'its units'}"
        f" in {(time.time() - t0) / 60:.1f} min")


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
    p.add_argument("--only", default="")
    p.add_argument("--claims", action="store_true", help="the store builds only what the claims read")

    def go() -> int:
        args = p.parse_args(argv)
        store = Store(args.scale, Path(args.root), Path(args.data_dir), seed=args.seed, claims_only=args.claims)
        units, requests = needs(args.table, store)
        units = chosen(store, units, requests, args.only)
        done, failed = work(store, units, requests, args.index, args.of)
        if failed:
            print(f"error: worker {args.index}: {len(failed)} unit(s) of {args.table} not built "
                  f"({', '.join(key for _, key in failed)}); each error is logged above", file=sys.stderr)
            return 2
        print(f"[reproduce] worker {args.index} of {args.of}: all {len(units)} units of {args.table} are built "
              f"({done} passed through this worker)")
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
