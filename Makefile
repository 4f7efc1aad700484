# evalfarm: `make demo` runs the smoke suite on the embedded farm; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench venv clean redis-server

# the demo needs only the package; the tests add their extras on top
$(BIN)/.installed-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(BIN)/.installed: $(BIN)/.installed-run
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: $(BIN)/.installed-run
	$(BIN)/evalfarm run examples/smoke.yaml --state-dir .evalfarm
	@echo; cat "$$(ls -t .evalfarm/runs/*.md | head -1)"

test: venv
	@command -v redis-server >/dev/null 2>&1 || $(MAKE) --no-print-directory redis-server
	@command -v chromium >/dev/null 2>&1 || $(MAKE) --no-print-directory chromium
	$(BIN)/python -m pytest -q

# The tests start their own redis-server processes; a fresh Debian machine has none.
redis-server:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; \
	else echo "make test needs redis-server on PATH: apt install redis-server (or brew install redis)"; exit 2; fi

bench: venv
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) .evalfarm .pytest_cache

# The dashboard tests (tests/test_dashboard_*.py) drive Debian's chromium through Playwright;
# Playwright never downloads a browser here (no `playwright install`).
.PHONY: chromium
chromium:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else echo "the dashboard tests need Debian's chromium at /usr/bin/chromium: apt install chromium"; exit 2; fi
