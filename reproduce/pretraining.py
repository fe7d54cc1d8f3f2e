"""Pre-training reproductions (paper §4): what the corpus does to planning.

* Figs. 3-4 — world-model chain of thought vs direct actions, same tasks, same budget.  A budget
  equal in steps (tokens) is unequal in trajectories: a world-model trajectory is about twice as
  long, so the direct arm sees its corpus about twice as often.  A third arm therefore trains the
  direct model only until it has seen as many trajectories (epochs) as the world model.
* Table 1 / Fig. 5 — the S/M/L horizon ladder: does a little mid/long data unlock composition?
* Fig. 6 — optimal vs suboptimal trajectories: 1 Opt, 4 Opt, 4 Opt:4 Sub, 4 Opt:8 Sub.

Every model is a member of the fa family (one tokenizer), pre-trained with the scale's preset and
evaluated with the paper's protocol (K=8, T=0.4, step limit 20) on its own corpus's test splits,
which hold the same tasks for every member (test tasks do not depend on the corpus's pattern,
format or horizon mix).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.figures import plot_grouped_bars, plot_small_multiples
from analysis.measures import contrast, paired_difference, task_score
from analysis.report import Report
from analysis.run_logs import BASELINE_HEADER, beside_baselines, cell, corpus_budget_fit, failure_endings
from reproduce.paper_numbers import fmt, paper
from reproduce.store import Store

DIFFS = ("short", "mid", "long")
SCALING_STEPS = {"tiny": (100, 200, 300), "small": (200, 600, 1000), "paper": (1000, 3000, 9000)}
MIXES = ((100, 0, 0), (100, 5, 0), (100, 0, 5), (100, 100, 50), (100, 100, 100))
QUALITIES = ("1opt", "4opt", "4opt4sub", "4opt8sub")


def _scores(summary: dict, split: str = "ID") -> dict[str, float]:
    return {f"{d} {m}": cell(summary, split, d, m) for d in (*DIFFS, "all") for m in ("avg@8", "pass@8")}


def corpus_tokens(run: Path) -> int:
    """Tokens in one epoch of a pre-training run's corpus: as the run recorded it, else its packed
    stream (cached by the run; a run restored from a carry has no cache)."""
    from pretrain.data import load_split
    from pretrain.tokenizer import load_tokenizer, special_ids
    record = json.loads((Path(run) / "train_config.json").read_text())
    if record.get("corpus_tokens"):
        return int(record["corpus_tokens"])
    tok = load_tokenizer(Path(run) / "tokenizer")
    data = load_split(Path(record["data"]), "pretrain.jsonl", tok, special_ids(tok), record["config"]["block_size"],
                      record["config"]["seed"], cache_dir=Path(run) / "cache")
    return len(data.stream)


def trained_steps(run: Path) -> int:
    return json.loads((Path(run) / "train_config.json").read_text())["config"]["steps"]


def equal_trajectory_steps(reference: Path, other: Path) -> int:
    """Steps at which ``other`` has seen as many epochs of its corpus as ``reference`` at its end
    (both runs use the same batch of tokens per step)."""
    return max(1, round(trained_steps(reference) * corpus_tokens(other) / corpus_tokens(reference)))


def world_model_vs_direct(store: Store) -> Report:
    report = Report("Figs. 3-4: world-model CoT vs direct actions")
    arms = {"world model": store.pretrained(), "direct": store.pretrained(cot_format="direct")}
    corpora = {"world model": store.corpus(), "direct": store.corpus(cot_format="direct")}  # a restored store has none
    eq_steps = equal_trajectory_steps(arms["world model"], arms["direct"])
    equal = arms["direct"] if eq_steps == trained_steps(arms["direct"]) else \
        store.pretrained(cot_format="direct", steps=eq_steps)
    report.runs += [*arms.values(), equal]
    runs = {**arms, "equal": equal}
    evals = {name: store.evaluation(run) for name, run in runs.items()}
    samples = {name: store.samples(run) for name, run in runs.items()}   # both corpora hold the same tasks
    for split in ("ID", "OOD"):
        rows = []
        for d in (*DIFFS, "all"):
            wm, di, eq = (cell(evals[a], split, d) for a in ("world model", "direct", "equal"))
            wm_se, di_se, eq_se = (task_score(samples[a], split, d)[1] for a in ("world model", "direct", "equal"))
            _, se, _ = paired_difference(samples["world model"], samples["direct"], split, d)
            _, se_eq, _ = paired_difference(samples["world model"], samples["equal"], split, d)
            rows.append([d, wm, wm_se, di, di_se, wm - di, se, eq, eq_se, wm - eq, se_eq,
                         paper("fig3-4", "gain", d) if split == "ID" else None,
                         cell(evals["world model"], split, d, "pass@8"), cell(evals["direct"], split, d, "pass@8")])
            report.results[f"{split}/{d}"] = {"world_model": wm, "world_model_se": wm_se, "direct": di,
                                              "direct_se": di_se, "gain": wm - di, "gain_se": se,
                                              "direct_equal_trajectories": eq, "direct_equal_trajectories_se": eq_se,
                                              "gain_equal_trajectories": wm - eq, "gain_equal_trajectories_se": se_eq}
        report.add(f"{split} avg@8 (%) by difficulty, and the world-model gain over direct at equal steps and at "
                   f"equal trajectories (direct stopped at step {eq_steps}); ± SE: standard error over tasks of the "
                   "score before it, for a gain paired by task (the error bars of Fig. 3)",
                   ["difficulty", "world model", "± SE", "direct", "± SE", "gain", "± SE", f"direct, {eq_steps} steps",
                    "± SE", "gain, equal traj.", "± SE", "paper gain", "wm pass@8", "direct pass@8"], rows)
    report.results["equal_trajectory_steps"] = eq_steps
    add_baselines(report, {"world model": evals["world model"], "direct": evals["direct"],
                           **({f"direct, {eq_steps} steps": evals["equal"]} if equal != arms["direct"] else {})})
    add_budget_fit(report, arms, corpora, evals["world model"], samples)
    report.results["contrasts"] = {     # the paper compares at equal steps only: no paper number for the control
        f"world model - {arm}, {d}": contrast(samples["world model"], samples[key], "ID", d, +1,
                                              paper=paper("fig3-4", "gain", d) if key == "direct" else None)
        for arm, key in (("direct", "direct"), ("direct at equal trajectories", "equal")) for d in DIFFS}
    out = store.out("fig3-4")
    # the figures plot the ID table's numbers and standard errors, nothing else
    labels = {"world model": "world model", "direct": "direct", "equal": f"direct, {eq_steps} steps (equal trajectories)"}
    keys = {"world model": "world_model", "direct": "direct", "equal": "direct_equal_trajectories"}
    bars, bar_se = (pd.DataFrame({labels[a]: [report.results[f"ID/{d}"][keys[a] + tail] for d in DIFFS] for a in evals},
                                 index=list(DIFFS)) for tail in ("", "_se"))
    report.figures.append(plot_grouped_bars(bars, out / "fig3_world_model_vs_direct.png", errors=bar_se,
                                            title="ID avg@8 ± SE: world-model CoT vs direct (Fig. 3)"))
    ours = {"ours, equal steps": "gain", "ours, equal trajectories": "gain_equal_trajectories"}
    gains = pd.DataFrame({**{c: [report.results[f"ID/{d}"][k] for d in DIFFS] for c, k in ours.items()},
                          "paper": [paper("fig3-4", "gain", d) for d in DIFFS]}, index=list(DIFFS))
    gain_se = pd.DataFrame({c: [report.results[f"ID/{d}"][f"{k}_se"] for d in DIFFS] for c, k in ours.items()},
                           index=list(DIFFS))
    report.figures.append(plot_grouped_bars(gains, out / "fig3_gain_vs_paper.png", ylabel="gain (avg@8 points)",
                                            errors=gain_se, title="world-model minus direct ID avg@8 ± SE (paired), "
                                                                  "ours beside the paper's"))

    if store.claims_only:     # the claims read the final models only
        report.notes.append(f"Seed {store.seed} builds only what the claims read (`--claims`): no Fig. 4 curve.")
    else:
        along_pretraining(report, store, arms, out)
    for key, budget in (("gain", "At equal steps (tokens)"),
                        ("gain_equal_trajectories", f"At equal trajectories (direct stopped at step {eq_steps})")):
        report.notes.append(f"{budget}: " + gain_verdict([report.results[f"ID/{d}"][key] for d in DIFFS],
                                                         [report.results[f"ID/{d}"][f"{key}_se"] for d in DIFFS]))
    return report


def add_budget_fit(report: Report, arms: dict, corpora: dict, summary: dict, samples: dict) -> None:
    """Were the arms scored on how they plan, not on what the rollout budgets let them write? A
    world-model turn is many times a direct one (at small the longest are 201 and 6 tokens): were its
    corpus turns cut at the evaluation's per-turn budget, or its episodes at the total one, its
    failures would measure the budget (`corpus_budget_fit`)."""
    from engine.rollout import RolloutConfig           # the budgets of an evaluation that did not record them
    turn_budget = summary.get("max_turn_tokens", RolloutConfig.max_turn_tokens)
    total_budget = summary.get("max_total_tokens", RolloutConfig.max_total_tokens)
    rows, fits = [], {}
    for arm, run in arms.items():
        fit = fits[arm] = corpus_budget_fit(run, turn_budget, total_budget, corpora[arm])
        endings = failure_endings(samples[arm])
        rows.append([arm, fit["turns"], fit["turns_over"], fit["longest_turn"], fit["episodes"], fit["episodes_over"],
                     fit["longest_episode"], sum(endings.values()),
                     ", ".join(f"{reason} {n}" for reason, n in endings.items()) or "–"])
    report.results["budget_fit"] = fits
    report.add(f"Do the arms' own trajectories fit the evaluation's budgets ({turn_budget} tokens a turn, "
               f"{total_budget} an episode)? Corpus turns and episodes over them, and how the failed ID episodes "
               "ended (step limit: 20 actions without reaching the goal; max_total_tokens: the episode's budget)",
               ["arm", "corpus turns", f"over {turn_budget}", "longest", "corpus episodes", f"over {total_budget}",
                "longest", "failed ID episodes", "how they ended"], rows)
    over = {arm: fit["turns_over"] / max(fit["turns"], 1) for arm, fit in fits.items()}
    cut = max(over, key=over.get)
    episodes_over = sum(f["episodes_over"] for f in fits.values())
    fits_budget = over[cut] < 0.01 and not episodes_over       # under 1 % of turns cut, no episode
    report.notes.append(
        f"Rollout budgets: {fits[cut]['turns_over']} of {fits[cut]['turns']} {cut} corpus turns exceed the "
        f"{turn_budget}-token turn budget, and {episodes_over} corpus episodes the {total_budget}-token episode budget"
        + (" — the arms are scored on how they plan, not on a budget that cuts one of them." if fits_budget else
           " — a budget cuts the corpus's own trajectories, so the scores measure it too: raise max_turn_tokens "
           "or max_total_tokens."))


def along_pretraining(report: Report, store: Store, arms: dict, out: Path) -> None:
    """Fig. 4: the same comparison along pre-training (tokens seen), from the runs' checkpoints."""
    panels, errors, rows = {}, {}, []
    for name, run in arms.items():
        for step in SCALING_STEPS[store.scale]:
            model = store.checkpoint(run, step)
            s, ss = store.evaluation(model), store.samples(model)
            row = [name, step]
            for d in DIFFS:
                avg, se = cell(s, "ID", d), task_score(ss, "ID", d)[1]
                row += [avg, se]
                report.results.setdefault("scaling", []).append({"arm": name, "step": step, "difficulty": d,
                                                                 "avg@8": avg, "se": se})
                x, y = panels.setdefault(d, {}).setdefault(name, ([], []))
                x.append(step)
                y.append(avg)
                errors.setdefault(d, {}).setdefault(name, []).append(se)
            rows.append(row)
    report.add("ID avg@8 (%) along pre-training (Fig. 4); ± SE: standard error over tasks",
               ["arm", "step", *[c for d in DIFFS for c in (d, "± SE")]], rows)
    report.figures.append(plot_small_multiples(panels, out / "fig4_scaling.png", "pre-training step", "ID avg@8 (%)",
                                               errors=errors, ncols=len(DIFFS),
                                               title="avg@8 ± SE along pre-training, one panel per difficulty (Fig. 4)"))


def gain_verdict(gains: list[float], ses: list[float]) -> str:
    """Fig. 3's claim checked on our world-model gains (short, mid, long) and their paired standard
    errors: the gain "grows with the horizon" only if it never falls and long exceeds short by more
    than two standard errors of that difference."""
    wins = sum(g > 0 for g in gains)
    clear = sum(g > 2 * se for g, se in zip(gains, ses))           # False for a NaN standard error
    rise, noise = gains[2] - gains[0], 2 * (ses[0] ** 2 + ses[2] ** 2) ** 0.5
    monotone = gains[0] <= gains[1] <= gains[2] and rise > 0
    grows = monotone and rise > noise
    trend = ("grows with the horizon" if grows else
             "does not grow with the horizon" if not monotone else
             f"rises by {rise:.1f} points from short to long, within two standard errors ({noise:.1f})"
             if noise == noise else f"rises by {rise:.1f} points from short to long, which one task per cell "
                                    "cannot tell from noise")
    return (f"world-model minus direct ID avg@8 by difficulty: "
            f"{', '.join(f'{g:+.1f} ± {se:.1f}' if se == se else f'{g:+.1f}' for g, se in zip(gains, ses))} "
            "(paper +9.4 / +39.3 / +45.8). In the paper the world model wins at every horizon and "
            f"its gain grows with the horizon; ours wins at {wins} of 3 ({clear} by more than two standard errors) "
            f"and its gain {trend}" + (" — agreement." if wins == 3 and grows else
                                       " — agreement in sign only." if wins == 3 else " — not the paper's result."))


def horizon_mixtures(store: Store) -> Report:
    report = Report("Table 1 / Fig. 5: horizon mixtures of the pre-training data")
    rows, by_mix, summaries = [], {}, {}
    for mix in MIXES:
        run = store.pretrained(horizon_mix=mix)
        report.runs.append(run)
        s, samples = store.evaluation(run), store.samples(run)
        name = "/".join(map(str, mix))
        summaries[name] = s
        by_mix[name] = samples
        scores = _scores(s)
        scores.update({f"{d} pass@8 se": task_score(samples, "ID", d, "pass")[1] for d in DIFFS})
        report.results[name] = scores
        row = [name]
        for d in DIFFS:
            row += [scores[f"{d} avg@8"], paper("table1", name, f"{d} avg@8"),
                    scores[f"{d} pass@8"], scores[f"{d} pass@8 se"], paper("table1", name, f"{d} pass@8")]
        rows.append(row)
    header = ["S/M/L"] + [c for d in DIFFS for c in (f"{d} avg@8", f"{d} avg@8 paper", f"{d} pass@8", "± SE",
                                                     f"{d} pass@8 paper")]
    report.add("ID avg@8 / pass@8 (%) per pre-training mixture (percent of each bin's rows kept); ± SE: standard "
               "error of pass@8 over tasks (the error bars of Fig. 5)", header, rows)
    out = store.out("table1")
    bars, bar_se = (pd.DataFrame({"/".join(map(str, m)): [report.results["/".join(map(str, m))][f"{d} pass@8{tail}"]
                                                          for d in DIFFS] for m in MIXES}, index=list(DIFFS))
                    for tail in ("", " se"))
    ref = pd.DataFrame({m: [paper("table1", m, f"{d} pass@8") for d in DIFFS] for m in bars.columns},
                       index=list(DIFFS), dtype=float)
    report.figures.append(plot_grouped_bars(bars, out / "fig5_horizon_mixtures.png", ylabel="ID pass@8 (%)",
                                            title="pass@8 ± SE by pre-training mixture S/M/L (Fig. 5; ◆ the paper's)",
                                            reference=ref, errors=bar_se))
    contrasts = mixture_contrasts(by_mix)
    report.results["contrasts"] = contrasts
    report.add("Table 1's comparisons (ID; each mixture on its own test tasks, which differ at mid and long, so "
               "unpaired: ± the two-sample SE over tasks); verdict by two standard errors",
               ["comparison", "a − b", "metric", "ours", "± SE", "tasks", "paper", "verdict"],
               [[name, f"{c['a']} − {c['b']}", c["metric"], c["delta"], c["se"], c["tasks"], c["paper"], c["verdict"]]
                for name, c in contrasts.items()])
    report.notes += mixture_verdicts(report.results, contrasts, store.budget["eval_tasks_per_cell"])
    add_baselines(report, summaries)
    return report


# Table 1's paired comparisons: (name, mixture a, mixture b, difficulty, metric, the sign of a - b the
# paper claims); the paper's own a - b is printed where it gives both numbers
MIXTURE_CONTRASTS = (
    ("short-only vs full, mid", "100/0/0", "100/100/100", "mid", "pass", -1),
    ("short-only vs full, long", "100/0/0", "100/100/100", "long", "pass", -1),
    ("+5% mid data, mid", "100/5/0", "100/0/0", "mid", "pass", +1),
    ("+5% long data, long", "100/0/5", "100/0/0", "long", "pass", +1),
    ("100/100/50 vs 100/100/100, long", "100/100/50", "100/100/100", "long", "avg", +1),
)


def mixture_contrasts(samples: dict[str, list[dict]]) -> dict[str, dict]:
    """Table 1's comparisons, each a difference of two mixtures' ID pass@8 (or avg@8) over their own
    test tasks, ± its two-sample standard error, beside the paper's difference."""
    out = {}
    for name, a, b, d, metric, sign in MIXTURE_CONTRASTS:
        key = f"{d} {metric}@8"
        # unpaired: a corpus's mid and long test tasks are drawn novel to its own training plans, so two
        # mixtures hold different tasks under the same ids (their short tasks are the same)
        out[name] = {"a": a, "b": b, "metric": key, **contrast(samples[a], samples[b], "ID", d, sign, metric,
                                                               _paper_difference("table1", a, b, key), paired=False)}
    return out


def mixture_verdicts(r: dict, contrasts: dict[str, dict], tasks_per_cell: int) -> list[str]:
    """Table 1's three claims, each decided on our paired differences by two standard errors
    (``r``: mixture -> scores; ``contrasts``: `mixture_contrasts`)."""
    def said(name):
        c = contrasts[name]
        return (plus_minus(c["delta"], c["se"]) + (f" (paper {c['paper']:+.1f})" if c["paper"] is not None else "") + f": {c['verdict']}")
    full = r["100/100/100"]
    atomic = [contrasts[f"short-only vs full, {d}"]["verdict"] for d in ("mid", "long")]
    notes = [
        "Atomic skills alone (short-only minus the full mix, ID pass@8 over each corpus's own tasks): mid "
        + said("short-only vs full, mid") + ", long " + said("short-only vs full, long")
        + (" — the full mix solves no longer task either, so this tests nothing."
           if full["mid pass@8"] == full["long pass@8"] == 0 else
           " — short-only falls below the full mix on both longer bins: agreement." if atomic == ["agrees"] * 2 else
           " — short-only is above the full mix on a longer bin: not the paper's result." if "disagrees" in atomic
           else " — within two standard errors on a longer bin: cannot tell."),
        "A little longer data (pass@8, each corpus's own tasks): +5% mid data on mid tasks " + said("+5% mid data, mid")
        + "; +5% long data on long tasks " + said("+5% long data, long") + ".",
        "100/100/50 minus 100/100/100, long avg@8 " + said("100/100/50 vs 100/100/100, long")
        + " (a non-monotonic step the paper's review asks about).",
    ]
    if tasks_per_cell:
        notes.append(f"Each cell is {tasks_per_cell} task(s) x 8 samples, so pass@8 moves in steps of "
                     f"{100 / tasks_per_cell:.0f} points; a verdict needs a difference beyond two standard errors.")
    return notes


def data_quality(store: Store) -> Report:
    report = Report("Fig. 6: optimal vs suboptimal pre-training trajectories")
    rows, by_quality, summaries = [], {}, {}
    for q in QUALITIES:
        run = store.pretrained(patterns=q)
        report.runs.append(run)
        s = summaries[q] = store.evaluation(run)
        scores = _scores(s)
        samples = by_quality[q] = store.samples(run)
        scores.update({f"{d} avg@8 se": task_score(samples, "ID", d)[1] for d in DIFFS})
        sub = 100.0 * sum(o["pattern"].startswith("D") for o in samples) / max(1, len(samples))
        info = sample_information(samples)
        report.results[q] = {**scores, "suboptimal pattern %": sub, **info}
        rows.append([q] + [scores[f"{d} {m}"] for d in DIFFS for m in ("avg@8", "avg@8 se", "pass@8")]
                    + [paper("fig6", q, "long avg@8"), sub, info["I(task;pattern)"], info["I(task;knowledge)"]])
    header = ["patterns"] + [c for d in DIFFS for c in (f"{d} avg@8", "± SE", f"{d} pass@8")] + [
        "paper long avg@8", "D-pattern outputs %", "I(task;pattern) bits", "I(task;knowledge) bits"]
    report.add("ID avg@8 / pass@8 (%) per pre-training data quality (Opt:Sub pattern mixture); ± SE: standard error "
               "of avg@8 over tasks (the error bars of Fig. 6)", header, rows)
    out = store.out("fig6")
    bars, bar_se = (pd.DataFrame({q: [report.results[q][f"{d} avg@8{tail}"] for d in DIFFS] for q in QUALITIES},
                                 index=list(DIFFS)) for tail in ("", " se"))
    report.figures.append(plot_grouped_bars(bars, out / "fig6_quality.png", errors=bar_se,
                                            title="ID avg@8 ± SE by pre-training data quality (Fig. 6)"))
    report.results["contrasts"] = quality_contrasts(by_quality)
    report.add("Each suboptimal mixture minus 4 Opt, ID avg@8 paired by task (± SE over tasks); the paper's "
               "difference and the verdict by two standard errors",
               ["mixture − 4opt", "difficulty", "ours", "± SE", "tasks", "paper", "verdict"],
               [[c["a"], c["difficulty"], c["delta"], c["se"], c["tasks"], c["paper"], c["verdict"]]
                for c in report.results["contrasts"].values()])
    long = report.results["contrasts"]["4opt8sub/long"]
    report.notes.append("long-horizon ID avg@8: " + ", ".join(f"{q} {report.results[q]['long avg@8']:.1f}"
                                                            for q in QUALITIES)
                        + ". The paper's claim: suboptimal data hurts most at long horizons (4 Opt:8 Sub about 0). "
                        f"4 Opt:8 Sub minus 4 Opt on long tasks: {plus_minus(long['delta'], long['se'])} "
                        f"(paired by task over {long['tasks']} tasks) — {long['verdict']}.")
    below = [q for q in QUALITIES if report.results[q]["I(task;pattern)"] < report.results[q]["I(task;knowledge)"]]
    report.notes.append(f"I(task; pattern) < I(task; knowledge) — the paper's argument that patterns are reusable "
                        f"and knowledge task-specific, which it never estimates — holds for {len(below)} of "
                        f"{len(QUALITIES)} models (plug-in, Miller-Madow corrected, from the ID samples; knowledge "
                        "= the action sequence).")
    add_baselines(report, summaries)
    return report


def add_baselines(report: Report, summaries: dict[str, dict]) -> None:
    """The quality bar: every model score is printed beside what agents that do not plan score on its tasks."""
    rows, reached = beside_baselines(summaries)
    if rows:
        report.add("Beside the baselines: ID, each model on its own test tasks; the baselines are agents that do not "
                   "plan (recall-cascade and the others are deterministic, so their avg@8 = pass@8; the solver, "
                   "an oracle, scores 100)", BASELINE_HEADER, rows)
        report.notes.append(f"In {reached} of {len(rows)} (model, difficulty) cells an agent that does not plan scores "
                            "at least the model's pass@8 (table \"Beside the baselines\"): there the model's number is "
                            "no evidence of planning.")


def plus_minus(delta: float, se: float) -> str:
    """'+3.1 ± 1.5'; without the ± part where there is no standard error (one task)."""
    return fmt(delta, signed=True) + (f" ± {se:.1f}" if se == se else "")


def _paper_difference(table: str, a: str, b: str, column: str) -> float | None:
    """The paper's a - b where it reports both numbers, else None."""
    x, y = paper(table, a, column), paper(table, b, column)
    return None if x is None or y is None else x - y


def quality_contrasts(samples: dict[str, list[dict]]) -> dict[str, dict]:
    """Fig. 6's comparisons: each suboptimal mixture minus 4 Opt, ID avg@8 paired by task, per difficulty."""
    out = {}
    for q in ("4opt4sub", "4opt8sub"):
        for d in DIFFS:
            out[f"{q}/{d}"] = {"a": q, "difficulty": d,      # the claim: suboptimal data hurts (sign -1)
                               **contrast(samples[q], samples["4opt"], "ID", d, -1,
                                          paper=_paper_difference("fig6", q, "4opt", f"{d} avg@8"))}
    return out


def sample_information(samples: list[dict], split: str = "ID") -> dict[str, float]:
    """Plug-in I(task; pattern) and I(task; knowledge) in bits over a model's evaluation samples
    of ``split``; a sample's knowledge is its action sequence."""
    from analysis.info import task_information
    rows = [o for o in samples if o["split"] == split]
    table = task_information([o["task"] for o in rows], [o["pattern"] for o in rows], [o["actions"] for o in rows])
    return {"I(task;pattern)": float(table.loc["pattern", "mi"]), "I(task;knowledge)": float(table.loc["knowledge", "mi"])}
