# The two commands a newcomer needs: `make run` and `make test`.
VENV    ?= .venv
PYTHON  ?= python3
BIN      = $(VENV)/bin
STAMP    = $(VENV)/.installed-stamp

.PHONY: install run test test-unit lint docs bench bench-quick compose-up compose-down clean test-node-deps agents

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# promtool (for the tests that check /metrics and the alert rules): unpacked from Debian's
# `prometheus` package into the venv; nothing is installed system-wide and no daemon runs.
# No PyPI package ships it.
$(BIN)/promtool: | $(STAMP)
	@tmp=$$(mktemp -d) && cd $$tmp \
	  && { apt-get download prometheus >/dev/null 2>&1 || { apt-get update -qq && apt-get download prometheus >/dev/null 2>&1; }; } \
	  && dpkg-deb -x prometheus_*.deb x && install -m 0755 x/usr/bin/promtool $(CURDIR)/$@ \
	  && cd / && rm -rf $$tmp
	@$@ --version 2>&1 | head -1

# chromium (for the session inspector's browser test, tests/e2e/test_ui.py): Debian's
# package, driven by Playwright from PyPI, whose own browser download is not used.
/usr/bin/chromium:
	@command -v apt-get >/dev/null || { echo "install chromium at /usr/bin/chromium"; exit 1; }
	@apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }
	@$@ --version 2>/dev/null | head -1

## run: all five services + a demo session (starts nats-server/redis-server from pip when none answers)
run: install
	$(BIN)/loopwire up --embedded --demo

# A third party's MCP server from npm (@modelcontextprotocol/server-everything), pinned by
# tests/node/package-lock.json, for tests/e2e/test_mcp_servers.py. Without npm the test
# falls back to `npx`, or skips; nothing else needs Node.
test-node-deps:
	@if command -v npm >/dev/null 2>&1; then \
	  test tests/node/node_modules/.package-lock.json -nt tests/node/package-lock.json \
	    || (cd tests/node && npm ci --no-audit --no-fund --loglevel=error); \
	else echo "npm not found: the test with an MCP server from npm will be skipped"; fi

# The coding agents of the external-executor profiles (claude_code, codex, opencode, acp),
# pinned by deploy/agents/package-lock.json, installed into deploy/agents/node_modules
# (their binaries: deploy/agents/node_modules/.bin). Without npm the executor tests skip.
agents:
	@if command -v npm >/dev/null 2>&1; then \
	  test deploy/agents/node_modules/.package-lock.json -nt deploy/agents/package-lock.json \
	    || (cd deploy/agents && npm ci --no-audit --no-fund --loglevel=error); \
	else echo "npm not found: the external-executor tests will be skipped"; fi

## test: every tier (unit, integration, e2e, deploy checks); servers are started by the fixtures
# Two pytest workers (pytest-xdist), a test file each at a time so a module's servers and
# loopwire processes are started once: most of a test waits on a subprocess or a timer,
# and two workers keep both cores busy (about 8 minutes instead of 14 on an idle 2-core
# machine). Every worker starts its own servers on free ports. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2
test: install $(BIN)/promtool /usr/bin/chromium test-node-deps agents
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile

test-unit: install
	$(BIN)/pytest -m unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/python -m tests.typecheck
	$(BIN)/python -m tests.import_contracts

## docs: rewrite the generated docs (the README's settings tables, docs/asyncapi.json, docs/reference/)
docs: install
	$(BIN)/python -m tests.generated_docs

## bench: every layout, 200 sessions x 20 tool-turns, against the durable and the raw floor (docs/benchmarks.md)
bench: install
	$(BIN)/python -m tests.bench.run_bench

## bench-quick: the same with a small load, for development (leaves docs/benchmarks.md alone)
bench-quick: install
	$(BIN)/python -m tests.bench.run_bench --quick --no-doc

compose-up:
	docker compose up -d --build

compose-down:
	docker compose down -v

clean:
	rm -rf .run .pytest_cache .ruff_cache .mypy_cache
