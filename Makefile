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
# Same thread count everywhere, so that stored outputs reproduce.
export OMP_NUM_THREADS ?= 2
export PYTHONHASHSEED := 0
# Chapters (and test files) run at once: one per core (`nproc`), or JOBS=n.
JOBS ?= $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
export JOBS
# Each stage of make test prints its time and records it here (.ci/run checks it).
export STAGES ?= _build/stages.tsv
STAGE := bash tools/stage.sh
SUBMAKE := $(MAKE) --no-print-directory

.PHONY: help install export sync lint quick pytest chapters test execute checkpoint refinements \
        book site pdf lab student grade check clean

# `make help` lists the targets from their `##` comments, in this file's order.
help: ## this list
	@awk -F ':[^#]*## ' '/^[a-z-]+:.*## / { printf "make %-12s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

# Pinned, tested versions (torch 2.13.0 CPU build) and the project in editable
# mode, installed by uv with pip's configuration (tools/install.py: about 50 s, where
# pip takes about 95 s; pip if uv fails). The notebooks name the standard `python3`
# kernel, which Jupyter started from this environment runs with this environment's
# Python: no kernel to install.
install: $(STAMP) ## the pinned environment in .venv (every target does this first)
$(STAMP): requirements-dev.txt requirements-overrides.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python 3.11-3.13 found (python3, python3.13," \
		"python3.12, python3.11, pyenv). Install one, or pass it: make PYTHON=/path/to/python3.12 ..." >&2; exit 1; }
	@sh tools/find_python.sh --check $(PYTHON)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@sh tools/find_python.sh --check $(PY)
	$(PY) -m tools.install --uv-override requirements-overrides.txt -r requirements-dev.txt
	$(PY) -m tools.install --no-deps -e .
	touch $(STAMP)

export: $(STAMP) ## regenerate transformer/ from the notebooks
	$(PY) -m tools.export

# jupytext keeps the nbgrader metadata of the cells it matches; stamping gives new or
# changed cells theirs (and rewrites a pair's header if the kernelspec changed). CHECK=1
# changes nothing and fails on what is out of step (make test's first stage); its last
# line: the Chinese edition is current (tools/i18n.py; about a second).
sync: $(STAMP) ## .py pairs and nbgrader metadata from the notebooks; CHECK=1: only check them, the package and the Chinese edition
ifdef CHECK
	$(PY) -m tools.export --check
	$(PY) -m tools.pairs --check
	$(PY) -m tools.exercises stamp --check
	$(PY) -m tools.i18n check
else
	$(VENV)/bin/jupytext --sync chapters/*.ipynb
	$(PY) -m tools.exercises stamp
endif

# ruff; mypy on the package; mypy and pyright (standard mode) on the README's programmer section.
lint: $(STAMP) ## ruff; mypy on the package; mypy and pyright on the README's code
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy transformer
	$(PY) -m tools.readme_code _build/lint/readme_code.py
	$(VENV)/bin/mypy _build/lint/readme_code.py
	$(VENV)/bin/pyright --pythonpath $(PY) _build/lint/readme_code.py

# JOBS test files at a time (pytest-xdist, whole files per worker so that a module's
# fixtures are built once), each worker on one thread, the slowest files first
# (tests/conftest.py; --no-loadscope-reorder keeps that order: xdist would otherwise start
# the files with the most tests first, and the slowest file, which has one, last).
# -rs: every skip, with its reason.
XDIST := -n $(JOBS) --dist loadfile --no-loadscope-reorder
pytest: $(STAMP) ## every test in tests/, JOBS files at a time
	OMP_NUM_THREADS=1 $(PY) -m pytest tests $(XDIST) -rs --durations=15

# The edit-test loop: the unit tests are what runs in seconds (tests/conftest.py marks
# the rest slow).
quick: $(STAMP) ## about a minute: the sync check, lint, the unit tests
	@$(SUBMAKE) sync CHECK=1
	@$(SUBMAKE) lint
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -m "not slow" $(XDIST) -q -rs

# Every chapter (or NB=...) run once in a fresh kernel, JOBS at a time, longest first:
# nbval's comparison with the committed outputs, the exercise proof and nbgrader's
# grading all use that one run (tools/chapter_test.py says how). One part alone:
# PART=nbval (nbval the classic way, each chapter in a kernel of nbval's own) or
# PART=exercises (each check fails on the stub and on every near-miss answer).
chapters: $(STAMP) ## every chapter (or NB=...) run once: compared (nbval), exercises proven, graded by nbgrader; PART=nbval|exercises: that part alone
ifeq ($(PART),nbval)
	$(PY) -m pytest -p no:cacheprovider -n $(JOBS) --dist loadfile --nbval $(or $(NB),chapters) \
		--nbval-current-env --nbval-sanitize-with tools/sanitize.cfg --nbval-cell-timeout=900 \
		-o addopts="" -rs
else ifeq ($(PART),exercises)
	$(PY) -m tools.exercises verify $(NB)
else ifneq ($(PART),)
	@echo "PART must be nbval or exercises (or left out: the whole chapter check), got '$(PART)'" >&2; exit 2
else
	$(PY) -m tools.chapter_test $(NB) --jobs $(JOBS)
endif

# Everything CI checks, stage by stage, each stage timed (tools/stage.sh). With NB=...,
# one chapter end to end: the sync check, then its run, compared, proven and graded.
# lint runs beside pytest: mypy's first run, one process reading all of torch's types for
# half a minute, would otherwise leave a core idle; its output follows pytest's.
test: ## everything CI checks, each stage timed; NB=...: one chapter end to end
	@mkdir -p $(dir $(STAGES)) && rm -f $(STAGES) && date +%s > $(STAGES).start
ifdef NB
	@$(STAGE) check-sync $(SUBMAKE) sync CHECK=1
	@$(STAGE) chapters $(SUBMAKE) chapters NB="$(NB)"
else
	@$(STAGE) install $(SUBMAKE) install
	@$(STAGE) check-sync $(SUBMAKE) sync CHECK=1
	@{ $(STAGE) lint $(SUBMAKE) lint > $(STAGES).lint 2>&1 & } ; lint=$$!; \
		$(STAGE) pytest $(SUBMAKE) pytest; tests=$$?; \
		wait $$lint; linted=$$?; cat $(STAGES).lint; \
		[ $$tests = 0 ] && [ $$linted = 0 ]
	@$(STAGE) chapters $(SUBMAKE) chapters
endif
	@awk -F '\t' -v now=$$(date +%s) -v start=$$(cat $(STAGES).start) \
		'{ printf "   %-10s %6.0f s  (%.0f s of CPU)%s\n", $$1, $$2, $$3, $$1 == "lint" ? "  beside pytest" : "" } \
		END { printf "   %-10s %6.0f s with %s jobs\n", "make test", now - start, ENVIRON["JOBS"] }' $(STAGES)

execute: $(STAMP) ## NB=chapters/03_attention.py: run one chapter in a fresh kernel and store its outputs
	$(PY) -m tools.execute $(NB)

# The shipped translator: chapter 09 run with saving switched on (a plain run of the
# chapter trains and checks, but leaves the shipped file alone). MODEL=lm: the language
# model that chapter 11 loads, with chapter 12's train command on transformer/configs/lm.toml
# (about 14 minutes on 2 quiet cores), from scratch in runs/lm-checkpoint (run the same
# train command by hand to resume an interrupted run), then copied into the package.
checkpoint: $(STAMP) ## retrain and ship chapter 09's translator; MODEL=lm: chapter 11's language model (~14 min)
ifeq ($(MODEL),lm)
	rm -rf runs/lm-checkpoint
	$(PY) -m transformer train transformer/configs/lm.toml --out runs/lm-checkpoint --no-progress
	rm -rf transformer/checkpoints/tang_poems
	cp -r runs/lm-checkpoint/model transformer/checkpoints/tang_poems
else ifneq ($(MODEL),)
	@echo "MODEL must be lm (or left out: the translator), got '$(MODEL)'" >&2; exit 2
else
	TRANSFORMER_SAVE_CHECKPOINT=1 $(PY) -m tools.execute chapters/09_training.py
endif

# Retrain chapter 13's comparison: six variants of the language model, three seeds each,
# with chapter 12's train command on transformer/configs/refinements.toml, JOBS runs at a
# time on one thread each; the results go to transformer/checkpoints/refinements.json.
refinements: $(STAMP) ## retrain chapter 13's comparison (6 variants x 3 seeds) and ship its results
	$(PY) -m tools.refinement_runs --jobs $(JOBS)

# The website (Sphinx + MyST-NB, config in book/): `book` runs every chapter first,
# `site` renders the committed outputs. Open _build/html/index.html.
book: $(STAMP) ## run every chapter in a fresh kernel, then build the site in _build/html/
	$(PY) -m tools.book

# EDITION=student: the site without solutions or hidden tests, into _build/student/html/.
# LANGUAGE=zh: the Chinese edition, the notebooks of the chapters in it (tools/i18n.py) in
# _build/zh/chapters/ and their site in _build/zh/html/, each page linked to its English
# twin when _build/html/ has it.
site: $(STAMP) ## the site from the stored outputs (no chapter runs); EDITION=student: without solutions; LANGUAGE=zh: the Chinese edition
	$(PY) -m tools.website $(if $(EDITION),--edition $(EDITION)) $(if $(LANGUAGE),--language $(LANGUAGE))

# The whole book as one PDF, printed by the system's Chromium from the site (tools/pdf.py):
# _build/book.pdf, or _build/book-student.pdf with EDITION=student.
pdf: $(STAMP) ## the whole book as one PDF, _build/book.pdf (EDITION=student: without solutions; LANGUAGE=zh: _build/book-zh.pdf)
	$(PY) -m tools.pdf $(if $(EDITION),--edition $(EDITION)) $(if $(LANGUAGE),--language $(LANGUAGE))

# From the repository root, so that chapters/ and student/ are both in reach.
lab: $(STAMP) ## JupyterLab on the repository (chapters/ and student/)
	$(VENV)/bin/jupyter lab --notebook-dir=.

# Never overwrites a copy a student has edited, unless FORCE=1. COURSE=dir: an nbgrader
# course instead (dir/nbgrader_config.py and dir/source/NN_name/, every chapter; with
# LANGUAGE=zh the Chinese edition's, a course of its own).
student: $(STAMP) ## student copies (solutions removed) in student/, FORCE=1 overwrites edited ones; LANGUAGE=zh: the Chinese edition's, in student-zh/; COURSE=dir: an nbgrader course
ifdef COURSE
	$(PY) -m tools.exercises course $(COURSE) $(if $(LANGUAGE),--language $(LANGUAGE))
else
	$(PY) -m tools.exercises student $(if $(FORCE),--force) $(if $(LANGUAGE),--language $(LANGUAGE))
endif

# NB: a returned notebook or a folder of them (any names); OUT: the gradebook's folder
# (default graded/; one that holds a gradebook is refused unless FORCE=1); ROSTER: a CSV
# that maps files to student ids; JOBS: notebooks at once.
grade: $(STAMP) ## NB=folder/ [OUT=dir] [ROSTER=csv] [FORCE=1]: grade returned notebooks into a gradebook
	@test -n "$(NB)" || { echo "usage: make grade NB=folder-or-notebook [OUT=dir] [ROSTER=csv] [FORCE=1] [JOBS=n]"; exit 2; }
	$(PY) -m tools.exercises grade $(NB) $(if $(OUT),--out $(OUT)) $(if $(ROSTER),--roster $(ROSTER)) \
		$(if $(FORCE),--force) $(if $(JOBS),--jobs $(JOBS))

check: $(STAMP) ## NB=student/04_causal_mask.ipynb: a student's self-check, passed/failed per exercise
	@test -n "$(NB)" || { echo "usage: make check NB=student/04_causal_mask.ipynb"; exit 2; }
	$(PY) -m tools.exercises check $(NB)

# Leaves student/ and graded/ alone unless STUDENT=1: they hold students' work and gradebooks.
clean: ## remove .venv, _build and caches; STUDENT=1: also student/ and graded/ (students' work)
	rm -rf $(VENV) _build .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
ifdef STUDENT
	@echo "deleting student/ (student copies, and any work in them) and graded/ (gradebooks)"
	rm -rf student student-zh graded
endif
