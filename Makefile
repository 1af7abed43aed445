# make perf: the perf suite on this machine (CPU flavour without a GPU). make test: the harness's tests.
# Both create or reuse the virtual environment in $(VENV) first; only python3 and make are needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perfgate-installed
PYTEST_ARGS ?=

.PHONY: perf test venv clean

venv: $(STAMP)

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

perf: $(STAMP)
	$(BIN)/python -m pytest tests_perf $(PYTEST_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest tests $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
