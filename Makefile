# make perf: the perf suite on this machine (CPU flavour without a GPU), reports and the results history in results/
# (each session's spread there judges the next: docs/gate.md). make test: the harness's tests
# (two xdist workers, then the serial-marked ones alone). make test-unit: the unit tests alone (no process launched), the
# inner loop while changing perfgate.
# make baselines: measure and write this machine's baselines of the default cases, for review (nothing is committed).
# make test-floor: the workload smoke tests and one gate case on the oldest supported torch (CI runs it too).
# make test also makes .venv-other, .venv with an older open_clip layered on top, the reference environment of the
# --perf-against-python tests (a few MB: a second torch would need ~5 GB more disk beside .venv).
# make docs: the documentation site (docs/, Sphinx + MyST) into docs/_build/html, warnings as errors (CI runs it too).
# Each creates or reuses its virtual environment first; only python3 and make are needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.perfgate-installed
FLOOR_VENV ?= .venv-floor
FLOOR_STAMP := $(FLOOR_VENV)/.perfgate-installed
OTHER_VENV ?= .venv-other
OTHER_STAMP := $(OTHER_VENV)/.perfgate-installed
PURELIB := import sysconfig; print(sysconfig.get_path("purelib"))
PYTEST_ARGS ?=
SESSIONS_ARGS ?=

.PHONY: perf baselines sessions test test-unit test-floor docs venv clean

venv: $(STAMP)

$(VENV)/.deps-installed: requirements.txt requirements-nodeps.txt constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -c constraints.txt
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-nodeps.txt
	touch $@

$(FLOOR_VENV)/.deps-installed: requirements-floor.txt constraints-floor.txt
	test -x $(FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_VENV)/bin/python -m pip install --quiet --upgrade pip
	# torch and its CUDA wheels one at a time, so that pip never holds all their downloads (~3.5 GB) at once.
	grep -E '^(torch|triton|nvidia-)' constraints-floor.txt \
	  | xargs -n 1 $(FLOOR_VENV)/bin/python -m pip install --quiet --no-deps
	$(FLOOR_VENV)/bin/python -m pip install --quiet -r requirements-floor.txt -c constraints-floor.txt
	touch $@

$(STAMP): $(VENV)/.deps-installed pyproject.toml
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(FLOOR_STAMP): $(FLOOR_VENV)/.deps-installed pyproject.toml
	$(FLOOR_VENV)/bin/python -m pip install --quiet --no-deps -e .
	touch $@

# .venv's packages through a .pth in its own site-packages, behind the older releases of requirements-other.txt.
$(OTHER_STAMP): $(STAMP) requirements-other.txt
	rm -rf $(OTHER_VENV)
	$(PYTHON) -m venv --without-pip $(OTHER_VENV)
	own=$$($(OTHER_VENV)/bin/python -c '$(PURELIB)') && base=$$($(BIN)/python -c '$(PURELIB)') \
	  && $(BIN)/python -m pip install --quiet --no-deps --target "$$own" -r requirements-other.txt \
	  && echo "import site; site.addsitedir('$$base')" > "$$own/perfgate-base-venv.pth"
	touch $@

perf: $(STAMP)
	PERFGATE_BASELINES_COMMAND="make baselines" \
	$(BIN)/python -m pytest tests_perf --perf-json results/perf.json --perf-report results/report \
	  --perf-history results/history.db $(PYTEST_ARGS)

# This machine's baselines for the default cases, written for review: nothing is committed.
baselines: $(STAMP)
	$(BIN)/python -m pytest tests_perf --update-baselines $(PYTEST_ARGS)
	@echo "review the new baselines (git status baselines/; git diff baselines/), then commit them"

# The sessions make perf kept in results/history.db since each baseline, stored in its file for clones with no
# history (docs/gate.md): run after a few make perf sessions of the code the baselines measured.
sessions: $(STAMP)
	$(BIN)/perfgate store-sessions --history results/history.db --baseline-dir baselines $(SESSIONS_ARGS)
	@echo "review the sessions listed and the files (git diff baselines/), then commit them"

# DeepSpeed compiles its CPU shared-memory collective (deepspeed_shm_comm) the first time it starts on a CPU: minutes of
# C++ on a 2-core VM. It is built once here into the environment (TORCH_EXTENSIONS_DIR, which the OptimizerSteps tests
# pass on), so no test pays for the compile or writes it under ~/.cache. With a GPU, DeepSpeed builds no such op.
DS_OPS := $(VENV)/torch_extensions
$(DS_OPS)/.built: $(STAMP)
	TORCH_EXTENSIONS_DIR=$(DS_OPS) $(BIN)/python -c 'from deepspeed.accelerator import get_accelerator; \
	  builder = get_accelerator().create_op_builder("ShareMemCommBuilder"); builder and builder.load()' >/dev/null
	mkdir -p $(DS_OPS) && touch $@

# The tests run on two xdist workers (one file per worker at a time, so each real server starts once), then the
# tests marked serial one at a time. A phase that PYTEST_ARGS leaves empty (pytest's exit code 5) is no failure.
test: $(STAMP) $(OTHER_STAMP) $(DS_OPS)/.built
	$(BIN)/python -m pytest tests -n 2 --dist loadfile -m "not serial" $(PYTEST_ARGS); parallel=$$?; \
	$(BIN)/python -m pytest tests -m serial $(PYTEST_ARGS); alone=$$?; \
	for code in $$parallel $$alone; do [ $$code -eq 0 ] || [ $$code -eq 5 ] || exit $$code; done

# The tests that start no process (no torchrun, pytest session, CLI run or server): a minute or two.
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 -m "not launches and not serial" $(PYTEST_ARGS)

test-floor: $(FLOOR_STAMP)
	$(FLOOR_VENV)/bin/python -m pytest tests -m floor $(PYTEST_ARGS)

# The options reference is generated from perfgate's own declarations, so the docs import perfgate.
$(VENV)/.docs-installed: $(STAMP) requirements-docs.txt constraints-docs.txt
	$(BIN)/python -m pip install --quiet -r requirements-docs.txt -c constraints-docs.txt
	touch $@

docs: $(VENV)/.docs-installed
	$(BIN)/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) $(FLOOR_VENV) $(OTHER_VENV) .pytest_cache build *.egg-info docs/_build
