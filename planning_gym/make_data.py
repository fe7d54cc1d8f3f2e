"""Generate a corpus:  python -m planning_gym.make_data --domain fa --scale small

Writes ``DATA_DIR/<name>/`` with ``rules_<recipe>.json``, ``<split>.jsonl`` / ``.parquet`` for
the pools pretrain, posttrain, test_id and test_ood, ``stats.csv`` / ``stats.md`` (paper
Table 11 form), ``config.json`` and a dataset card.  Same arguments, byte-identical files.
Bad input ends with one line on stderr and exit status 2; nothing partial is left behind.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

from .cli import Parser, UsageError, entry, prepare_output
from .config import CorpusConfig, resolve_scale, scale_graph


def _mix(text: str) -> tuple[int, int, int]:
    parts = text.replace(":", "/").split("/")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected S/M/L percentages like 100/100/5, got '{text}'")
    return tuple(int(p) for p in parts)


def _pair(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected MIN,MAX like 1,2, got '{text}'")
    return int(parts[0]), int(parts[1])


def _bins(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple(tuple(int(x) for x in part.split("-")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected three plan-length ranges like 1-5,6-8,9-13, got '{text}'") from None


def _levels(text: str) -> tuple[int, ...]:
    parts = text.split(",")
    if not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"expected item counts per level like 8,6,5, got '{text}'")
    return tuple(int(p) for p in parts)


def parser() -> argparse.ArgumentParser:
    p = Parser(prog="python -m planning_gym.make_data", description=__doc__.split("\n")[0])
    p.add_argument("--domain", default="fa", help="fa, lf, ea, a comma list (fa,lf,ea) or a domain .json path")
    p.add_argument("--scale", default=None, help="tiny | small | paper (default: paper with CUDA, else small)")
    p.add_argument("--data-dir", default="data", help="parent folder of the corpus (default: data)")
    p.add_argument("--name", default=None, help="corpus folder name (default: derived from the settings)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipe", default=None, help="recipe variant: A (default) or B")
    p.add_argument("--cot-format", default=None, help="world_model (default), pattern_only or direct")
    p.add_argument("--patterns", default=None,
                   help="1opt | 4opt (default) | 4opt4sub | 4opt8sub, or a set such as T1+T2+D1 or T1:2+D1:1")
    p.add_argument("--horizon-mix", type=_mix, default=None, help="S/M/L percentages, e.g. 100/100/5")
    p.add_argument("--n-pretrain", type=int, default=None, help="pretrain rows per bin at 100%%")
    p.add_argument("--n-posttrain", type=int, default=None, help="posttrain rows per bin")
    p.add_argument("--n-test", type=int, default=None, help="test tasks per bin (default 160 at small/paper)")
    p.add_argument("--errors", default=None, help="error detail: terse (default: what failed) or full (which inputs are missing)")
    p.add_argument("--paths", default=None,
                   help="multi (default: A's and B's rules both exist, the corpus teaches its recipe's) or single (only the recipe's rules)")
    p.add_argument("--ood-fraction", type=float, default=None, help="share of (goal, intermediate) pairs reserved for test_ood (0.15)")
    p.add_argument("--goal-min-plan", type=int, default=None,
                   help="goals need at least this many steps from an empty inventory (default 21: beyond the 20-step limit)")
    p.add_argument("--defect-every", type=int, default=None, help="a suboptimal row has 1 + horizon // N defects (6)")
    p.add_argument("--horizon-bins", type=_bins, default=None,
                   help="plan lengths of the short, mid and long bins (default 1-5,6-8,9-13)")
    p.add_argument("--task-seed", type=int, default=None, help="seed of the task stream (default --seed): new tasks, same graph")
    p.add_argument("--row-seed", type=int, default=None, help="seed of the pattern / defect stream (default --seed)")
    g = p.add_argument_group("graph variants (default: the scale's graph)")
    g.add_argument("--n-base", type=int, default=None, help="level-0 items")
    g.add_argument("--items-per-level", type=_levels, default=None, help="items of levels 1..depth, e.g. 8,6,5")
    g.add_argument("--inputs-per-rule", type=_pair, default=None, help="MIN,MAX distinct inputs of a rule")
    g.add_argument("--rules-per-item", type=_pair, default=None, help="MIN,MAX OR alternatives of an item")
    g.add_argument("--count-range", type=_pair, default=None, help="MIN,MAX units of an input")
    p.add_argument("--workers", type=int, default=None, help="processes (default: 1 at tiny, all cores otherwise)")
    p.add_argument("--force", action="store_true", help="regenerate even if the folder holds this exact corpus")
    p.add_argument("--quiet", action="store_true")
    return p


def config_from_args(args) -> CorpusConfig:
    scale = resolve_scale(args.scale, log=print)
    graph = scale_graph(scale)
    changes = {k: getattr(args, k) for k in ("n_base", "items_per_level", "inputs_per_rule", "rules_per_item",
                                             "count_range") if getattr(args, k) is not None}
    return CorpusConfig.from_scale(
        scale, graph=dataclasses.replace(graph, **changes), domains=tuple(d.strip() for d in args.domain.split(",") if d.strip()), seed=args.seed,
        recipe=args.recipe, cot_format=args.cot_format, patterns=args.patterns, horizon_mix=args.horizon_mix,
        n_pretrain_per_bin=args.n_pretrain, n_posttrain_per_bin=args.n_posttrain, n_test_per_bin=args.n_test,
        errors=args.errors, paths=args.paths, ood_fraction=args.ood_fraction, goal_min_plan=args.goal_min_plan,
        defect_every=args.defect_every, task_seed=args.task_seed, row_seed=args.row_seed,
        horizon_bins=args.horizon_bins)


def same_corpus(out: Path, cfg: CorpusConfig) -> bool:
    import json
    try:
        from .corpus import CorpusError, code_fingerprint, verify_corpus
        expected = json.loads(json.dumps({**cfg.to_dict(), "generator": code_fingerprint()}))
        if json.loads((out / "config.json").read_text()) != expected:
            return False
        verify_corpus(out)          # a truncated or edited split means: rebuild
        return True
    except (OSError, ValueError, CorpusError):
        return False


def main(argv: list[str] | None = None) -> int:
    from .corpus import SplitLeakError, write_corpus

    def go() -> int:
        args = parser().parse_args(argv)
        cfg = config_from_args(args)
        out = Path(args.data_dir) / (args.name or cfg.name)
        if not args.force and same_corpus(out, cfg):
            print(f"{out} already holds this corpus (same config.json, files match manifest.json); reusing it "
                  "(--force regenerates)")
            return 0
        if (out / "config.json").exists():
            print(f"rebuilding {out}: its config or files differ from this request (or were truncated)")
        prepare_output(out.parent, exists_ok=True, what="data folder")
        workers = args.workers or (1 if cfg.scale == "tiny" else (os.cpu_count() or 1))
        t0 = time.time()
        try:
            result = write_corpus(cfg, out, workers=workers, progress=not args.quiet)
        except SplitLeakError as e:
            raise UsageError(str(e)) from None
        rows = ", ".join(f"{s} {n}" for s, n in result["rows"].items())
        print(f"wrote {out} ({rows}) in {time.time() - t0:.1f}s")
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
