# make perf: the perf suite on this machine (CPU flavour without a GPU), reports in results/. make test: the harness's tests.
# make baselines: measure and write this machine's baselines of the default cases, for review (nothing is committed).
# make test-floor: the workload smoke tests and one gate case on the oldest supported torch (CI runs it too).
# make docs: the documentation site (docs/, Sphinx + MyST) into docs/_build/html, warnings as errors (CI runs it too).
# Each creates or reuses its virtual environment first; only python3 and make are needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perfgate-installed
FLOOR_VENV ?= .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.perfgate-installed
PYTEST_ARGS ?=

.PHONY: perf baselines test test-floor docs venv deps clean

venv: $(STAMP)

# Both environments' dependencies (CI installs them first, before any test runs). The editable installs that
# follow stay one at a time: each writes perfgate.egg-info into this directory.
deps: $(VENV)/.deps-installed $(FLOOR_VENV)/.deps-installed

$(VENV)/.deps-installed: requirements.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	touch $@

$(FLOOR_VENV)/.deps-installed: requirements-floor.txt constraints-floor.txt
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOOR_VENV)/bin/python -m pip install --quiet -r requirements-floor.txt -c constraints-floor.txt
	touch $@

$(STAMP): $(VENV)/.deps-installed pyproject.toml
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(FLOOR_STAMP): $(FLOOR_VENV)/.deps-installed pyproject.toml
	$(FLOOR_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $@

perf: $(STAMP)
	PERFGATE_BASELINES_COMMAND="make baselines" \
	$(BIN)/python -m pytest tests_perf --perf-json results/perf.json --perf-report results/report $(PYTEST_ARGS)

# This machine's baselines for the default cases, written for review: nothing is committed.
baselines: $(STAMP)
	$(BIN)/python -m pytest tests_perf --update-baselines $(PYTEST_ARGS)
	@echo "review the new baselines (git status baselines/; git diff baselines/), then commit them"

test: $(STAMP)
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

test-floor: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -m pytest tests -m floor $(PYTEST_ARGS)

# The options reference is generated from perfgate's own declarations, so the docs import perfgate.
$(VENV)/.docs-installed: $(STAMP) requirements-docs.txt constraints-docs.txt
	$(BIN)/python -m pip install --quiet -r requirements-docs.txt -c constraints-docs.txt
	touch $@

docs: $(VENV)/.docs-installed
	$(BIN)/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(FLOOR_VENV) .pytest_cache build *.egg-info docs/_build
