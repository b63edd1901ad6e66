# nanum: `make run` starts nanum on this machine (`make run PORT=9000` on another port), `make test` runs the
# whole test suite.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Test processes run side by side (pytest-xdist; a module's tests stay in one): `make test WORKERS=1` runs one.
WORKERS ?= 2

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	-$(BIN)/python -m nanum.server.web.xterm
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/nanum up$(if $(PORT), --port $(PORT))

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src/nanum
	$(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy src/nanum

bench: $(STAMP)
	$(BIN)/python benchmarks/core_cycle.py

clean:
	rm -rf $(VENV) build src/*.egg-info
