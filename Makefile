# Every workflow is one target; each installs what it needs into .venv first.
# Start here: `make book` (run every chapter, write _build/) and `make test`.

# Python 3.11 to 3.13 (what the pinned set installs and is tested with). Without
# PYTHON=..., the first supported interpreter found is used: python3, then python3.13,
# python3.12, python3.11 on PATH, then pyenv's versions (tools/find_python.sh).
ifndef PYTHON
PYTHON := $(shell sh tools/find_python.sh)
endif
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
KERNEL := transformer-book
# Same thread count everywhere, so that stored outputs reproduce.
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0

.PHONY: help install export sync check-sync lint pytest nbval exercises test \
        execute checkpoint book site lab student grade clean

help:
	@echo "make book        run every chapter in a fresh kernel, build the site in _build/html/"
	@echo "make site        fast: build the site from the stored outputs (no chapter runs)"
	@echo "make test        everything CI checks (sync, lint, pytest, nbval, exercises)"
	@echo "make lab         open JupyterLab on chapters/ with the project's kernel"
	@echo "make execute NB=chapters/03_attention.py   re-run one chapter and store it"
	@echo "make checkpoint  retrain chapter 09 and rewrite the shipped translator"
	@echo "make export      regenerate transformer/ from the notebooks"
	@echo "make check-sync  fast: package and .py pairs agree with the notebooks"
	@echo "make student     student copies (solutions removed) in student/"
	@echo "make grade NB=student/01_embedding.ipynb   grade a student's notebook"
	@echo "make clean       remove .venv, _build, student and caches"

# Pinned, tested versions (torch 2.13.0 CPU build), the project in editable
# mode, and the Jupyter kernel that the notebooks name.
install: $(STAMP)
$(STAMP): requirements-dev.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11-3.13 found (python3, python3.13," \
		"python3.12, python3.11, pyenv). Install one, or pass it: make PYTHON=/path/to/python3.12 ..." >&2; exit 1; }
	@sh tools/find_python.sh --check $(PYTHON)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@sh tools/find_python.sh --check $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) \
		--display-name "Python (transformer-book)" >/dev/null
	touch $(STAMP)

export: $(STAMP)
	$(PY) tools/export.py

sync: $(STAMP)
	$(VENV)/bin/jupytext --sync chapters/*.ipynb

check-sync: $(STAMP)
	$(PY) tools/export.py --check
	$(PY) tools/pairs.py --check

lint: $(STAMP)
	$(VENV)/bin/ruff check .

pytest: $(STAMP)
	$(PY) -m pytest tests

nbval: $(STAMP)
	$(PY) -m pytest -p no:cacheprovider --nbval chapters --nbval-current-env \
		--nbval-sanitize-with tools/sanitize.cfg --nbval-cell-timeout=900 -o addopts=""

exercises: $(STAMP)
	$(PY) tools/exercises.py verify

test: check-sync lint pytest nbval exercises

execute: $(STAMP)
	$(PY) tools/execute.py $(NB)

# Retrain the shipped translator by running chapter 09 with saving switched on
# (a plain run of the chapter trains and checks, but leaves the shipped file alone).
checkpoint: $(STAMP)
	TRANSFORMER_SAVE_CHECKPOINT=1 $(PY) tools/execute.py chapters/09_training.py

# The website (Sphinx + MyST-NB, config in book/): `book` runs every chapter first,
# `site` renders the committed outputs. Open _build/html/index.html.
book: $(STAMP)
	$(PY) tools/book.py

site: $(STAMP)
	$(PY) tools/website.py

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=chapters

student: $(STAMP)
	$(PY) tools/exercises.py student

grade: $(STAMP)
	$(PY) tools/exercises.py grade $(NB)

clean:
	rm -rf $(VENV) _build student graded .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
