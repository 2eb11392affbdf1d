# weir: two commands do all set-up on a fresh machine.
#   make serve   install weir and start the server (127.0.0.1:2136, data in ./data)
#   make test    install the test dependencies and run every test (lint, types, pytest)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
WEIR_DATA   ?= ./weir-data
WEIR_LISTEN ?= 127.0.0.1:2136

.PHONY: serve test install install-test lint typecheck pytest bench bench-storage soak proto clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-test pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark,bench]'
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

serve: install
	$(BIN)/weir serve --data-dir $(WEIR_DATA) --listen $(WEIR_LISTEN)

lint: install-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: install-test
	$(BIN)/mypy

pytest: install-test
	$(BIN)/python -m pytest -q

test: lint typecheck pytest

bench-storage: install-test
	$(BIN)/python bench/storage_bench.py

bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run

# 1,000 checked server kills (kill -9 and power cuts) under mixed load; prints the seed
# (replay: WEIR_CHAOS_SEED=...) and the summary table. See docs/reliability.md.
SOAK_KILLS ?= 1000
soak: install-test
	WEIR_SOAK=1 WEIR_SOAK_KILLS=$(SOAK_KILLS) $(BIN)/python -m pytest -q -s tests/reliability -m slow

proto: install-test
	$(BIN)/python -m weir.protocols.native.codegen

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
