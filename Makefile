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

.PHONY: venv test data pretrain bench-gym clean
.DEFAULT_GOAL := help

help:
	@echo "make pretrain DOMAIN=fa [SCALE=tiny|small|paper]   data -> tokenizer -> model -> evaluation"
	@echo "make test                                          the test suite"
	@echo "make data DOMAIN=fa SCALE=small [DATA_DIR=data]    generate a corpus"
	@echo "make bench-gym                                     env steps/s, verified trajectories/s"

# torch is pinned first (a CPU wheel available on these machines), then the project itself.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

data: $(STAMP)
	$(BIN)/python -m planning_gym.make_data --domain $(DOMAIN) $(if $(SCALE),--scale $(SCALE)) --data-dir $(DATA_DIR) --seed $(SEED)

bench-gym: $(STAMP)
	$(BIN)/python -m planning_gym.bench

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
