"""Publish a finished reproduction: ``runs/reproduce/<scale>/<table>/`` -> ``results/<scale>/<table>/``.

    python -m reproduce.publish TABLE --scale small [--runs runs/reproduce] [--results results]

Why a module and not ``cp``: ``results/`` is tracked, so a half-finished or mixed copy is a lie
in the repository. A reproduction is published only when its ``table.md``, ``results.json`` and
``config.json`` all exist and parse; the files are copied into a temporary folder beside the
target, which then replaces the old folder in one rename, so figures of an earlier run never
linger beside new numbers. Sub-folders someone added to the published folder by hand (such as a
re-evaluation with more tasks) are carried over. Bad input: one ``error:`` line, exit status 2.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry

REQUIRED = ("table.md", "results.json", "config.json")


def publish(table: str, scale: str, runs: Path = Path("runs/reproduce"), results: Path = Path("results")) -> Path:
    source = Path(runs) / scale / table
    missing = [name for name in REQUIRED if not (source / name).is_file()]
    if missing:
        raise UsageError(f"{source} is not a finished reproduction (no {', '.join(missing)}): run "
                         f"`make reproduce TABLE={table} SCALE={scale}` to the end first")
    for name in ("results.json", "config.json"):
        try:
            json.loads((source / name).read_text())
        except ValueError as exc:
            raise UsageError(f"{source / name} is not valid JSON ({exc}); rerun the reproduction") from None
    target = Path(results) / scale / table
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".tmp-{table}-{os.getpid()}"
    old = target.parent / f".old-{table}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        table_time = (source / "table.md").stat().st_mtime
        for f in sorted(source.iterdir()):
            if f.is_file() and f.suffix in (".md", ".json", ".png"):
                if f.name.startswith("seeds") and f.stat().st_mtime < table_time:
                    continue        # a merge of earlier seeds, older than the table: not this reproduction's
                shutil.copy2(f, tmp / f.name)
        if target.is_dir():
            for d in target.iterdir():
                if d.is_dir():
                    shutil.copytree(d, tmp / d.name)
            target.rename(old)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.is_dir() and not target.exists():
            old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m reproduce.publish", description=__doc__.split("\n")[0])
    p.add_argument("table")
    p.add_argument("--scale", required=True)
    p.add_argument("--runs", default="runs/reproduce", help="the reproductions' root")
    p.add_argument("--results", default="results", help="the published results' root")

    def go() -> int:
        args = p.parse_args(argv)
        target = publish(args.table, args.scale, Path(args.runs), Path(args.results))
        print(f"published {target}")
        return 0
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
