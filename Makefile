# evalfarm: `make demo` runs the smoke suite on the embedded farm; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test bench venv clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

venv: $(BIN)/.installed

demo: venv
	$(BIN)/evalfarm run examples/smoke.yaml --state-dir .evalfarm
	@echo; cat "$$(ls -t .evalfarm/runs/*.md | head -1)"

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python bench/bench.py

clean:
	rm -rf $(VENV) .evalfarm .pytest_cache
