"""Who may call what, for every operation the OpenAPI document lists: no credentials
is 401, another team's token is 404 (as if the team did not exist), an agent's token
acting as another agent or as the PM is 403, a read-only token reads everything and
writes nothing (403), an expired token is 401, and a refused request changes nothing.

The operations come from the API itself, so a new one is checked (and must be
classified below) the day it is added."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils.timezone import now

from teams.api.site import api as ninja_api
from teams.integrations import webhooks
from teams.models import ApiToken, Message, Team
from tests.helpers import ApiClient, api_token, client_for, state
from tools import registry

pytestmark = pytest.mark.django_db

# A valid body for each operation that takes one, so a refusal is about who calls,
# not about what they sent.
BODIES = {
    "teams_create": {"slug": "gamma", "agents": [{"name": "coach", "role": "coach"}]},
    "teams_update": {"goal": "Ship the lexer."},
    "teams_clone": {"slug": "alpha-again"},
    "teams_fork": {"slug": "alpha-fork", "at_message": "MESSAGE"},
    "teams_replay": {"slug": "alpha-replay"},
    "agents_create": {"name": "tester", "role": "tester"},
    "agents_update": {"role_prompt": "Be brief."},
    "agents_post_message": {"content": "Hello from the program."},
    "messages_post": {"content": "PM here."},
    "pm_requests_answer": {"answer": "Small scope."},
    "keepers_retrieve": {"query": "parser", "mode": "raw"},
    "anchors_put": {"value": "SQLite"},
    "tokens_create": {"label": "another"},
    "tool_pass_turn": {"reason": "agree"},
    "tool_ask_pm": {"question": "Budget?"},
    "tool_signal_phase_complete": {"summary": "Agreed."},
    "tool_peer_ask_question": {"question": "Ready?"},
    "tool_peer_answer_question": {"query_id": "QUERY", "answer": "Yes."},
    "tool_peer_forward_question": {"query_id": "QUERY", "enrichment": "Ask the coder."},
    "tool_context_retrieve": {"query": "parser", "mode": "raw"},
    "tool_context_offload": {"topic": "old talk"},
    "tool_peer_message": {"to": "coach", "content": "Hi."},
    "tool_peer_discovery": {},
    "tool_declare_intent": {"trajectory": "Ship the parser."},
    "tool_map_context": {"level": "tactic", "content": "Tests first."},
    "tool_scan_hierarchy": {},
    "tool_save_anchor": {"key": "lang", "value": "Python"},
    "tool_think_back": {},
    "tool_check_drift": {},
    "tool_ask_peer": {"peer": "critic", "prompt": "Is this sound?"},
    "tool_ask_multi": {"prompt": "Is this sound?"},
    "tool_read_consultation": {"consultation_id": 1},
    "tool_file_list": {"path": ""},
    "tool_file_read": {"path": "notes.md"},
    "tool_file_write": {"path": "notes.md", "content": "Rewritten."},
    "tool_file_edit": {"path": "notes.md", "old_text": "LALR", "new_text": "LL(1)"},
    "tool_run_command": {"command": "true"},
    "consultants_create": {"name": "critic2", "model": "loom-offline"},
    "consultants_update": {"enabled": False},
    "model_endpoints_create": {"name": "lab", "api": "openai", "local": True},
    "model_endpoints_update": {"local": True},
    "webhooks_create": {"url": "https://hooks.example.test/loom", "events": ["team.done"]},
    "mcp_servers_create": {"name": "docs", "transport": "http", "url": "https://mcp.example.test"},
    "mcp_servers_update": {"approval": "auto"},
    "teams_next_speaker": {"agent": "coder"},
    "agents_nudge": {"text": "Keep it small."},
    "agents_seat": {"text": "I will keep it small."},
    "evals_create": {
        "suite": {
            "name": "one",
            "team": {"agents": [{"name": "coach", "role": "coach", "model": "loom-offline"}]},
            "cases": [{"name": "a", "goal": "Plan it.", "checks": [{"max_turns": 5}]}],
        }
    },
}
# A valid query for each operation that needs one (the file `furnished` wrote).
QUERIES = {
    "files_content": {"path": "notes.md"},
    "files_history": {"path": "notes.md"},
    "files_revision": {"path": "notes.md", "number": 1},
}
# Consultants serve every team: a superuser's.
SUPERUSER_ONLY = {
    "consultants_create",
    "consultants_update",
    "model_endpoints_create",
    "model_endpoints_update",
    "model_endpoints_delete",
}

# What an agent's token may not do: act as the PM...
PM_ONLY = {
    "teams_create",
    "teams_update",
    "teams_clone",
    "teams_fork",
    "teams_replay",
    "teams_start",
    "teams_pause",
    "teams_resume",
    "agents_create",
    "agents_update",
    "agents_delete",
    "messages_post",
    "pm_requests_answer",
    "anchors_put",
    "anchors_delete",
    "tokens_list",
    "tokens_create",
    "tokens_revoke",
    "webhooks_list",
    "webhooks_create",
    "webhooks_delete",
    "webhooks_rotate_secret",
    "webhooks_deliveries",
    "spend_get",
    "mcp_servers_list",
    "mcp_servers_get",
    "mcp_servers_create",
    "mcp_servers_update",
    "mcp_servers_delete",
    "mcp_servers_refresh",
    "teams_next_speaker",
    "agents_nudge",
    "agents_seat",
    "evals_create",
}
# PM_ONLY operations that only read.
PM_ONLY_READS = {
    "tokens_list",
    "webhooks_list",
    "webhooks_deliveries",
    "spend_get",
    "mcp_servers_list",
    "mcp_servers_get",
}
# ...or act as another agent than its own.
AS_AGENT = {"agents_post_message"} | {f"tool_{tool.name}" for tool in registry.all_tools()}


def operations() -> list[tuple[str, str, str]]:
    """(operation id, method, path template) of every operation."""
    schema = ninja_api.get_openapi_schema()
    return [
        (op["operationId"], method.upper(), path)
        for path, methods in schema["paths"].items()
        for method, op in methods.items()
    ]


OPERATIONS = operations()
TEAM_SCOPED = [op for op in OPERATIONS if op[2].startswith("/api/teams/{team}")]


def concrete(template: str, furnished, agent="reviewer", webhook_id=1) -> str:
    """The template with alpha's rows in it (the path without its /api prefix)."""
    anchor_or_query = furnished.query.key if "/queries/" in template else "db"
    return (
        template.removeprefix("/api")
        .replace("{team}", "alpha")
        .replace("{agent}", agent)
        .replace("{key}", anchor_or_query)
        .replace("{request_id}", str(furnished.request.id))
        .replace("{keeper_id}", str(furnished.keeper.id))
        .replace("{token_id}", str(furnished.token.id))
        .replace("{name}", "critic")
        .replace("{webhook_id}", str(webhook_id))
        .replace("{other}", "alpha")
        .replace("{run_id}", str(furnished.eval_run.pk))
    )


def call(client: ApiClient, op_id: str, method: str, path: str, furnished):
    body = BODIES.get(op_id)
    if body is not None and "query_id" in body:
        body = {**body, "query_id": furnished.query.key}
    if body is not None and "at_message" in body:
        body = {**body, "at_message": Message.objects.filter(team__slug="alpha").first().pk}
    if method == "GET":
        return client.get(path, **QUERIES.get(op_id, {}))
    if method == "DELETE":
        return client.delete(path)
    return getattr(client, method.lower())(path, body if body is not None else {})


def each_operation(ops, check) -> None:
    """check(op_id, method, template) for every operation of `ops`, in one test with
    one furnished team (a team per operation cost most of this module's time): every
    refusal that does not hold is reported, each with its operation."""
    failures = []
    for op_id, method, template in ops:
        try:
            check(op_id, method, template)
        except AssertionError as exc:
            failures.append(f"{op_id} ({method} {template}): {exc}")
    assert not failures, f"{len(failures)} of {len(ops)} operations:\n" + "\n".join(failures)


def test_every_operation_is_classified():
    ids = {op_id for op_id, _, _ in OPERATIONS}
    writes = {op_id for op_id, method, _ in OPERATIONS if method != "GET"}
    assert PM_ONLY | AS_AGENT | SUPERUSER_ONLY | {"keepers_retrieve"} == writes | PM_ONLY_READS
    assert {op for op in BODIES} <= ids
    assert {op for op in ids if op.startswith("tool_")} <= set(BODIES)  # a body for each tool
    assert len(OPERATIONS) >= 43


def test_no_credentials_is_401_and_changes_nothing(furnished, alpha_key):
    def check(op_id, method, template):
        for client in (ApiClient(), ApiClient("loom_not-a-token"), ApiClient("")):
            before = state()
            response = call(client, op_id, method, concrete(template, furnished), furnished)
            assert response.status_code == 401, response.content
            assert response.json()["detail"].startswith("Authentication required")
            assert response["WWW-Authenticate"] == "Bearer"
            assert state() == before

    each_operation(OPERATIONS, check)


def test_a_revoked_token_is_401_from_its_next_request(api, alpha_key):
    assert api.get("/teams/alpha").status_code == 200
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(alpha_key)).update(revoked_at=now())
    assert api.get("/teams/alpha").status_code == 401


def test_another_teams_token_finds_nothing(furnished, beta_api):
    def check(op_id, method, template):
        before = state()
        response = call(beta_api, op_id, method, concrete(template, furnished), furnished)
        assert response.status_code == 404, response.content
        assert response.json() == {"detail": "No team with slug 'alpha'."}
        assert state() == before

    each_operation(TEAM_SCOPED, check)


def test_a_team_token_lists_its_own_team_only(api, beta_api, furnished):
    assert [t["slug"] for t in api.get("/teams").json()] == ["alpha"]
    assert [t["slug"] for t in beta_api.get("/teams").json()] == ["beta"]
    # The same answer for a team that exists elsewhere and one that does not.
    assert beta_api.get("/teams/alpha").json() == {"detail": "No team with slug 'alpha'."}
    assert beta_api.get("/teams/nope").json() == {"detail": "No team with slug 'nope'."}


def test_an_agents_token_cannot_act_as_another_agent(furnished, coder_api):
    def check(op_id, method, template):
        before = state()
        response = call(coder_api, op_id, method, concrete(template, furnished), furnished)
        assert response.status_code == 403, response.content
        assert response.json() == {
            "detail": "This token acts only as agent 'coder', not as 'reviewer'."
        }
        assert state() == before

    each_operation([op for op in OPERATIONS if op[0] in AS_AGENT], check)


def test_an_agents_token_cannot_act_as_the_pm(furnished, coder_api):
    def check(op_id, method, template):
        before = state()
        path = concrete(template, furnished, "coder")
        response = call(coder_api, op_id, method, path, furnished)
        assert response.status_code == 403, response.content
        expected = (
            "A team token reaches its own team only"
            if op_id in ("teams_create", "evals_create")
            else "This token acts only as agent 'coder'"
        )
        assert expected in response.json()["detail"]
        assert state() == before

    each_operation([op for op in OPERATIONS if op[0] in PM_ONLY], check)


def test_an_agents_token_reads_the_team_and_acts_as_its_agent(coder_api, furnished):
    for op_id, method, template in OPERATIONS:
        if method == "GET" and op_id not in PM_ONLY and template.startswith("/api/teams/{team}"):
            path = concrete(template, furnished, "coder")
            assert coder_api.get(path, **QUERIES.get(op_id, {})).status_code == 200, op_id
    response = coder_api.post(
        "/teams/alpha/agents/coder/tools/peer_answer_question",
        {"query_id": furnished.query.key, "answer": "LALR."},
    )
    assert response.json()["result"] == f"Answer delivered for query {furnished.query.key}."


@pytest.mark.parametrize(
    ("op_id", "method", "template"), [op for op in OPERATIONS if op[0] in SUPERUSER_ONLY]
)
def test_only_superusers_change_consultants(op_id, method, template, furnished, api, pm):
    from teams.models import ConsultantProfile

    ConsultantProfile.objects.create(name="critic", model="loom-offline")
    for client in (api, ApiClient(api_token(user=pm))):
        before = state()
        response = call(client, op_id, method, concrete(template, furnished), furnished)
        assert response.status_code == 403, (op_id, response.content)
        assert "Only a superuser may" in response.json()["detail"]
        assert state() == before


def test_team_tokens_cannot_create_teams(api, pm, team):
    response = api.post("/teams", BODIES["teams_create"])
    assert response.status_code == 403
    assert "create teams with an account token" in response.json()["detail"]
    # A PM's account token acts with the PM's rights: no teams.add_team, no team.
    pm_api = ApiClient(api_token(user=pm))
    assert pm_api.post("/teams", BODIES["teams_create"]).status_code == 403
    assert not Team.objects.filter(slug="gamma").exists()
    assert [t["slug"] for t in pm_api.get("/teams").json()] == ["alpha"]


def test_an_account_token_stops_working_when_its_user_loses_staff(pm, team):
    pm_api = ApiClient(api_token(user=pm))
    assert pm_api.get("/teams/alpha").status_code == 200
    pm.is_staff = False
    pm.save()
    assert pm_api.get("/teams/alpha").status_code == 401


def test_staff_sessions_work_with_csrf_enforced_on_unsafe_methods(pm, team):
    browser = client_for(pm)
    browser.handler.enforce_csrf_checks = True
    session = ApiClient(client=browser)
    assert [t["slug"] for t in session.get("/teams").json()] == ["alpha"]
    response = session.post("/teams/alpha/messages", {"content": "No CSRF token."})
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    assert not Message.objects.exists()
    browser.get("/")  # the page sets the CSRF cookie, as a browser would have it
    session.headers = {"X-CSRFToken": browser.cookies["csrftoken"].value}
    assert session.post("/teams/alpha/messages", {"content": "With it."}).status_code == 201
    # Not staff: no API either.
    outsider = Client()
    assert ApiClient(client=outsider).get("/teams").status_code == 401


def test_rate_limit_is_per_token_with_retry_after(settings, api, team):
    settings.LOOM_API_RATE = "3/min"
    assert [api.get("/teams/alpha").status_code for _ in range(3)] == [200, 200, 200]
    response = api.get("/teams/alpha")
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "detail" in response.json()
    # Another token has its own allowance.
    assert ApiClient(api_token(team=team)).get("/teams/alpha").status_code == 200


# --- scoped and expiring tokens (issue 22) ------------------------------------------

GETS = [op for op in OPERATIONS if op[1] == "GET"]
WRITES = [op for op in OPERATIONS if op[1] != "GET"]


def expire(key: str) -> None:
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(key)).update(
        expires_at=now() - timedelta(seconds=1)
    )


@pytest.fixture
def hook(team):
    """A webhook of alpha, so its paths have a row behind them."""
    return webhooks.webhook_create(
        team=team, url="https://hooks.example.test/loom", events=["team.done"], enabled=True
    )[0]


def test_a_read_only_token_reads_everything_a_full_one_does(furnished, hook, api, team, superuser):
    """Every GET of the API works with a read-only token: a superuser's account token
    gets a 200 from each, and a team's read-only token the same answer as its full
    twin (whose own refusals, e.g. webhooks for persons only, are not about scope)."""
    root_ro = ApiClient(api_token(user=superuser, read_only=True))
    alpha_ro = ApiClient(api_token(team=team, read_only=True))
    assert len(GETS) >= 15
    for op_id, _, template in GETS:
        path = concrete(template, furnished, webhook_id=hook.id)
        query = QUERIES.get(op_id, {})
        assert root_ro.get(path, **query).status_code == 200, op_id
        full, scoped = api.get(path, **query), alpha_ro.get(path, **query)
        assert (scoped.status_code, scoped.json()) == (full.status_code, full.json()), op_id


def test_a_read_only_token_writes_nothing(furnished, hook, team, superuser):
    """Every write and every tool call is a 403 naming the reason, for a team's
    read-only token and a superuser's alike, before anything else is looked at."""
    clients = (
        ApiClient(api_token(team=team, read_only=True)),
        ApiClient(api_token(user=superuser, read_only=True)),
    )

    def check(op_id, method, template):
        for client in clients:
            before = state()
            path = concrete(template, furnished, webhook_id=hook.id)
            response = call(client, op_id, method, path, furnished)
            assert response.status_code == 403, response.content
            detail = response.json()["detail"]
            assert detail.startswith("This token is read-only: it may read (GET) but not "), detail
            assert f"{method} /api/" in detail
            assert state() == before

    each_operation(WRITES, check)


def test_an_expired_token_is_401_with_the_reason(furnished, hook, team, superuser):
    keys = [
        api_token(team=team, expires_in="1h"),
        api_token(user=superuser, expires_in="90d"),
        api_token(team=team, read_only=True, expires_in="30m"),
    ]
    for key in keys:
        expire(key)

    def check(op_id, method, template):
        for key in keys:
            before = state()
            path = concrete(template, furnished, webhook_id=hook.id)
            response = call(ApiClient(key), op_id, method, path, furnished)
            assert response.status_code == 401, response.content
            detail = response.json()["detail"]
            assert detail.startswith("This token expired at ") and "make a new one" in detail
            assert response["WWW-Authenticate"] == "Bearer"
            assert state() == before

    each_operation(OPERATIONS, check)


def test_a_token_works_until_it_expires(api, team):
    key = api_token(team=team, expires_in="12h")
    token = ApiToken.objects.get(key_hash=ApiToken.hash_key(key))
    assert timedelta(hours=11, minutes=59) < token.expires_at - now() <= timedelta(hours=12)
    assert ApiClient(key).get("/teams/alpha").status_code == 200
    expire(key)
    token.refresh_from_db()
    response = ApiClient(key).post("/teams/alpha/messages", {"content": "Late."})
    when = token.expires_at.strftime("%Y-%m-%d %H:%M:%S")
    assert response.json() == {"detail": f"This token expired at {when} UTC; make a new one."}
    assert not Message.objects.filter(content="Late.").exists()


def test_a_bearer_token_is_judged_alone_never_by_the_session(furnished, pm, team):
    """Bug: an unknown or revoked token fell through to the staff-session auth, whose
    CSRF check answered 403 "CSRF check Failed" to an unsafe method (and a staff
    session behind it was used instead). Now it is a 401 on every method."""
    revoked = api_token(team=team)
    ApiToken.objects.filter(key_hash=ApiToken.hash_key(revoked)).update(revoked_at=now())
    browser = client_for(pm)  # a logged-in staff session, CSRF enforced as for a browser
    browser.handler.enforce_csrf_checks = True
    callers = (
        ("loom_not-a-token", Client(enforce_csrf_checks=True)),
        (revoked, Client(enforce_csrf_checks=True)),
        ("loom_not-a-token", browser),
        (revoked, browser),
    )

    def check(op_id, method, template):
        for key, client in callers:
            before = state()
            caller = ApiClient(key, client=client)
            response = call(caller, op_id, method, concrete(template, furnished), furnished)
            assert response.status_code == 401, (key, response.content)
            assert "unknown or revoked" in response.json()["detail"]
            assert response["WWW-Authenticate"] == "Bearer"
            assert state() == before

    each_operation(OPERATIONS, check)
