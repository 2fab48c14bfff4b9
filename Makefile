# Two commands for a newcomer: `make demo` and `make test` (each creates .venv first).
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@PY=$$(sh scripts/find-python) && echo "using $$PY" && $$PY -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

demo: install
	$(BIN)/bayesspec demo

# Two workers: most of the fast suite's time is single-threaded compilation (numba,
# PyTensor's C backend), so two processes on two cores finish in about 60% of the time.
test: install
	$(BIN)/python -m pytest -q -n 2

test-slow: install
	$(BIN)/python -m pytest -q --runslow

clean:
	rm -rf $(VENV) demo-out .pytest_cache
