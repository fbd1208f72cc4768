# llamon-web: `make run` runs the whole product on embedded defaults, `make test` runs every test.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Some machines set PYTHONDONTWRITEBYTECODE: then every process (each test worker, Celery worker,
# MCP server and CLI the tests start) compiles the project's modules and tests again (collecting
# the tests took 19 s of CPU instead of 12 in each test process). __pycache__/ is git-ignored.
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Side venvs (tests/support/side_venvs.py) for packages that cannot live beside the project's own:
# a2a-sdk 0.3 (the project runs 1.x) for the test of 0.3 clients, mcp 2 (the web runs 1.x) for
# the test servers built on it and the SDK's MCP pool run beside it. Each is built from its lock;
# its stamp holds the lock it installed.
A2A03_STAMP := var/venvs/a2a-sdk-0.3/llamon-ready
MCP2_STAMP := var/venvs/mcp-2/llamon-ready
# Test processes for `make test` and `make test-postgres` (pytest-xdist; each its own database, Redis,
# broker folder and ports: docs/development.md). More than the 2 cores, since many tests wait on
# subprocesses; on 2 cores 3 measured 9:01 and 4 9:19 for `make test` (each process collects the suite).
TEST_WORKERS ?= 3

.PHONY: install run test test-postgres test-engine screenshots lint fmt bench bench-scale lock clean editor-bundle

# Everything `make test` needs from a package index, so that the tests themselves never reach one.
install: $(STAMP) $(A2A03_STAMP) $(MCP2_STAMP)

# The venv is rebuilt from the lock file whenever the lock or pyproject.toml changes.
$(STAMP): requirements.lock pyproject.toml sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -e ./sdk -e .
	touch $(STAMP)

$(A2A03_STAMP): requirements-a2a-0.3.lock
$(MCP2_STAMP): requirements-mcp-2.lock
$(A2A03_STAMP) $(MCP2_STAMP):
	rm -rf $(@D) && $(PYTHON) -m venv $(@D)
	$(@D)/bin/python -m pip install --quiet --disable-pip-version-check -r $<
	cp $< $@

run: install
	LLAMON_ENV=dev $(PY) manage.py devrun

test: install
	$(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Every test that can reach the database, on a throwaway PostgreSQL cluster (needs Debian's
# `postgresql` package; psycopg comes with `make install`). The tests that cannot (the engine, the
# settings checks, `make run` on its embedded SQLite) give the same result on any database: they run
# once, in `make test` (tests/conftest.py, LLAMON_TEST_DATABASE_ONLY). The two fuzzers draw 30 cases
# per API operation and 6 per page and role on both databases (plus 3 explicit cases a page: NUL, a
# huge integer, an out-of-range date; PostgreSQL's own refusals are among the first values drawn).
# They were 40 and 8 on SQLite until the fuzzers were the suite's two costliest files (269 s of
# 1,908). Set LLAMON_FUZZ_EXAMPLES / LLAMON_FUZZ_FORM_EXAMPLES to draw more.
LLAMON_PG_FUZZ_EXAMPLES ?= 30
LLAMON_PG_FUZZ_FORM_EXAMPLES ?= 6
test-postgres: install
	LLAMON_TEST_DATABASE_ONLY=1 \
	LLAMON_FUZZ_EXAMPLES=$${LLAMON_FUZZ_EXAMPLES:-$(LLAMON_PG_FUZZ_EXAMPLES)} \
	LLAMON_FUZZ_FORM_EXAMPLES=$${LLAMON_FUZZ_FORM_EXAMPLES:-$(LLAMON_PG_FUZZ_FORM_EXAMPLES)} \
	.ci/with-postgres $(VENV)/bin/pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Redraw docs/screenshots/ (the browser tests write there only when asked; `make test` keeps the tree clean).
screenshots: install
	LLAMON_SCREENSHOTS=1 $(VENV)/bin/pytest -n $(TEST_WORKERS) -m e2e $(PYTEST_ARGS)

test-engine: install
	$(VENV)/bin/pytest -p no:django tests/engine
	cd examples/seed_project && ../../$(VENV)/bin/pytest -q

# Exactly the hooks of .pre-commit-config.yaml (all local: they run the tools of .venv, offline):
# django-upgrade, ruff check, ruff format --check, djade --check, mypy, lint-imports (docs/development.md).
lint: install
	$(VENV)/bin/pre-commit run --all-files --show-diff-on-failure

fmt: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	# djade exits 1 when it rewrote a file (xargs then says 123): that is what fmt is for.
	git ls-files -z 'templates/*.html' '*/templates/*.html' | xargs -0 $(VENV)/bin/djade --target-version 5.2 || [ $$? = 123 ]

bench: install
	$(PY) benchmarks/bench_expr.py
	$(PY) benchmarks/bench_prestep.py
	$(PY) benchmarks/bench_mcp.py
	$(PY) benchmarks/bench_tester.py
	$(PY) benchmarks/bench_runs.py
	$(PY) benchmarks/bench_otel.py
	$(PY) benchmarks/bench_prestep_mixed.py
	$(PY) benchmarks/bench_broker.py
	$(PY) benchmarks/bench_graph.py
	$(PY) benchmarks/bench_outbound.py
	$(PY) benchmarks/bench_serving.py
	$(PY) benchmarks/bench_compile.py --quick
	$(PY) benchmarks/bench_react_graph.py
	$(PY) benchmarks/bench_shadow.py
	$(PY) benchmarks/bench_rule_health.py --runs 20000
	$(PY) benchmarks/bench_impact.py --runs 20000 --naive-runs 500

# The million-run figures of docs/performance.md ("Stored data at scale") need PostgreSQL.
bench-scale: install
	.ci/with-postgres $(PY) benchmarks/bench_scale.py

# Re-resolve the dependencies from pyproject.toml into requirements.lock.
lock:
	rm -rf /tmp/llamon-lock && $(PYTHON) -m venv /tmp/llamon-lock
	/tmp/llamon-lock/bin/pip install --quiet -e ./sdk -e '.[test,postgres]'
	/tmp/llamon-lock/bin/pip freeze --exclude-editable | grep -v '^llamon' > requirements.lock

# Rebuild the vendored CodeMirror bundle of the expression editor (needs node and npm; tests and CI
# use the committed file). Versions come from frontend/package-lock.json; see its README.md.
editor-bundle:
	cd frontend && npm ci --no-audit --no-fund && node build.mjs

clean:
	rm -rf $(VENV) var
