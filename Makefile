# weir: two commands do all set-up on a fresh machine.
#   make serve   install weir and start the server (127.0.0.1:2136, data in ./weir-data)
#   make test    install the test dependencies and run every test (lint, types, pytest)
# weir needs Python 3.11: the first of python3.11 and python3 that is 3.11 is used,
# or name one with PYTHON=/path/to/python3.11.

IS_311 := import sys; sys.exit(sys.version_info[:2] != (3, 11))
ifeq ($(origin PYTHON),undefined)
PYTHON := $(firstword $(foreach p,python3.11 python3,$(shell command -v $(p) >/dev/null 2>&1 && $(p) -c '$(IS_311)' 2>/dev/null && echo $(p))))
endif
VENV   := .venv
BIN    := $(VENV)/bin
WEIR_DATA   ?= ./weir-data
WEIR_LISTEN ?= 127.0.0.1:2136


.PHONY: serve test install install-test system-packages lint typecheck pytest coverage bench bench-storage soak proto clean

# The virtualenv is made with Python 3.11 only, and removed again if making it
# fails, so that a failed attempt never leaves a .venv the next `make` would trust.
$(BIN)/python:
	@if [ -z "$(PYTHON)" ] || ! $(PYTHON) -c '$(IS_311)' 2>/dev/null; then \
	    echo "weir needs Python 3.11, and $(or $(PYTHON),neither python3.11 nor python3) is not it:" \
	         "install python3.11, or run make PYTHON=/path/to/python3.11" >&2; \
	    exit 1; \
	fi
	$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip || { rm -rf $(VENV); exit 1; }

# A .venv left by an older Python (made before this check) is replaced, not trusted.
$(VENV)/.installed: $(BIN)/python pyproject.toml $(wildcard setup.py src/weir/protocols/kafka/_records.c src/weir/client/_write_fast.c src/weir/client/_message_rows.c)
	@$(BIN)/python -c '$(IS_311)' 2>/dev/null || { \
	    echo "$(VENV) runs another Python than 3.11: making it again" >&2; \
	    rm -rf $(VENV) && $(MAKE) --no-print-directory $(BIN)/python; }
	$(BIN)/python -m pip install --quiet -e . || { rm -f $@; exit 1; }
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $@

# Debian packages the tests run for real (FUSE, Chromium, ZooKeeper): installed if missing
system-packages:
	tools/system-packages.sh

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

# The tests run in parallel, PYTEST_WORKERS processes (pytest-xdist): most of their time is
# spent waiting on servers, fsyncs and sockets, so 3 keep 2 cores busy. tests/parallel.py
# groups them (one SparkSession, one ZooKeeper, a module's servers) and starts the longest
# groups first. PYTEST_WORKERS=0 runs them all in one process.
PYTEST_WORKERS ?= 3
PYTEST_PARALLEL = -n $(PYTEST_WORKERS) --dist loadscope

# --durations: the slowest tests close to the end of the log (CI keeps its tail), for
# keeping the suite under its 15 minutes
pytest: install-test system-packages
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=30

test: lint typecheck pytest

# every test under coverage, the server, CLI and Spark worker processes included
# ([tool.coverage] in pyproject.toml); prints the per-module table (README, Development)
coverage: install-test system-packages
	rm -f .coverage .coverage.*
	$(BIN)/python -m coverage run -m pytest -q $(PYTEST_PARALLEL); status=$$?; \
	$(BIN)/python -m coverage combine -q && $(BIN)/python -m coverage report; \
	exit $$status

bench-storage: install-test
	$(BIN)/python bench/storage_bench.py

bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench.run

# 1,000 checked server kills (kill -9 and power cuts) under mixed load; prints the seed
# (replay: WEIR_CHAOS_SEED=...) and the summary table. See docs/reliability.md.
# Then 300 bookie faults (SIGKILL, SIGSTOP, ZooKeeper session expiry) under replicated
# ledgers, each ledger checked entry by entry (docs/replication.md). Then 300 faults over a
# broker cluster (brokers, bookies, ZooKeeper sessions, client connections) under load,
# judged by the history checker (docs/cluster.md).
SOAK_KILLS ?= 1000
LEDGER_FAULTS ?= 300
CLUSTER_FAULTS ?= 300
soak: install-test system-packages
	WEIR_SOAK=1 WEIR_SOAK_KILLS=$(SOAK_KILLS) $(BIN)/python -m pytest -q -s tests/reliability tests/client/test_writer_delivery.py tests/client/test_compaction.py tests/spark/test_tier.py tests/spark/test_tier_soak.py -m slow
	WEIR_LEDGER_FAULTS=$(LEDGER_FAULTS) $(BIN)/python -m pytest -q -s tests/replication/test_fault_schedule.py
	WEIR_SOAK=1 WEIR_SOAK_CLUSTER_FAULTS=$(CLUSTER_FAULTS) $(BIN)/python -m pytest -q -s tests/cluster/test_cluster_faults.py tests/cluster/test_broker_faults.py tests/spark/test_cluster.py -m slow

proto: install-test
	$(BIN)/python -m weir.protocols.native.codegen
	$(BIN)/python -m weir.protocols.pulsar.codegen

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis .coverage .coverage.* htmlcov
