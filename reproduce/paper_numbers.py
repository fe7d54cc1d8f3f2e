"""The papers' own numbers that our tables print beside ours (SPEC §8).

Only figures the two reviews or the SPEC quote are here; a cell the papers do not give stays
empty in our tables rather than being read off a plot.  Units are percentage points of avg@8 /
pass@8 unless the key says otherwise.  Keys are (table id, row, column) as the reproductions use them.
"""
from __future__ import annotations

PAPER: dict[tuple[str, str, str], float] = {
    # Figs. 3-4: world-model CoT minus direct actions, avg@8
    ("fig3-4", "gain", "short"): 9.4,
    ("fig3-4", "gain", "mid"): 39.3,
    ("fig3-4", "gain", "long"): 45.8,
    # Table 1 / Fig. 5: horizon mixtures S/M/L
    ("table1", "100/0/0", "mid pass@8"): 0.83,
    ("table1", "100/0/0", "long pass@8"): 0.0,
    ("table1", "100/5/0", "mid pass@8"): 51.88,
    ("table1", "100/0/5", "long pass@8"): 11.46,
    ("table1", "100/100/50", "mid avg@8"): 88.07,
    ("table1", "100/100/50", "long avg@8"): 74.84,
    ("table1", "100/100/100", "mid avg@8"): 85.86,
    ("table1", "100/100/100", "long avg@8"): 68.52,
    # Fig. 6: a 2:1 suboptimal mix drives long-horizon accuracy to about zero
    ("fig6", "4opt8sub", "long avg@8"): 0.0,
    # Fig. 7 / Table 3: change of avg@8 (pass@8 where named) after post-training
    ("fig7", "4opt8sub/long", "grpo avg@8"): -1.58,
    ("fig7", "4opt8sub/long", "opd avg@8"): 18.59,
    ("fig7", "4opt4sub/short", "grpo pass@8"): 9.4,
    ("fig7", "4opt4sub/mid", "grpo pass@8"): 11.3,
    ("fig7", "4opt4sub/long", "grpo pass@8"): 10.7,
    ("fig7", "4opt4sub/short", "opd pass@8"): 3.5,
    ("fig7", "4opt4sub/mid", "opd pass@8"): 2.7,
    ("fig7", "4opt4sub/long", "opd pass@8"): 2.4,
    # Table 4: teachers on their own recipe, and the crossed-teacher ID change (relative, percent)
    ("table4", "teacher A", "ID avg@8"): 100.0,
    ("table4", "teacher B", "ID avg@8"): 100.0,
    ("table4", "crossed vs matched", "ID change %"): -12.9,
    # Fig. 22: L2 distances in parameter space
    ("fig22", "Instruct", "MOPD 1"): 0.482,
    ("fig22", "Instruct", "teachers (min)"): 71.0,
    ("fig22", "Instruct", "teachers (max)"): 73.6,
    # TurnOPD main results (the paper's benchmarks, not this gym: held beside ours as scale only)
    ("turnopd", "speedup", "max"): 2.29,
    ("turnopd", "ALFWorld-1.7B least-time", "opd"): 73.52,
    ("turnopd", "ALFWorld-1.7B least-time", "turnopd"): 85.60,
    ("turnopd", "ALFWorld-1.7B hours", "opd"): 4.42,
    ("turnopd", "ALFWorld-1.7B hours", "turnopd"): 1.93,
    ("turnopd", "Multi-Hop same-step", "opd"): 47.82,
    ("turnopd", "Multi-Hop same-step", "turnopd"): 47.24,
    ("turnopd", "Multi-Hop least-time", "opd"): 45.77,
    ("turnopd", "Multi-Hop least-time", "turnopd"): 47.24,
    # TurnOPD ablation, ALFWorld-1.7B
    ("turnopd-ablation", "vanilla OPD", "acc"): 83.0,
    ("turnopd-ablation", "adaptive depth only", "acc"): 82.8,
    ("turnopd-ablation", "linear blend only", "acc"): 85.1,
    ("turnopd-ablation", "both (TurnOPD)", "acc"): 86.3,
}


def paper(table: str, row: str, column: str) -> float | None:
    return PAPER.get((table, row, column))


def fmt(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """A table cell: the number, or an en dash where there is none (or it is NaN)."""
    if value is None or value != value:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
