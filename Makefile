# The README's commands. `make demo` runs the course on the embedded default; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.cvlc-installed
PROFILE ?= demo
DOCS_PROFILE ?= demo
export PATH := $(abspath $(BIN)):$(PATH)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install demo reproduce test docs bench export clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py tools/install.sh
	bash tools/install.sh $(VENV)
	touch $@

## the main job: every chapter at PROFILE=demo into runs/<timestamp>/, then a summary table
demo: install
	cvlc run all --profile $(PROFILE)

## every chapter at PROFILE=paper into runs/paper/ (resumes there); PUBLISH=1 publishes each run into nbs/results/
reproduce: install
	cvlc run all --profile paper --out runs/paper $(if $(PUBLISH),--publish)
	$(if $(PUBLISH),python tools/build_docs.py --readme)

## the whole test suite: library in sync with the notebooks, notebook tests, pytest (papermill smoke runs, CLI, docs).
## TEST_WORKERS run side by side, each with its share of the cores for torch and BLAS: thread pools larger than that
## fight over the cores (10_simclr's smoke experiment beside a run holding both cores: 171 s with 2 torch threads,
## 26 s with 1)
TEST_WORKERS ?= 2
test: export OMP_NUM_THREADS = $(shell python3 -c "import os; print(max(1, (os.cpu_count() or 1) // $(TEST_WORKERS)))")
test: install
	nbdev-test --n-workers $(TEST_WORKERS) --timing
	python -m pytest tests -n $(TEST_WORKERS) --dist loadfile --durations=10

## the offline documentation site in _site/, with the outputs of the newest run in runs/ (make demo), else executed now
docs: install
	python tools/build_docs.py --from-run latest --profile $(DOCS_PROFILE) --out _site

## benchmarks (pytorch-metric-learning comes with the bench extra)
bench: install
	python -m cvlc.bench all

## write cvlc/ from the notebooks and clean the notebooks
export: install
	nbdev-export && nbdev-clean

clean:
	rm -rf _site _proc _docs runs nbs/runs .pytest_cache
