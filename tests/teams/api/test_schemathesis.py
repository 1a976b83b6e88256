"""Schemathesis against /api/openapi.json: every operation, in-process through WSGI,
with a superuser's account token, on a furnished team.

Each operation gets its coverage cases (boundaries, missing, extra and wrong-typed
values, other methods) and MAX_EXAMPLES fuzzed cases, valid and invalid, from a fixed
seed. No response may be a 5xx, have a status code, content type or body its
operation does not document.

Path parameters, and body fields that name an agent, a query, a keeper or a team,
are swapped two times in three for rows that exist, so most requests get past the
404s into the operations. Each request runs in a savepoint rolled back after it:
every one meets the same furnished team.

Run with -s for the count of operations, requests and their outcomes. Last measured:
91 operations, 4,835 requests (556 2xx, 4,279 4xx), about 65 s alone on SQLite (the
coverage cases about 35 s of it); make test's PostgreSQL run sends the fuzzed cases
only, 5 an operation (455 requests, about 15 s), from the same seed."""

import os
import time
from collections import Counter

import hypothesis
import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from teams import services
from tests.helpers import api_token, furnish, make_team, make_user

# Fuzzed cases per operation, besides its coverage cases (make test's PostgreSQL run: 5).
MAX_EXAMPLES = int(os.environ.get("LOOM_SCHEMATHESIS_EXAMPLES", "10"))
# LOOM_SCHEMATHESIS_COVERAGE=0 leaves the coverage cases out (make test's PostgreSQL run:
# two thirds of the requests, boundary and wrong-typed values that mostly meet the same
# validation on either database, run on SQLite; the fuzzed cases reach PostgreSQL).
COVERAGE = os.environ.get("LOOM_SCHEMATHESIS_COVERAGE", "1") != "0"
SEED = 20260523
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

# Loaded by the `api_schema` fixture when the test runs, not at collection: the coverage
# cases are built with the schema's tests (about 15 s of CPU), which every pytest-xdist
# worker would pay to collect a test only one of them runs. One test item, the
# operations its subtests.
schema = schemathesis.pytest.from_fixture("api_schema")

# What the furnished team's rows are called (filled by the `furnished` fixture).
ROWS: dict[str, list] = {}


def _rows(operation, name: str) -> list:
    """The existing rows a path parameter or body field of `operation` may name."""
    if name == "key":
        return ROWS["query"] if "/queries/" in operation.path else ROWS["anchor"]
    if name in ("agent", "target", "to"):
        return ROWS["agent"]
    if name == "query_id":
        return ROWS["query"]
    if name == "slug":  # a new team, or alpha renamed to itself
        return ["beta"] if operation.method == "post" else ["alpha"]
    return ROWS.get(name, [])


def _often_existing(operation, generated: dict) -> st.SearchStrategy:
    """The generated values, each swapped two times in three for an existing row."""
    choices = {}
    for name, value in generated.items():
        rows = _rows(operation, name)
        choices[name] = (
            st.sampled_from([True, True, False]).flatmap(
                lambda existing, rows=rows, value=value: (
                    st.sampled_from(rows) if existing else st.just(value)
                )
            )
            if rows
            else st.just(value)
        )
    return st.fixed_dictionaries(choices)


def flatmap_path_parameters(context, path_parameters):
    return _often_existing(context.operation, path_parameters or {})


def flatmap_body(context, body):
    if not isinstance(body, dict):
        return st.just(body)
    return _often_existing(context.operation, body)


OPERATIONS: set[str] = set()  # what the schema documents (filled by `api_schema`)


@pytest.fixture
def api_schema(furnished):
    loaded = schemathesis.openapi.from_wsgi(
        "/api/openapi.json",
        get_wsgi_application(),
        config=SchemathesisConfig.from_dict(
            {
                "seed": SEED,
                "generation": {"max-examples": MAX_EXAMPLES, "database": "none"},
                "phases": {"coverage": {"enabled": COVERAGE}},
            }
        ),
    )
    loaded.hook(flatmap_path_parameters)
    loaded.hook(flatmap_body)
    OPERATIONS.update(
        result.ok().label for result in loaded.get_all_operations() if isinstance(result, Ok)
    )
    return loaded


RAN: Counter = Counter()  # requests per operation
OUTCOMES: Counter = Counter()  # requests per status class


@pytest.fixture(scope="module", autouse=True)
def report():
    started = time.monotonic()
    yield
    outcomes = ", ".join(f"{n} {status}" for status, n in sorted(OUTCOMES.items()))
    print(
        f"\nschemathesis: {len(RAN)} operations, {sum(RAN.values())} requests ({outcomes}); "
        f"{'coverage cases and ' if COVERAGE else ''}"
        f"at most {MAX_EXAMPLES} fuzzed per operation, seed {SEED}, "
        f"{time.monotonic() - started:.1f}s"
    )
    # Every documented operation was called (pytest 9.2's node ids once made schemathesis's
    # 91 items one under pytest-xdist, which then called one operation: that fails here).
    if OPERATIONS:  # the test ran (not deselected)
        assert set(RAN) == OPERATIONS, f"never called: {sorted(OPERATIONS - set(RAN))}"


@pytest.fixture
def furnished(db, settings):
    """Alpha (coach, researcher, coder, reviewer and an external agent "bot") with a
    query, a keeper with entries, an anchor, an open PM request and a team token;
    returns the Authorization header of a superuser's account token."""
    settings.LOOM_API_RATE = "1000000/min"
    cache.clear()
    team = make_team("alpha")
    services.agent_create(team=team, name="bot", role="external")
    agents = {a.name: a for a in team.agents.all()}
    rows = furnish(team, agents, token_label="program")
    ROWS.update(
        team=["alpha"],
        agent=sorted(agents),
        query=[rows.query.key],
        anchor=["db"],
        keeper_id=[rows.keeper.id],
        request_id=[rows.request.id],
        token_id=[rows.token.id],
    )
    key = api_token(user=make_user("root", superuser=True))
    # As Django's test client does: the connection holds the test's transaction, so
    # the end of a request must not close it.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield {"Authorization": f"Bearer {key}"}
    ROWS.clear()
    cache.clear()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    # `furnished` is set up once for all the operations; each example rolls back what it did.
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
def test_api_conforms_to_its_schema(case, furnished):
    RAN[case.operation.label] += 1
    with transaction.atomic():
        response = case.call_and_validate(headers=furnished, checks=CHECKS)
        OUTCOMES[f"{response.status_code // 100}xx"] += 1
        transaction.set_rollback(True)
