"""The papers' tables and figures, one command each: ``python -m reproduce TABLE`` (`make reproduce`).

Why a package of its own: reproducing a table *builds* things (corpora, pre-trained models,
post-training runs, evaluations) and runs processes, while `analysis/` only measures what runs
wrote.  Keeping the driver here lets the data flow point one way,

    planning_gym <- pretrain <- engine <- posttrain <- analysis <- reproduce

so every lower package can be used and tested without this one (`tests/test_architecture.py`
checks the direction).

* `store` — the artifact store (`Store`, `BUDGETS`, `ReproductionError`): each artifact built
  once, under a lock file, at a path derived from what it is, and reused by every table.
* `cli` (also ``__main__``) — the command line behind `make reproduce` / `make reproduce-all`.
* `pretraining`, `shaping`, `merge`, `turnopd` — the tables of the gym paper's §4, §5 and §6 and
  of the TurnOPD paper; `paper_numbers` — the papers' values printed beside ours.
* `budget_sweep` — the post-training budget sweep that chooses a scale's post-training settings.
"""
