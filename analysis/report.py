"""What a reproduction returns, and the Markdown it is written as.

A reproduction (`reproduce.pretraining`, `reproduce.shaping`, ...) builds its artifacts through
`reproduce.store.Store`, measures, plots, and returns a `Report`; `reproduce.cli` writes it into the
table's folder as ``table.md`` (ours beside the paper's), ``results.json`` (every number, machine-readable),
``config.json`` (the exact settings and the runs used) and the PNG figures.

With several seeds, `merge_seeds` folds one report per seed into one whose numbers read
``mean ± SE`` (the standard error of the mean over the seeds, sample std / sqrt(n): the spread a
two-standard-error verdict on the seed mean needs, and it already holds the task-sampling noise
of each seed's number); cells that agree across seeds (the paper's numbers, labels) are kept as
they are.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Table:
    caption: str
    header: list[str]
    rows: list[list]
    merge: bool = True     # False: numbers that mean nothing averaged over seeds (e.g. PCA coordinates)

    def markdown(self) -> str:
        return f"**{self.caption}**\n\n{md_table(self.header, self.rows)}"


@dataclass
class Report:
    title: str
    tables: list[Table] = field(default_factory=list)
    results: dict = field(default_factory=dict)           # every number, JSON-serialisable
    figures: list[Path] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)        # artifacts this table was computed from
    notes: list[str] = field(default_factory=list)        # what agrees with the paper, what does not

    def add(self, caption: str, header: list[str], rows: list[list], merge: bool = True) -> None:
        self.tables.append(Table(caption, list(header), [list(r) for r in rows], merge))

    @property
    def sections(self) -> list[str]:
        """The tables as Markdown blocks, captions first."""
        return [t.markdown() for t in self.tables]


def md_table(header: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table: floats get one decimal (three significant digits below 1, e.g. a
    KL), None and NaN an en dash."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell_text(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def cell_text(v) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if 0 < abs(v) < 1 else f"{v:.1f}"
    return str(v)


# ----- several seeds ----------------------------------------------------------------------------------
def json_safe(value):
    """``value`` with every NaN / infinity replaced by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _row_key(row: list) -> list:
    """What identifies a row across seeds: its leading cells up to the first number (or empty cell)."""
    key = []
    for v in row:
        if v is None or _is_number(v):
            break
        key.append(v)
    return key


def merge_cell(values: list):
    """One table cell over seeds: equal values stay; numbers become ``"mean ± SE"`` (with ``n=``
    when some seeds have none); anything else is listed per seed, ``a / b / c``."""
    if all(v == values[0] or (v != v and values[0] != values[0]) for v in values):   # NaN == NaN here
        return values[0]
    nums = [float(v) for v in values if _is_number(v) and not math.isnan(v)]
    if nums and all(v is None or _is_number(v) for v in values):
        from analysis.measures import seed_stat
        s = seed_stat(nums)
        return cell_text(s.mean) + (f" ± {cell_text(s.se)}" if s.n > 1 else "") + \
            (f" (n={s.n})" if s.n < len(values) else "")
    return " / ".join(cell_text(v) for v in values)


def pool_contrast_tables(per_seed: list) -> dict:
    """A table's comparisons (``results["contrasts"]``: name -> `analysis.measures.contrast`) pooled
    over seeds with `pool_contrasts`; {} when a seed lacks them or they name other comparisons."""
    from analysis.measures import pool_contrasts
    if not per_seed or not all(isinstance(p, dict) and p and p.keys() == per_seed[0].keys() for p in per_seed):
        return {}
    return {name: pool_contrasts([p[name] for p in per_seed]) for name in per_seed[0]}


def merge_results(values: list):
    """``results.json`` over seeds: every number becomes ``{"mean", "std", "se", "n", "per_seed"}``
    (``n`` counts the seeds with a finite value; missing statistics are None); other values that
    differ become ``{"per_seed": [...]}``, as does a key some seeds lack (None for them: a seed
    built with ``--claims`` holds only part of a table)."""
    first = values[0]
    if all(isinstance(v, dict) for v in values):
        keys = dict.fromkeys(k for v in values for k in v)
        return {k: merge_results([v[k] for v in values]) if all(k in v for v in values)
                else {"per_seed": [v.get(k) for v in values]} for k in keys}
    if isinstance(first, list) and all(isinstance(v, list) and len(v) == len(first) for v in values):
        return [merge_results(list(col)) for col in zip(*values)]
    if all(_is_number(v) for v in values):
        from analysis.measures import seed_stat
        finite = [float(v) for v in values if not math.isnan(v)]
        if not finite:
            return {"mean": None, "std": None, "se": None, "n": 0, "per_seed": list(values)}
        s = seed_stat(finite)
        return {"mean": s.mean, "std": json_safe(s.std), "se": json_safe(s.se), "n": s.n, "per_seed": list(values)}
    return first if all(v == first for v in values) else {"per_seed": list(values)}


def merge_seeds(reports: list[Report], seeds: list[int]) -> Report:
    """One report from one per seed (same tables, same rows): every number as mean ± SE over seeds."""
    first = reports[0]
    merged = Report(f"{first.title} ({len(seeds)} seeds: {', '.join(map(str, seeds))})")
    captions = dict.fromkeys(t.caption for r in reports for t in r.tables)   # a seed may hold only some tables
    for caption in captions:
        found = [next((t for t in r.tables if t.caption == caption), None) for r in reports]
        table = next(t for t in found if t is not None)
        same_rows = all(t is not None and t.header == table.header
                        and [_row_key(row) for row in t.rows] == [_row_key(row) for row in table.rows] for t in found)
        if not (same_rows and table.merge):   # rows depend on the seed, or numbers that do not average
            for seed, t in zip(seeds, found):
                if t is not None:
                    merged.tables.append(Table(f"{t.caption} (seed {seed})", t.header, t.rows))
            continue
        rows = [[merge_cell([t.rows[j][c] for t in found]) for c in range(len(table.header))]
                for j in range(len(table.rows))]
        merged.tables.append(Table(f"{table.caption} (mean ± SE over {len(seeds)} seeds)", table.header, rows))
    merged.results = {"seeds": seeds, "merged": merge_results([r.results for r in reports])}
    pooled = pool_contrast_tables([r.results.get("contrasts") for r in reports])
    if pooled:
        merged.results["contrasts"] = pooled
        merged.tables.append(Table(
            f"Comparisons over tasks and {len(seeds)} seeds (each task's difference, or unpaired each side's task "
            "score, averaged over the seeds, then mean ± SE over tasks); verdict by two standard errors on the "
            "paper's side",
            ["comparison", "ours", "± SE", "tasks", "seeds", "paired", "paper", "verdict"],
            [[name, c["delta"], c["se"], c["tasks"], c["seeds"], "yes" if c.get("paired", True) else "no", c["paper"],
              c["verdict"]] for name, c in pooled.items()],
            merge=False))
    common = [n for n in first.notes if all(n in r.notes for r in reports)]
    merged.notes = common + [f"seed {seed}: {n}" for seed, r in zip(seeds, reports) for n in r.notes if n not in common]
    merged.figures = list(first.figures)     # seed 0's (the seeds.md header says so)
    merged.runs = [run for r in reports for run in r.runs]
    return merged
