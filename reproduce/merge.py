"""Merging reproductions (paper §6): cascaded multi-teacher OPD (MOPD) and where it moves the student.

* Tables 6-7 / Figs. 17-21 — one "Instruct" student over fa+lf+ea (4 Opt:4 Sub) distils three
  one-domain teachers in the cascade fa -> lf -> ea, in three regimes of teacher patterns
  (`posttrain.teachers.REGIMES`: Types I-III, shared by all / by neighbours / by none, all optimal
  templates, plus the reviewers' controls: the shared template withheld from the last teacher, and
  a randomly drawn shared template). Each stage is scored on every domain, so the tables show what a
  later teacher does to an earlier domain; the pattern heatmaps show which teacher's planning
  patterns survive the cascade; the claims are paired differences over the Instruct corpus's ID
  tasks (`regime_contrasts`), each with its verdict.
* Fig. 22 — PCA and pairwise L2 distances of Instruct, the three MOPD stages and the three
  teachers of the shared-compatible regime: distillation moves the student a little, while the
  teachers (trained from scratch) lie far away.

Each stage is one OPD run of the store, named by the teachers distilled up to it (`stage_name`), so
regimes whose cascades begin alike share their first stages, and the workers can train the stages
of different regimes side by side. Teachers must share the student's vocabulary, so they are
pre-trained with the tokenizer of the fa+lf+ea family (``Store.pretrained(family=...)``) on corpora
of their one domain and pattern set; a teacher is scored on its own corpus (its one domain).
The papers give no numbers for Tables 6-7 (only plots), so those tables have no paper column.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures import plot_checkpoint_dynamics, plot_pattern_heatmap
from analysis.measures import contrast, pattern_table
from analysis.report import Report
from analysis.run_logs import cell
from planning_gym.patterns import canonical_mixture
from posttrain.teachers import REGIMES
from reproduce.paper_numbers import fmt, paper
from reproduce.store import Store

CASCADE = ("fa", "lf", "ea")          # the cascade order, also the student's family (one tokenizer)
STUDENT_PATTERNS = "4opt4sub"
# Every MOPD claim reads the ID split, and a stage's evaluation over three domains is its costliest
# part (2 x 144 tasks x 8 samples at small, ~1 core-hour), so the cascade evaluates ID only.
SPLITS = ("ID",)


def stage_name(teachers: list[tuple[str, str]]) -> str:
    """The run of a cascade stage, named by the (domain, patterns) teachers distilled up to it in
    cascade order: regimes whose cascades begin with the same teachers share those stages (Type I,
    the withheld control and Type II all start with fa's T1+T2), so each is trained once."""
    return "mopd-" + "-".join(f"{d}.{canonical_mixture(p)}" for d, p in teachers)


def build(store: Store, regime: str) -> dict:
    """Instruct, the regime's teachers and its MOPD cascade, one OPD run per stage (each built once,
    then cached): stage i distils teacher i into stage i-1 on teacher i's domain."""
    student = store.pretrained(domains=CASCADE, patterns=STUDENT_PATTERNS)
    teachers = {d: store.pretrained(family=CASCADE, domains=(d,), patterns=REGIMES[regime][d]) for d in CASCADE}
    stages, previous = {}, student
    for i, d in enumerate(CASCADE, start=1):
        name = stage_name([(c, REGIMES[regime][c]) for c in CASCADE[:i]])
        previous = stages[d] = store.posttrained(name, "opd", previous, teachers[d], domains=d, eval_every=0,
                                                 eval_splits=",".join(SPLITS))
    corpus = store.corpus(domains=CASCADE, patterns=STUDENT_PATTERNS)      # the student's (made again if gone)
    return {"student": student, "teachers": teachers, "stages": stages, "corpus": corpus}


def on_domains(samples: list[dict], domains: tuple[str, ...], pattern: str | None = None) -> list[dict]:
    """The samples of ``domains``, each task named with its domain (a task id is a position in its
    domain's split); with ``pattern``, a sample's "success" is whether it used that pattern, so a
    paired contrast over them compares pattern shares (percent) task by task."""
    return [{**x, "task": f"{x['domain']}:{x['task']}", "task_key": f"{x['domain']}:{x.get('task_key', x['task'])}",
             **({"success": x["pattern"] == pattern} if pattern else {})}
            for x in samples if x["domain"] in domains]


def shared_template(regime: str) -> str | None:
    """The template every teacher of ``regime`` has (Type I, the random control), else None."""
    common = set.intersection(*(set(REGIMES[regime][d].split("+")) for d in CASCADE))
    return min(common) if common else None


def regime_contrasts(samples: dict[str, dict[str, list[dict]]]) -> dict[str, dict]:
    """The MOPD claims as paired differences over the Instruct corpus's ID tasks (every model of
    every regime is evaluated on them): ``samples[regime][row]`` are a regime's per-sample records.

    * the cascade converges to the template all teachers share (Type I; the paper reports T1 at
      1.00 in every domain) and, the review's control, so it does for a randomly drawn one;
    * it keeps that template on the earlier domains only when the last teacher has it too (the
      review's control: T1 withheld from the last teacher);
    * conflicting teachers (Type III) make the earlier domains lose more than compatible ones
      (Type I): each task's change from right after its own stage to the end of the cascade."""
    out, last, earlier = {}, f"After {CASCADE[-1].upper()}", CASCADE[:-1]
    for regime, label in (("shared_compatible", "Type I: {} share"),
                          ("random_shared", "random shared template: its share")):
        t = shared_template(regime) if regime in samples else None
        if t:
            s = samples[regime]
            out[f"{label.format(t)} after - before, all domains"] = contrast(
                on_domains(s[last], CASCADE, t), on_domains(s["Instruct"], CASCADE, t), "ID", "all", +1)
    if {"shared_compatible", "withheld_shared"} <= set(samples):
        t = shared_template("shared_compatible")
        out[f"{t} share on earlier domains after the cascade, Type I - withheld"] = contrast(
            on_domains(samples["shared_compatible"][last], earlier, t),
            on_domains(samples["withheld_shared"][last], earlier, t), "ID", "all", +1)
    if {"shared_compatible", "no_shared_conflict"} <= set(samples):
        out["earlier domains' change over the cascade, Type III - Type I"] = contrast(
            forgetting_samples(samples["no_shared_conflict"]), forgetting_samples(samples["shared_compatible"]),
            "ID", "all", -1)
    return out


def forgetting_samples(rows: dict[str, list[dict]]) -> list[dict]:
    """Per earlier domain's sample, its success at the end of the cascade minus right after its own
    stage (same task, same sample index), as records a paired contrast reads (-1, 0 or +1 each)."""
    last = rows[f"After {CASCADE[-1].upper()}"]
    out = []
    for d in CASCADE[:-1]:
        own = {(x["task"], x["sample"]): x["success"] for x in on_domains(rows[f"After {d.upper()}"], (d,))}
        out += [{**x, "success": float(x["success"]) - float(own[x["task"], x["sample"]])}
                for x in on_domains(last, (d,))]
    return out


def forgetting(scores: dict[str, dict[str, float]], split: str = "ID") -> dict[str, float]:
    """Per domain but the last: its score after the whole cascade minus right after its own stage.

    ``scores`` maps row names ("After FA", ...) to ``{"fa/ID": avg@8, ...}``."""
    last = scores[f"After {CASCADE[-1].upper()}"]
    return {d: last[f"{d}/{split}"] - scores[f"After {d.upper()}"][f"{d}/{split}"] for d in CASCADE[:-1]}


CLAIM_REGIMES = ("shared_compatible", "no_shared_conflict", "withheld_shared", "random_shared")   # what they read


def store_regimes(store: Store) -> tuple[str, ...]:
    """The regimes this store builds: all five, or with ``claims_only`` the four the claims read
    (Type II, shared by neighbours only, enters no claim: a further seed saves its two stages)."""
    return CLAIM_REGIMES if store.claims_only else tuple(REGIMES)


def mopd_regimes(store: Store, regimes: tuple[str, ...] | None = None) -> Report:
    report = Report("Tables 6-7 / Figs. 17-21: cascaded multi-teacher OPD in three regimes")
    regimes = regimes or store_regimes(store)
    out = store.out("mopd")
    summary_rows, all_samples = [], {}
    for regime in regimes:
        a = build(store, regime)
        report.runs += [a["student"], *a["teachers"].values(), *a["stages"].values()]
        models = {"Instruct": a["student"], **{f"After {d.upper()}": s for d, s in a["stages"].items()}}
        scores, rows, samples = {}, [], {}
        for name, model in models.items():
            s = store.evaluation(model, splits=SPLITS)
            scores[name] = {f"{d}/{sp}": cell(s, sp, "all", domain=d) for sp in SPLITS for d in CASCADE}
            samples[name] = store.samples(model, splits=SPLITS)
        # a teacher knows one domain: it is scored on its own corpus, whose test tasks are its domain's
        for d, t in a["teachers"].items():
            s = store.evaluation(t)
            scores[f"Teacher {d.upper()}"] = {f"{c}/{sp}": cell(s, sp, "all", domain=d) if c == d else float("nan")
                                              for sp in SPLITS for c in CASCADE}
            samples[f"Teacher {d.upper()}"] = store.samples(t)
        own = {d: scores[f"Teacher {d.upper()}"][f"{d}/ID"] for d in a["teachers"]}
        order = ["Instruct", *[f"Teacher {d.upper()}" for d in CASCADE], *[f"After {d.upper()}" for d in CASCADE]]
        for name in order:
            rows.append([name, *scores[name].values(), float(np.mean([scores[name][f"{d}/ID"] for d in CASCADE]))])
        report.add(f"{regime} (teachers: " + ", ".join(f"{d.upper()} {REGIMES[regime][d]}" for d in CASCADE)
                   + "): avg@8 (%) per domain on the Instruct corpus's test splits, all difficulties (a teacher: "
                   "on its own corpus, its domain only)",
                   ["model", *[f"{d.upper()} {sp}" for sp in SPLITS for d in CASCADE], "mean ID"], rows)
        lost = forgetting(scores)
        report.results[regime] = {"scores": scores, "teacher_own_corpus_ID": own, "forgetting_ID": lost,
                                  "patterns": {}}
        summary_rows.append([regime, *[own[d] for d in CASCADE], *[lost[d] for d in CASCADE[:-1]],
                             float(np.mean([scores[f"After {CASCADE[-1].upper()}"][f"{d}/ID"] for d in CASCADE]))])
        all_samples[regime] = samples
        # Figs. 17-21: pattern shares per domain, rows in the paper's order
        tables = {}
        for d in CASCADE:
            labels = {name: [x["pattern"] for x in samples[name] if x["domain"] == d and x["split"] in SPLITS]
                      for name in order if not name.startswith("Teacher") or name == f"Teacher {d.upper()}"}
            tables[d.upper()] = pattern_table(labels)
            report.results[regime]["patterns"][d] = tables[d.upper()].to_dict("index")
        report.figures.append(plot_pattern_heatmap(tables, out / f"patterns_{regime}.png",
                                                   title=f"Planning patterns, {regime}"))
        report.notes.append(_pattern_note(regime, tables))
    report.add("Per regime: each teacher on its own corpus (ID avg@8), the change of an earlier domain's ID avg@8 "
               "from right after its own stage to the end of the cascade (negative = forgotten), and the final mean",
               ["regime", *[f"teacher {d.upper()}" for d in CASCADE],
                *[f"Δ{d.upper()} after cascade" for d in CASCADE[:-1]], "final mean ID"], summary_rows)
    contrasts = regime_contrasts(all_samples)
    report.results["contrasts"] = contrasts
    if contrasts:
        report.add("The MOPD claims, paired by task over the Instruct corpus's ID tasks (a share: % of a task's 8 "
                   "samples using the template); verdict by two standard errors on the side the paper claims",
                   ["comparison", "Δ", "± SE", "tasks", "verdict"],
                   [[name, c["delta"], c["se"], c["tasks"], c["verdict"]] for name, c in contrasts.items()])
    if store.claims_only:
        report.notes.append(f"Seed {store.seed} builds only the regimes the claims read (`--claims`): "
                            + ", ".join(regimes) + ".")
    if len(summary_rows) > 1:
        worst = min(summary_rows, key=lambda r: sum(r[4:4 + len(CASCADE) - 1]))
        best = max(summary_rows, key=lambda r: sum(r[4:4 + len(CASCADE) - 1]))
        report.notes.append(f"least forgetting of earlier domains: {best[0]}; most: {worst[0]} (summed ID change "
                            f"{sum(best[4:6]):+.1f} vs {sum(worst[4:6]):+.1f} points). The regimes are built so "
                            "that shared, compatible patterns should merge best.")
    return report


def _pattern_note(regime: str, tables: dict[str, pd.DataFrame]) -> str:
    """Which pattern dominates each domain before and after the cascade (computed, not asserted)."""
    parts = []
    for d, t in tables.items():
        before, after = t.loc["Instruct"], t.loc[f"After {CASCADE[-1].upper()}"]
        top = lambda s: "–" if s.isna().all() else f"{s.idxmax()} {s.max():.2f}"
        parts.append(f"{d}: {top(before)} -> {top(after)} (teacher {d}'s {REGIMES[regime][d.lower()]})")
    return f"{regime}: dominant pattern, Instruct -> after the cascade: " + "; ".join(parts)


# ----------------------------------------------------------------------------- Fig. 22
def final_checkpoint(run: Path) -> Path:
    """A run's final checkpoint: ``summary.json``'s, else its newest; a checkpoint folder is itself."""
    from pretrain.checkpoint import final_checkpoint as named
    run = Path(run)
    if (run / "trainer_state.json").is_file():
        return run
    ckpt = named(run)
    if ckpt is None:
        raise FileNotFoundError(f"{run} has no checkpoint")
    return ckpt


def distance_rows(labels: list[str], dist: np.ndarray, student: str = "Instruct",
                  stages: tuple[str, ...] = ("MOPD 1", "MOPD 2", "MOPD 3"),
                  teachers: tuple[str, ...] = ()) -> list[list]:
    """[pair, ours, paper] rows: student -> first stage, neighbouring stages, student -> last stage,
    student -> each teacher (paper gives 0.482 and the teachers' range 71.0-73.6)."""
    at = {lab: i for i, lab in enumerate(labels)}
    d = lambda a, b: float(dist[at[a], at[b]])
    lo, hi = paper("fig22", "Instruct", "teachers (min)"), paper("fig22", "Instruct", "teachers (max)")
    rows = [[f"{student} → {stages[0]}", d(student, stages[0]), fmt(paper("fig22", "Instruct", "MOPD 1"), 3)]]
    rows += [[f"{a} → {b}", d(a, b), "–"] for a, b in zip(stages, stages[1:])]
    rows.append([f"{student} → {stages[-1]}", d(student, stages[-1]), "–"])
    rows += [[f"{student} → {t}", d(student, t), f"{fmt(lo)}–{fmt(hi)}"] for t in teachers]
    return rows


def parameter_dynamics(store: Store) -> Report:
    from analysis.params import checkpoint_pca, load_state_dict, pairwise_distances
    report = Report("Fig. 22: parameter dynamics of MOPD")
    a = build(store, "shared_compatible")
    models = {"Instruct": a["student"], **{f"MOPD {i}": s for i, s in enumerate(a["stages"].values(), start=1)},
              **{f"Teacher {d.upper()}": t for d, t in a["teachers"].items()}}
    report.runs += list(models.values())
    labels = list(models)
    states = [load_state_dict(final_checkpoint(store.weights(p))) for p in models.values()]
    coords, ratio = checkpoint_pca(states, n_components=2)
    dist = pairwise_distances(states)
    del states
    teachers = tuple(lab for lab in labels if lab.startswith("Teacher"))
    rows = distance_rows(labels, dist, teachers=teachers)
    report.add("L2 distances in parameter space (shared_compatible regime)", ["pair", "ours", "paper"],
               [[pair_, float(v), ref] for pair_, v, ref in rows])
    report.add("PCA coordinates of the checkpoints",   # each seed has its own PCA basis: never averaged
               ["checkpoint", "PC1", "PC2"], [[lab, float(x), float(y)] for lab, (x, y) in zip(labels, coords)],
               merge=False)
    report.results = {"labels": labels, "distances": dist.tolist(), "pca": coords.tolist(),
                      "explained_variance": ratio.tolist(), "rows": [r[:2] for r in rows]}
    report.figures.append(plot_checkpoint_dynamics(coords, dist, labels, store.out("fig22") / "fig22_dynamics.png",
                                                   title="MOPD (shared_compatible)"))
    report.notes.append(_distance_note(rows, len(teachers)))
    report.notes.append(f"PC1 and PC2 explain {ratio[0]:.1%} and {ratio[1]:.1%} of the variance. Our teachers are "
                        "pre-trained from scratch (not from Instruct), so their distance reflects separate "
                        "initialisations as well as different data.")
    return report


def _distance_note(rows: list[list], n_teachers: int) -> str:
    first = rows[0][1]
    tdist = [r[1] for r in rows[-n_teachers:]] if n_teachers else []
    p_first, p_lo = paper("fig22", "Instruct", "MOPD 1"), paper("fig22", "Instruct", "teachers (min)")
    if not tdist:
        return f"Instruct → MOPD 1 is {first:.3g} (paper {p_first})."
    ours, theirs = first / min(tdist), p_first / p_lo
    return (f"Instruct → MOPD 1 is {first:.3g} vs {min(tdist):.3g}–{max(tdist):.3g} to the teachers: ratio {ours:.2g} "
            f"(paper {p_first} vs {p_lo}–{paper('fig22', 'Instruct', 'teachers (max)')}: ratio {theirs:.2g}); "
            + ("as in the paper, MOPD stays far closer to Instruct than any teacher."
               if first < 0.1 * min(tdist) else "unlike the paper, MOPD is not an order of magnitude closer "
                                                 "to Instruct than the teachers are."))
