# Two commands on a fresh machine: `make dev` runs the demo on an embedded stack, `make test` runs
# every check. Both build the virtualenv on first use; nothing else needs installing by hand.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CHECKOV := checkov==3.3.30
UV := uv==0.13.9

.PHONY: dev test test-tools lock docs schema lint typecheck unit faults soak bench clean-state

# Every virtualenv is built from a lock, never from pyproject.toml's ranges: a fresh machine gets
# exactly the versions the tests last passed with, whatever the package index serves today.
#   requirements.lock          the runtime dependencies (the Docker image installs exactly this)
#   requirements-otel.lock     the runtime plus the `otel` extra, for images that trace
#   requirements-dev.lock      everything `make dev` and `make test` need (all extras, test tools)
#   requirements-checkov.lock  checkov's virtualenv of its own
# `make lock` writes all four. The dev virtualenv is rebuilt from scratch whenever a lock or
# pyproject.toml changes, so a package dropped from the lock leaves it too. `--no-deps` then
# `pip check`: nothing unpinned slips in, and a dependency added to pyproject.toml without
# `make lock` fails here, naming it.
$(STAMP): pyproject.toml requirements.lock requirements-dev.lock
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "cronwarden needs Python >= 3.11")'
	$(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --no-deps -r requirements-dev.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check || { echo "a lock no longer satisfies pyproject.toml: run make lock"; exit 1; }
	@touch $(STAMP)

# checkov (the IaC scanner test_deploy.py runs) in a virtualenv of its own, beside the dev one: it
# pins packaging<24 and brings ~80 packages that would clash with the dev tools. Only the tests
# need it, so `make dev` does not wait for it.
CHECKOV_VENV := $(VENV)-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-stamp
$(CHECKOV_STAMP): requirements-checkov.lock
	$(PYTHON) -m venv --clear $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --no-deps -r requirements-checkov.lock
	$(CHECKOV_VENV)/bin/python -m pip check
	@touch $(CHECKOV_STAMP)

# Refreshes every lock, deliberately: `make lock` upgrades everything pyproject.toml allows;
# `make lock LOCK_UPGRADE=` only adds what pyproject.toml gained, keeping every other pin;
# `make lock LOCK_UPGRADE="--upgrade-package httpx"` moves one package. Then `make test`
# rebuilds the virtualenvs from the new locks and checks them. uv resolves (in seconds, where
# pip-compile takes minutes) from a virtualenv of its own, so a broken dev virtualenv cannot
# stop a relock. The dev lock is resolved first; the others are held to its versions, so the
# image runs what the tests ran.
LOCK_VENV := $(VENV)-lock
LOCK_STAMP := $(LOCK_VENV)/.installed-stamp
LOCK_UPGRADE ?= --upgrade
LOCK_COMPILE = $(LOCK_VENV)/bin/uv pip compile --quiet --python-version 3.11 \
	--custom-compile-command 'make lock'
$(LOCK_STAMP): Makefile
	$(PYTHON) -m venv --clear $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet $(UV)
	@touch $(LOCK_STAMP)

lock: $(LOCK_STAMP)
	$(LOCK_COMPILE) $(LOCK_UPGRADE) pyproject.toml --extra dev -o requirements-dev.lock
	$(LOCK_COMPILE) --no-annotate pyproject.toml -c requirements-dev.lock -o requirements.lock
	$(LOCK_COMPILE) --no-annotate pyproject.toml --extra otel -c requirements-dev.lock \
	  -o requirements-otel.lock
	echo '$(CHECKOV)' | $(LOCK_COMPILE) $(LOCK_UPGRADE) - -o requirements-checkov.lock

dev: $(STAMP)
	$(BIN)/cronwarden dev $(ARGS)

# Most of the suite waits on real fires and real servers, not on the CPU: worker processes
# (each with its own Temporal and Postgres) overlap those waits. A file's tests stay together.
TEST_WORKERS ?= 4

# Two tests need programs that are no Python packages: the status page's browser test drives
# Debian's chromium through chromium-driver, and the metrics and alert-rule checks run promtool
# (Debian's prometheus package). As root with apt-get, the test command installs whichever is
# missing; elsewhere it says so, and those tests are skipped naming the missing program.
TEST_TOOLS := /usr/bin/chromium /usr/bin/chromedriver /usr/bin/promtool
TEST_TOOL_PACKAGES := chromium chromium-driver prometheus

test-tools:
	@missing=; for tool in $(TEST_TOOLS); do [ -x "$$tool" ] || missing="$$missing $$tool"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing from Debian's packages: $(TEST_TOOL_PACKAGES)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends $(TEST_TOOL_PACKAGES) >/dev/null \
	  || echo "could not install$$missing: the tests that need them are skipped"; \
	else \
	  echo "missing$$missing (install $(TEST_TOOL_PACKAGES)): the tests that need them are skipped"; \
	fi

test: $(STAMP) $(CHECKOV_STAMP) test-tools
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(MAKE) --no-print-directory docs
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

unit: $(STAMP) $(CHECKOV_STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

# The fault suite alone (it is part of `make test` too).
faults: $(STAMP)
	$(BIN)/pytest tests/faults --fault-results tests/faults/RESULTS.md $(PYTEST_ARGS)

# Minutes of random faults on its own servers (not part of `make test`, which runs its 30 s
# form): `make soak ARGS="--seed 123 --duration 180"` replays a printed seed's fault plan.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

# Boots its own embedded stack and prints one table; `make bench ARGS=--quick` is the smoke run.
bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

# Rewrites store/schema.sql from what the migrations build (commit it with the migration).
schema: $(STAMP)
	WRITE_SCHEMA_SNAPSHOT=1 $(BIN)/pytest -q tests/integration/test_migrations.py -k snapshot

# The documentation site, into .cronwarden/site: a broken link, anchor or included file fails.
# `$(BIN)/mkdocs serve` shows it while you write.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

clean-state:
	rm -rf .cronwarden
