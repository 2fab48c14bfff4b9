# Two commands for a newcomer: `make demo` and `make test` (each creates .venv first).
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-readme test-slow clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@PY=$$(sh scripts/find-python) && echo "using $$PY" && $$PY -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@# An editable install leaves bayesspec's own modules uncompiled; where the environment
	@# sets PYTHONDONTWRITEBYTECODE every command would recompile them (0.4-0.7 s a verb).
	$(BIN)/python -m compileall -q bayesspec
	@touch $(STAMP)

demo: install
	$(BIN)/bayesspec demo

# Three workers on two cores: most of the fast suite's time is single-threaded
# compilation (numba, PyTensor's C backend) or waiting on live test servers (tune, serve),
# so a third process fills the idle time (measured 2026-12-04 on an idle 2-core machine,
# warm caches: -n 2 5 min 24 s, -n 3 4 min 37 s). Work stealing keeps one worker from
# ending alone on a queue of heavy tests (2026-12-07, idle, warm: 5 min 04 s; the
# default distribution 6 min 09 s an hour before, with one 65 s test since made a mock).
test: install
	$(BIN)/python -m pytest -q -n 3 --dist worksteal

# Every command of the README's walkthrough as pasted, in order (about 5 minutes on 2
# cores: three real fits at the defaults); CI runs it after the fast suite.
test-readme: install
	$(BIN)/python -m pytest -q tests/test_readme.py --walkthrough

test-slow: install
	$(BIN)/python -m pytest -q --runslow

clean:
	rm -rf $(VENV) demo-out .pytest_cache
