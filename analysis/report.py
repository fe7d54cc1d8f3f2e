"""What a reproduction returns, and the Markdown it is written as.

A reproduction (`analysis.repro_*`) builds its artifacts through the `analysis.artifacts.Store`,
measures, plots, and returns a `Report`; `analysis.reproduce` writes it into the table's folder
as ``table.md`` (ours beside the paper's), ``results.json`` (every number, machine-readable),
``config.json`` (the exact settings and the runs used) and the PNG figures.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Report:
    title: str
    sections: list[str] = field(default_factory=list)     # Markdown blocks (tables with captions)
    results: dict = field(default_factory=dict)           # every number, JSON-serialisable
    figures: list[Path] = field(default_factory=list)
    runs: list[Path] = field(default_factory=list)        # artifacts this table was computed from
    notes: list[str] = field(default_factory=list)        # what agrees with the paper, what does not

    def add(self, caption: str, header: list[str], rows: list[list]) -> None:
        self.sections.append(f"**{caption}**\n\n{md_table(header, rows)}")


def md_table(header: list[str], rows: list[list]) -> str:
    """A GitHub Markdown table: floats get one decimal (three significant digits below 1, e.g. a
    KL), None and NaN an en dash."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return "–"
        if isinstance(v, float):
            return f"{v:.3g}" if 0 < abs(v) < 1 else f"{v:.1f}"
        return str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
