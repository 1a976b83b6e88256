# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# Scaled-out tests use these servers when they answer (see scripts/services_up.py).
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
REDIS_URL ?= redis://127.0.0.1:6379/0
# The second run, on PostgreSQL, beside the first (scripts/test_suite.sh): only the tests
# that use the database (--database-tests-only), and of those not the ones whose subject
# is not the database: the browser, page and admin tests (the pages; the socket tests in
# tests/teams/web do run), the settings tests (the environment), the replays (recorded
# requests compared, a whole demo run each), and the protocol ends (the MCP client and
# its tools, the live MCP, A2A and tracing sites, A2A consultants, a program driving a
# site over HTTP: what they check is the protocol, the database under it is the one the
# API, engine and tool tests run on PostgreSQL), the guards (every hostile path against
# every file tool, every URL class against the outbound guard: what they check is a
# path or an address; who may call which operation: every operation against every kind of
# caller, with the teams tables compared before and after each refusal) and the eval
# command's whole demo suites (the eval engine's own tests run there). Schemathesis sends
# its fuzzed cases only (scripts/test_suite.sh).
# LOOM_TEST_WORKERS (default 2) sets each run's xdist workers.
PAGE_TESTS = test_approval_pages test_charts test_time_travel_views test_views test_workspace_views \
	test_eval_pages
PROTOCOL_TESTS = tests/teams/engine/test_mcp_client.py tests/teams/engine/test_mcp_tools.py \
	tests/teams/mcp/test_live_mcp.py tests/teams/a2a/test_a2a_live.py \
	tests/teams/a2a/test_a2a_consult_live.py tests/teams/observability/test_telemetry_live.py \
	tests/teams/api/test_program_e2e.py tests/tools/test_consult_a2a.py
GUARD_TESTS = tests/tools/test_workspace.py tests/teams/lib/test_outbound.py \
	tests/teams/api/test_access.py tests/teams/test_eval_command.py
PG_ARGS = --ignore=tests/browser --ignore=tests/loomsite --ignore=tests/teams/admin \
	$(foreach page,$(PAGE_TESTS),--ignore=tests/teams/web/$(page).py) \
	$(foreach path,$(PROTOCOL_TESTS) $(GUARD_TESTS),--ignore=$(path)) \
	--ignore=tests/teams/engine/test_replay.py

.PHONY: install dev run test lint bench clean screenshots

# uv installs the packages (scripts/venv_install.sh); where uv cannot be had, pip does.
$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv || $(PY) -m pip install -q --upgrade pip
PIP_INSTALL = scripts/venv_install.sh $(VENV)

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PIP_INSTALL) -e .
	touch $@

# The dev extras bring the project too: one install on a fresh machine, not two.
$(VENV)/.dev-installed: pyproject.toml | $(VENV)/bin/python
	$(PIP_INSTALL) -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

dev: $(VENV)/.dev-installed

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py loom_demo
	$(PY) manage.py serve --host $(HOST) --port $(PORT)

lint: dev
	$(PY) -m ruff check .
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check

test: lint
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "######################################################################"; \
		echo "## NOTICE: no Chromium on this machine: the BROWSER TESTS ARE SKIPPED."; \
		echo "## Install it with: apt-get install chromium   (.ci/run does this)"; \
		echo "######################################################################"; \
	fi
	scripts/test_suite.sh $(PY) "$(PG_URL)" "$(REDIS_URL)" -- $(PG_ARGS)

# The screenshots of the README and docs/, as the browser tests last took them (run `make test` first).
README_SHOTS = live-budget-warning live-jump-to-latest team-list-live done-team-end inbox admin-turns approval-card fork-here fork-confirm phone-live phone-team-list phone-turn
screenshots:
	mkdir -p docs/screenshots
	for shot in $(README_SHOTS); do cp test-output/screenshots/$$shot.png docs/screenshots/; done

clean:
	rm -rf $(VENV) data test-output
