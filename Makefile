# Two commands on a fresh machine: `make dev` runs the demo on an embedded stack, `make test` runs
# every check. Both build the virtualenv on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: dev test lint typecheck unit faults soak bench clean-state

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cronwarden needs Python >= 3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

dev: $(STAMP)
	$(BIN)/cronwarden dev $(ARGS)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/pytest $(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The fault suite alone (it is part of `make test` too).
faults: $(STAMP)
	$(BIN)/pytest tests/faults $(PYTEST_ARGS)

# Minutes of random faults on its own servers (not part of `make test`, which runs its 30 s
# form): `make soak ARGS="--seed 123 --duration 180"` replays a printed seed's fault plan.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

# Boots its own embedded stack and prints one table; `make bench ARGS=--quick` is the smoke run.
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy .

clean-state:
	rm -rf .cronwarden
