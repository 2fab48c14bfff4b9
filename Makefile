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

test: install
	$(BIN)/python -m pytest -q

test-slow: install
	$(BIN)/python -m pytest -q --runslow

clean:
	rm -rf $(VENV) demo-out .pytest_cache
