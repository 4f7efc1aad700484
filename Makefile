# evalfarm: `make demo` runs the smoke suite on the embedded farm; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# test processes (pytest-xdist); the tests mostly wait on real servers and subprocesses: 4 fit 2 cores
TEST_WORKERS ?= 4

.PHONY: demo test bench venv clean redis-server bubblewrap agents agents-all test-agents

# the demo needs only the package; the tests add their extras on top. Both install the exact versions of
# the lock files (hashes checked), then the package itself without dependencies; compileall because these
# machines set PYTHONDONTWRITEBYTECODE=1 (every command would compile evalfarm again: ~0.2 s)
$(BIN)/.installed-run: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --require-hashes -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m compileall -q evalfarm
	touch $@

$(BIN)/.installed: $(BIN)/.installed-run requirements-test.lock
	$(BIN)/python -m pip install -q --require-hashes -r requirements-test.lock
	$(BIN)/python -m pip install -q --no-deps -e .
	$(BIN)/python -m compileall -q evalfarm
	touch $@

# Refresh the lock files from pyproject's ranges (uv in a throwaway tool venv; plain pip installs the result)
LOCK_VENV := .venv-lock
UV_VERSION ?= 0.13.8
.PHONY: lock test-latest
lock:
	[ -x $(LOCK_VENV)/bin/uv ] || { $(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install -q uv==$(UV_VERSION); }
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 -q -o requirements.lock
	$(LOCK_VENV)/bin/uv pip compile pyproject.toml --extra test --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 -q -o requirements-test.lock

# The newest versions pyproject allows, in a venv of their own, through the farm tests: a scheduled CI job
# calls this, so the next redis-py or Celery change is caught here, not by a user
LATEST_VENV := .venv-latest
FARM_TESTS := tests/test_farm.py tests/test_fleet.py tests/test_fleet_leases.py tests/test_spend_records.py \
  tests/test_metrics_bounded.py tests/test_pool_all.py
test-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[test]'
	$(LATEST_VENV)/bin/python -m compileall -q evalfarm
	$(LATEST_VENV)/bin/python -m pip list 2>/dev/null | grep -iE '^(celery|kombu|redis|pydantic|httpx|aiohttp) '
	$(LATEST_VENV)/bin/python -m pytest -q $(FARM_TESTS)

venv: $(BIN)/.installed

demo: $(BIN)/.installed-run
	$(BIN)/evalfarm run examples/smoke.yaml --state-dir .evalfarm
	@echo; cat "$$(ls -t .evalfarm/runs/*.md | head -1)"

test: venv agents
	@command -v redis-server >/dev/null 2>&1 || $(MAKE) --no-print-directory redis-server
	@command -v bwrap >/dev/null 2>&1 || $(MAKE) --no-print-directory bubblewrap
	@command -v chromium >/dev/null 2>&1 || $(MAKE) --no-print-directory chromium
	@command -v promtool >/dev/null 2>&1 || $(MAKE) --no-print-directory promtool
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The tests start their own redis-server processes; a fresh Debian machine has none.
redis-server:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; \
	else echo "make test needs redis-server on PATH: apt install redis-server (or brew install redis)"; exit 2; fi

# Agent tasks run sealed by bubblewrap (isolation: sandbox, the default; evalfarm/agents/jail.py).
bubblewrap:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap; \
	else echo "agent tasks run in a bubblewrap sandbox: apt install bubblewrap (or set isolation: none)"; exit 2; fi

# tests/test_prometheus_rules.py checks deploy/prometheus/alerts.yml with promtool, which Debian ships in
# its `prometheus` package (no server is started: the package's service stays off without systemd).
.PHONY: promtool
promtool:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus; \
	else echo "the Prometheus rule tests need promtool: apt install prometheus (or a release's promtool binary on PATH)"; exit 2; fi

# BEFORE=DIR: a checkout of an earlier commit with its own .venv, timed side by side (bench/whole.py)
bench: venv
	$(BIN)/python bench/bench.py --json bench/results.json $(if $(BEFORE),--before $(BEFORE))

# the simulation table of issue 20: false-winner rate with and without the sequential test, power, rounds
.PHONY: bench-stats
bench-stats: $(BIN)/.installed-run
	$(BIN)/python bench/stats_sim.py

clean:
	rm -rf $(VENV) $(LATEST_VENV) $(LOCK_VENV) .evalfarm .pytest_cache

# The dashboard tests (tests/test_dashboard_*.py) drive Debian's chromium through Playwright;
# Playwright never downloads a browser here (no `playwright install`).
.PHONY: chromium
chromium:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else echo "the dashboard tests need Debian's chromium at /usr/bin/chromium: apt install chromium"; exit 2; fi

# Coding-agent CLIs for spawn mode, pinned, installed OUTSIDE the repo (one npm --prefix dir per agent,
# aider in its own venv). Idempotent: a stamp per pinned version; a second call does nothing.
# evalfarm finds them through EVALFARM_AGENTS_DIR (evalfarm/agents/detect.py reads the same default);
# the versions are those in evalfarm/agents/pins.py.
EVALFARM_AGENTS_DIR ?= $(HOME)/.cache/evalfarm/agents
export EVALFARM_AGENTS_DIR
PIN = $(shell sed -n 's/^$(1) = "\([^"]*\)".*/\1/p' evalfarm/agents/pins.py)
CLAUDE_CODE_VERSION ?= $(call PIN,CLAUDE)
CODEX_VERSION ?= $(call PIN,CODEX)
GEMINI_CLI_VERSION ?= $(call PIN,GEMINI)
OPENCODE_VERSION ?= $(call PIN,OPENCODE)
AIDER_VERSION ?= $(call PIN,AIDER)
NPM_AGENT = npm install --no-audit --no-fund --loglevel=error --save-exact
NEED_NPM = @command -v npm >/dev/null 2>&1 || { echo "make agents needs node and npm: apt install nodejs npm"; exit 2; }
# `X --version` with a throwaway HOME/XDG/TMPDIR: even that writes state into HOME (gemini, codex, opencode).
VERSION_OK = d=$$(mktemp -d) && HOME=$$d XDG_CONFIG_HOME=$$d XDG_CACHE_HOME=$$d XDG_DATA_HOME=$$d \
  XDG_STATE_HOME=$$d TMPDIR=$$d $(1) --version >/dev/null; rc=$$?; rm -rf $$d; [ $$rc = 0 ]

agents: $(EVALFARM_AGENTS_DIR)/claude/.pinned-$(CLAUDE_CODE_VERSION) $(EVALFARM_AGENTS_DIR)/codex/.pinned-$(CODEX_VERSION)

agents-all: agents $(EVALFARM_AGENTS_DIR)/gemini/.pinned-$(GEMINI_CLI_VERSION) \
            $(EVALFARM_AGENTS_DIR)/opencode/.pinned-$(OPENCODE_VERSION) $(EVALFARM_AGENTS_DIR)/aider/.pinned-$(AIDER_VERSION)

# The stamp is written only after the installed binary answered --version: a failed install is retried.
$(EVALFARM_AGENTS_DIR)/claude/.pinned-%:
	$(NEED_NPM)
	rm -f $(@D)/.pinned-*; mkdir -p $(@D)
	$(NPM_AGENT) --prefix $(@D) @anthropic-ai/claude-code@$*
	$(call VERSION_OK,$(@D)/node_modules/.bin/claude) && touch $@

$(EVALFARM_AGENTS_DIR)/codex/.pinned-%:
	$(NEED_NPM)
	rm -f $(@D)/.pinned-*; mkdir -p $(@D)
	$(NPM_AGENT) --prefix $(@D) @openai/codex@$*
	$(call VERSION_OK,$(@D)/node_modules/.bin/codex) && touch $@

$(EVALFARM_AGENTS_DIR)/gemini/.pinned-%:
	$(NEED_NPM)
	rm -f $(@D)/.pinned-*; mkdir -p $(@D)
	$(NPM_AGENT) --prefix $(@D) @google/gemini-cli@$*
	$(call VERSION_OK,$(@D)/node_modules/.bin/gemini) && touch $@

$(EVALFARM_AGENTS_DIR)/opencode/.pinned-%:
	$(NEED_NPM)
	rm -f $(@D)/.pinned-*; mkdir -p $(@D)
	$(NPM_AGENT) --prefix $(@D) opencode-ai@$*
	$(call VERSION_OK,$(@D)/node_modules/.bin/opencode) && touch $@

$(EVALFARM_AGENTS_DIR)/aider/.pinned-%:
	rm -f $(@D)/.pinned-*; mkdir -p $(@D)
	[ -x $(@D)/venv/bin/python ] || $(PYTHON) -m venv $(@D)/venv
	$(@D)/venv/bin/python -m pip install -q aider-chat==$*
	$(call VERSION_OK,$(@D)/venv/bin/aider) && touch $@

# Opt-in: every agent test, including real aider, Gemini CLI and opencode (installs them first).
test-agents: venv agents-all
	EVALFARM_OPTIN_AGENTS=1 $(BIN)/python -m pytest -q tests/test_agents_*.py

# issue 23: N mock items on the farm with 2 workers, archived (ITEMS=1000000 for the overnight figure)
ITEMS ?= 100000
.PHONY: bench-scale
bench-scale: venv
	$(BIN)/python bench/scale.py --items $(ITEMS) --json bench/scale-$(ITEMS).json
