# driftmatrix: the two commands are `make repro` (run the default experiment) and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
STAMP := $(VENV)/.installed
PARAMS ?= params.yaml
# Python compiles each module the first time a command imports it and keeps the bytecode beside it
# (in .venv, and src/ and tests/ where git ignores it): the install leaves that to first use, as the
# pipeline imports about a fifth of the venv's files. PYTHONDONTWRITEBYTECODE, set on many CI
# machines, would make every stage process compile torch, MLflow and great-expectations afresh
# (4-9 s each), so make's commands run without it.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: repro install params data status matrices recommend golden test test-cluster bench bench-cluster bench-scale ui exp clean-outputs help

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(STAMP): requirements.txt pyproject.toml tools/install_deps.py
	@# a venv whose creation was killed has a python but no pip: made afresh
	$(VENV)/bin/python -c 'import pip' 2>/dev/null || $(PYTHON) -m venv --clear $(VENV)
	$(PYTHON) tools/install_deps.py $(VENV)
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install pinned requirements (skipped when up to date)

params:  ## use a preset: `make repro PARAMS=presets/x.yaml` copies it over params.yaml, never over unsaved edits
	@if [ "$(PARAMS)" != "params.yaml" ]; then \
	  if ! cmp -s "$(PARAMS)" params.yaml && git rev-parse --git-dir >/dev/null 2>&1 \
	     && ! git diff --quiet HEAD -- params.yaml 2>/dev/null; then \
	    echo "error: params.yaml has edits that are not committed; commit them first (git commit params.yaml)," \
	         "or run the preset beside them as a DVC experiment: make exp PRESET=$(PARAMS)" >&2; exit 2; fi; \
	  cp "$(PARAMS)" params.yaml && echo "params.yaml <- $(PARAMS) (the committed params.yaml is in git)"; fi

data: install params  ## write the built-in dataset (if missing) and track data/ with DVC
	driftmatrix data generate
	dvc add -q data

repro: data  ## run the whole pipeline on the built-in default (dvc repro)
	driftmatrix repair-lock
	dvc repro
	@echo "Results: outputs/report/report.html, outputs/matrices/, MLflow: make ui"

status: data  ## what is done, stale or missing per model, and what `make repro` would train and score
	dvc repro -q slice
	driftmatrix status

# --single-item: only these two stages, on the scores already in outputs/scores, however stale the
# stages upstream are (`make repro` trains and scores). dvc.lock records what each one read.
matrices: install  ## only the matrices and report stages, on the scores present (trains and scores nothing)
	dvc repro --single-item matrices
	dvc repro --single-item report

recommend: install  ## best model per retraining horizon, from outputs/matrices
	driftmatrix recommend outputs/matrices

golden: install  ## reproduce the paper's Yearbook tables from the published matrices
	pytest tests/analysis/test_golden_yearbook.py

# Two workers: a worker runs a test module (or all the Ray tests) as a whole, slow modules first
# (tests/conftest.py). TEST_WORKERS=0 runs the suite in this one process. The 20 slowest tests
# are listed at the end (docs/benchmarks.md keeps a recent list).
TEST_WORKERS ?= 2
test: install  ## run the test suite on 2 workers (the cluster tests too: they are part of it)
	pytest -n $(TEST_WORKERS) --dist loadgroup --durations=20

test-cluster: install  ## only the two-node Ray cluster and PostgreSQL tracking-server tests (about 7 min)
	pytest -m cluster

bench: install  ## time-to-matrix and throughput benchmarks (see bench/)
	$(VENV)/bin/python bench/run.py

bench-cluster: install  ## the default through a two-node Ray cluster and a PostgreSQL tracking server vs local sqlite
	$(VENV)/bin/python bench/cluster.py

# SCALE_ARGS narrows it on a small machine, e.g. SCALE_ARGS="--units 300 --stores sqlite"
bench-scale: install  ## 5,000 cheap units through dvc repro into sqlite and a PostgreSQL tracking server: per-unit bookkeeping, plan, report, memory
	$(VENV)/bin/python bench/scale.py $(SCALE_ARGS)

UI_HOST := 127.0.0.1
UI_PORT ?= 5000
UI_STORE ?= $(or $(MLFLOW_TRACKING_URI),sqlite:///mlflow.db)
ui: install  ## MLflow UI on 127.0.0.1 only (not the network); prints the URL of the runs table
	@python -m driftmatrix.tracking.ui --uri "$(UI_STORE)" --host $(UI_HOST) --port $(UI_PORT)
	mlflow ui --backend-store-uri "$(UI_STORE)" --host $(UI_HOST) --port $(UI_PORT)

exp: install  ## run a preset as a DVC experiment: make exp PRESET=presets/x.yaml [EXP_ARGS="-n name"]
	@test -n "$(PRESET)" || { echo "usage: make exp PRESET=presets/<name>.yaml [EXP_ARGS='-n <name>']"; exit 2; }
	python -m driftmatrix.runtime.dvc "$(PRESET)" -- $(EXP_ARGS)

clean-outputs:  ## remove pipeline outputs (not the MLflow store)
	rm -rf outputs
