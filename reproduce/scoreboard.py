"""The scoreboard against the papers, written from the published results and nothing else.

    python -m reproduce.scoreboard [--scale small] [--results results] [--check]

Why this exists: ``results/README.md`` lists each paper claim beside our number and a verdict. Typed by
hand, such a table drifts from the tables it quotes; here every row is read from a published
reproduction's ``results.json`` (``seeds_results.json`` when several seeds were merged), whose
``paired`` entries are the claims as paired differences (`analysis.measures.contrast`, pooled
over seeds by `pool_contrasts`), with the verdict decided there by two standard errors. A claim
whose table is not published, or was published before it recorded paired comparisons (the
previous gym's), reads "not run". The rows replace what lies between the two scoreboard markers of
``results/README.md``; ``--check`` only says whether that block is current (exit 1 if not).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from planning_gym.cli import Parser, UsageError, entry
from reproduce.paper_numbers import fmt

BEGIN, END = "<!-- scoreboard: begin (python -m reproduce.scoreboard) -->", "<!-- scoreboard: end -->"

# (claim as the paper makes it, table, the contrast's name in that table's results["contrasts"], the paper's number)
CLAIMS = (
    ("world-model CoT beats direct actions on long tasks (Figs. 3-4, Δavg@8)", "fig3-4", "world model - direct, long",
     "+45.8"),
    ("… also when direct sees as many trajectories (Figs. 3-4, Δavg@8; the review's control)", "fig3-4",
     "world model - direct at equal trajectories, long", "– (not in the paper)"),
    ("short-horizon data alone do not compose into long plans (Table 1, long pass@8, 100/0/0 − 100/100/100)",
     "table1", "short-only vs full, long", "0.0 for 100/0/0"),
    ("a 5 % long-horizon share unlocks long tasks (Table 1, long pass@8, 100/0/5 − 100/0/0)", "table1",
     "+5% long data, long", "+11.5"),
    ("a 5 % mid-horizon share unlocks mid tasks (Table 1, mid pass@8, 100/5/0 − 100/0/0)", "table1",
     "+5% mid data, mid", "+51.0"),
    ("a 2:1 suboptimal mix hurts long tasks (Fig. 6, long avg@8, 4opt8sub − 4opt)", "fig6", "4opt8sub/long",
     "4opt8sub ≈ 0.0"),
    ("OPD helps where pre-training data were poor (Fig. 7, 4opt8sub/long, Δavg@8)", "fig7",
     "OPD after - before, 4opt8sub/long", "+18.6"),
    ("GRPO does not (Fig. 7, 4opt8sub/long, Δavg@8; only a clear gain contradicts it)", "fig7",
     "GRPO after - before, 4opt8sub/long", "−1.6"),
    ("OPD beats GRPO there (Fig. 7, 4opt8sub/long, ΔOPD − ΔGRPO)", "fig7", "OPD - GRPO, 4opt8sub/long", "+20.2"),
)
CLAIMS += (
    ("a crossed-recipe teacher hurts OPD (Table 4, ID avg@8 after OPD, crossed − matched)", "table4",
     "crossed - matched, ID", "−12.9 % (relative)"),
    ("… and leaves the student below where it began (Table 4, ID avg@8, crossed after − before)", "table4",
     "crossed after - before, ID", "– (the paper: impairs prior world modelling)"),
    ("both TurnOPD switches beat adaptive depth alone (TurnOPD ablation, ID avg@8; paper: ALFWorld acc)",
     "turnopd-ablation", "both - adaptive depth only, ID", "+3.5"),
    ("… and the turn-blended loss alone (TurnOPD ablation, ID avg@8; paper: ALFWorld acc)", "turnopd-ablation",
     "both - linear blend only, ID", "+1.2"),
    ("MOPD converges to the template all teachers share (Tables 6-7, Type I, T1 share after − before, points)",
     "mopd", "Type I: T1 share after - before, all domains", "T1 → 100 % in every domain"),
    ("… also when which template is shared is drawn at random (the review's control)", "mopd",
     "random shared template: its share after - before, all domains", "– (not in the paper)"),
    ("… and keeps it on earlier domains only if the last teacher has it (T1 share, Type I − T1 withheld; the "
     "review's control)", "mopd", "T1 share on earlier domains after the cascade, Type I - withheld",
     "– (not in the paper)"),
    ("conflicting teachers interfere (Tables 6-7, earlier domains' ID avg@8 change over the cascade, Type III − "
     "Type I)", "mopd", "earlier domains' change over the cascade, Type III - Type I", "severe interference"),
    ("TurnOPD is ahead of OPD at equal training time (TurnOPD main table, least common time, ID avg@8; paper: "
     "ALFWorld-1.7B acc)", "turnopd", "TurnOPD - OPD at the least common time, ID", "+12.1"),
)


def published(results: Path, scale: str, table: str) -> dict | None:
    """A published table's paired comparisons: the seed-pooled ones if several seeds were merged."""
    for name in ("seeds_results.json", "results.json"):
        path = Path(results) / scale / table / name
        if path.is_file():
            paired = json.loads(path.read_text()).get("contrasts")
            if paired:
                return paired
    return None


def paper_number(c: dict, typed: str) -> str:
    """The paper's number as the table computed it (``c["paper"]``), else the claim's typed text."""
    return fmt(c["paper"], signed=True) if isinstance(c.get("paper"), (int, float)) else typed


def measured(results: Path, scale: str) -> list[tuple[str, str, dict, str]]:
    """(table, contrast name, published contrast, the paper's number) of every claim with a result."""
    out = []
    for _, table, name, paper in CLAIMS:
        c = (published(results, scale, table) or {}).get(name)
        if c is not None:
            out.append((table, name, c, paper_number(c, paper)))
    return out


def figure_path(results: Path, scale: str) -> Path:
    return Path(results) / scale / "scoreboard.png"


def plot(results: Path, scale: str) -> Path | None:
    """Each measured claim's difference with its verdict interval (± two standard errors), coloured by
    the verdict, the paper's number as a diamond where it gives one; None when nothing is measured."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    done = measured(results, scale)
    if not done:
        return None
    colors = {"agrees": "#31a354", "disagrees": "#de2d26", "cannot tell": "#969696"}
    fig = Figure(figsize=(8, 1.2 + 0.45 * len(done)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for y, (table, name, c, paper) in enumerate(reversed(done)):
        err = 2 * c["se"] if c["se"] == c["se"] else 0.0
        ax.errorbar(c["delta"], y, xerr=err, fmt="o", color=colors[c["verdict"]], capsize=3)
        try:
            ax.scatter(float(paper.replace("−", "-")), y, marker="D", s=28, color="black", zorder=3)
        except ValueError:
            pass                                   # the paper gives no number for this comparison
    ax.axvline(0.0, color="black", lw=0.6)
    ax.set_yticks(range(len(done)), [f"{t}: {n}" for t, n, _, _ in reversed(done)], fontsize=8)
    ax.set_xlabel("our difference, points (± 2 SE: the verdict's interval)")
    ax.set_title(f"Claims measured at {scale}, by verdict; ◆ the paper's number", fontsize=10)
    handles = [Line2D([], [], marker="o", ls="", color=col, label=v) for v, col in colors.items()]
    handles.append(Line2D([], [], marker="D", ls="", color="black", label="paper"))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=True)
    fig.tight_layout()
    path = figure_path(results, scale)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def rows(results: Path, scale: str) -> list[list[str]]:
    out = []
    for claim, table, name, paper in CLAIMS:
        c = (published(results, scale, table) or {}).get(name)
        if c is None:
            out.append([claim, paper, "not run", "–"])
            continue
        ours = fmt(c["delta"], signed=True) + (f" ± {c['se']:.1f}" if c["se"] == c["se"] else "")
        out.append([claim, paper_number(c, paper), f"{ours} ({c['tasks']} tasks, {c['seeds']} seed{'s' if c['seeds'] != 1 else ''})",
                    c["verdict"]])
    return out


def board(results: Path, scale: str) -> str:
    lines = ["| claim (paper) | paper | ours (" + scale + ", current gym) | verdict |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results, scale)]
    if measured(results, scale):
        lines += ["", f"![each measured claim: our difference ± 2 SE, by verdict, beside the paper's]"
                      f"({figure_path(Path(), scale)})"]
    return "\n".join([BEGIN, *lines, END])


def write(readme: Path, results: Path, scale: str, check: bool = False) -> bool:
    """Put the board into ``readme`` between the markers; returns whether it was already current."""
    text = Path(readme).read_text()
    if BEGIN not in text or END not in text:
        raise UsageError(f"{readme} has no scoreboard markers ({BEGIN} … {END}): add them where the table goes")
    head, rest = text.split(BEGIN, 1)
    new = head + board(results, scale) + rest.split(END, 1)[1]
    if not check:
        plot(results, scale)
        if new != text:
            Path(readme).write_text(new)
    return new == text


def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="python -m reproduce.scoreboard", description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="small")
    p.add_argument("--results", default="results", help="the published results' root (holds README.md)")
    p.add_argument("--check", action="store_true", help="only say whether the board is current (exit 1 if not)")

    def go() -> int:
        args = p.parse_args(argv)
        readme = Path(args.results) / "README.md"
        if not readme.is_file():
            raise UsageError(f"{readme} does not exist: pass --results with the published results' root")
        current = write(readme, Path(args.results), args.scale, check=args.check)
        print(f"{readme}: scoreboard " + ("current" if current else "out of date" if args.check else "rewritten"))
        return 0 if current or not args.check else 1
    return entry(go)


if __name__ == "__main__":
    sys.exit(main())
