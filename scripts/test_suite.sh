#!/bin/sh
# `make test`'s two runs of the suite, side by side on the machine's cores: the whole
# suite on SQLite (in the foreground) and, when PostgreSQL answers, the suite again on
# PostgreSQL (with Redis when it answers; Schemathesis with fewer cases), whose output
# is shown when both have ended.
# Usage: test_suite.sh PYTHON PG_URL REDIS_URL -- PYTEST-ARGS-OF-THE-POSTGRESQL-RUN...
# Exits non-zero when either run failed.
PY=$1 PG_URL=$2 REDIS_URL=$3
shift 4
mkdir -p test-output
PG_LOG=test-output/postgres-run.log
pg_pid=""
if "$PY" scripts/services_up.py postgres "$PG_URL"; then
    if "$PY" scripts/services_up.py redis "$REDIS_URL"; then
        echo "== PostgreSQL and Redis answer: the suite runs against them too (output: $PG_LOG)"
        LOOM_TEST_OUTPUT=test-output/postgres LOOM_SCHEMATHESIS_EXAMPLES=5 LOOM_DATABASE_URL="$PG_URL" LOOM_TEST_REDIS_URL="$REDIS_URL" "$PY" -m pytest "$@" >"$PG_LOG" 2>&1 &
    else
        echo "== PostgreSQL answers (Redis does not): the suite runs against it too (output: $PG_LOG)"
        LOOM_TEST_OUTPUT=test-output/postgres LOOM_SCHEMATHESIS_EXAMPLES=5 LOOM_DATABASE_URL="$PG_URL" "$PY" -m pytest "$@" >"$PG_LOG" 2>&1 &
    fi
    pg_pid=$!
else
    echo "== NOTICE: no PostgreSQL at $PG_URL: the PostgreSQL run is skipped"
fi
echo "== The suite on SQLite"
"$PY" -m pytest
sqlite_rc=$?
pg_rc=0
if [ -n "$pg_pid" ]; then
    wait "$pg_pid"
    pg_rc=$?
    echo "== The suite on PostgreSQL (exit $pg_rc)"
    cat "$PG_LOG"
fi
echo "== SQLite run: exit $sqlite_rc; PostgreSQL run: exit $pg_rc"
[ "$sqlite_rc" -eq 0 ] && [ "$pg_rc" -eq 0 ]
