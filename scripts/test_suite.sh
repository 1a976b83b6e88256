#!/bin/sh
# `make test`'s two runs of the suite, side by side on the machine's cores: the whole
# suite on SQLite (in the foreground) and, when PostgreSQL answers, the tests that use
# the database again on PostgreSQL (with Redis when it answers; Schemathesis with its
# fuzzed cases only, 5 an operation), whose output is shown when both have ended; then
# the slowest tests of both.
# Each run spreads its tests over LOOM_TEST_WORKERS pytest-xdist workers (default 2;
# 0 runs them in the pytest process itself), each with a test database of its own.
# Usage: test_suite.sh PYTHON PG_URL REDIS_URL -- PYTEST-ARGS-OF-THE-POSTGRESQL-RUN...
# Exits non-zero when either run failed.
PY=$1 PG_URL=$2 REDIS_URL=$3
shift 4
# Compiled modules are kept (__pycache__, git-ignored) even where the environment says
# not to: every xdist worker, site and command a test starts would otherwise compile
# the project and pytest rewrite every test module again (half a minute of CPU per worker).
unset PYTHONDONTWRITEBYTECODE
WORKERS=${LOOM_TEST_WORKERS:-2}
case "$WORKERS" in
    ''|*[!0-9]*) echo "LOOM_TEST_WORKERS must be a number of workers (0 for none), not '$WORKERS'" >&2; exit 2 ;;
esac
# loadfile: a file's tests share one worker, so module-wide fixtures start once; in the
# order tests/conftest.py gives them (the long modules first: pytest-xdist would
# otherwise hand out the modules with the most tests first, and the browser files and
# Schemathesis's one long item started last, alone at the end of the run).
if [ "$WORKERS" -gt 0 ]; then SPREAD="-n $WORKERS --dist loadfile --no-loadscope-reorder"; else SPREAD=""; fi
mkdir -p test-output
PG_LOG=test-output/postgres-run.log
SQLITE_XML=test-output/sqlite-junit.xml PG_XML=test-output/postgres-junit.xml
rm -f "$SQLITE_XML" "$PG_XML"
pg_pid=""
if "$PY" scripts/services_up.py postgres "$PG_URL"; then
    redis=""
    if "$PY" scripts/services_up.py redis "$REDIS_URL"; then
        echo "== PostgreSQL and Redis answer: the database tests run against them too (output: $PG_LOG)"
        redis="$REDIS_URL"
    else
        echo "== PostgreSQL answers (Redis does not): the database tests run against it too (output: $PG_LOG)"
    fi
    # shellcheck disable=SC2086 # SPREAD is words
    LOOM_TEST_OUTPUT=test-output/postgres LOOM_SCHEMATHESIS_EXAMPLES=5 LOOM_SCHEMATHESIS_COVERAGE=0 \
        LOOM_DATABASE_URL="$PG_URL" \
        LOOM_TEST_REDIS_URL="$redis" "$PY" -m pytest $SPREAD --database-tests-only \
        --junitxml="$PG_XML" "$@" >"$PG_LOG" 2>&1 &
    pg_pid=$!
else
    echo "== NOTICE: no PostgreSQL at $PG_URL: the PostgreSQL run is skipped"
fi
echo "== The suite on SQLite ($WORKERS workers)"
# shellcheck disable=SC2086
"$PY" -m pytest $SPREAD --junitxml="$SQLITE_XML"
sqlite_rc=$?
pg_rc=0
if [ -n "$pg_pid" ]; then
    wait "$pg_pid"
    pg_rc=$?
    echo "== The database tests on PostgreSQL (exit $pg_rc)"
    cat "$PG_LOG"
fi
"$PY" scripts/slowest_tests.py 20 "sqlite=$SQLITE_XML" "postgresql=$PG_XML"
echo "== SQLite run: exit $sqlite_rc; PostgreSQL run: exit $pg_rc"
[ "$sqlite_rc" -eq 0 ] && [ "$pg_rc" -eq 0 ]
