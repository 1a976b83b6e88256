"""Each operation doing its job, and refusing bad input with a 4xx that says why and
changes nothing. Who may call what is tests/teams/api/test_access.py."""

import json

import pytest
from django.contrib.auth.models import Permission

from teams.api.site import api as ninja_api
from teams.models import (
    HUMAN_TEXT_LIMIT,
    Agent,
    AnchorRevision,
    ApiToken,
    Message,
    PMRequest,
    Team,
    Turn,
)
from tests.helpers import ApiClient, api_token, drain, make_user, state
from tools import registry

pytestmark = pytest.mark.django_db


def refused(response, status: int, *, state_before: dict) -> str | list:
    """The response is `status` with a {"detail": ...} body, and nothing changed."""
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"detail"}
    assert state() == state_before
    return body["detail"]


def field_errors(detail) -> dict:
    return {tuple(e["loc"][-1:]): e["msg"] for e in detail}


# --- teams ---------------------------------------------------------------------


def test_teams_create_list_get_and_update(root_api, pm, team, other_team):
    created = root_api.post(
        "/teams",
        {
            "slug": "gamma",
            "name": "Gamma",
            "goal": "Write the docs.",
            "phases": ["draft", "review"],
            "max_cost_usd": "2.5",
            "agents": [{"name": "coach", "role": "coach"}, {"name": "bot", "role": "external"}],
        },
    )
    assert created.status_code == 201
    body = created.json()
    assert body["status"] == "idle" and body["actions"] == ["start"] and body["phase"] == "draft"
    assert [(a["name"], a["role"], a["position"]) for a in body["agents"]] == [
        ("coach", "coach", 0),
        ("bot", "external", 1),
    ]
    assert body["max_cost_usd"] == "2.5000"
    assert [t["slug"] for t in root_api.get("/teams").json()] == ["alpha", "beta", "gamma"]
    assert root_api.get("/teams/gamma").json()["goal"] == "Write the docs."

    changed = root_api.patch(
        "/teams/gamma", {"goal": "Write better docs.", "max_turns": 10, "plan": "## Plan\n- toc"}
    )
    assert changed.status_code == 200
    assert (changed.json()["goal"], changed.json()["max_turns"]) == ("Write better docs.", 10)
    assert changed.json()["plan"] == "## Plan\n- toc"
    assert changed.json()["status"] == "idle"  # only the fields given change

    # A staff PM with the right to add teams manages the team they create.
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    pm_api = ApiClient(api_token(user=pm))
    assert pm_api.post("/teams", {"slug": "delta"}).status_code == 201
    assert Team.objects.get(slug="delta").managers.get() == pm
    assert [t["slug"] for t in pm_api.get("/teams").json()] == ["alpha", "delta"]


def test_teams_bad_input_is_refused_with_the_field(root_api, team):
    before = state()
    detail = refused(root_api.post("/teams", {"slug": "alpha"}), 409, state_before=before)
    assert detail == "The slug 'alpha' is not available: choose another."
    detail = refused(root_api.post("/teams", {"slug": "Not A Slug"}), 422, state_before=before)
    assert field_errors(detail)[("slug",)].startswith("String should match pattern")
    detail = refused(
        root_api.post("/teams", {"slug": "x", "agents": [{"name": "a b", "role": "coach"}]}),
        422,
        state_before=before,
    )
    assert detail[0]["loc"][-3:] == ["agents", 0, "name"]
    refused(root_api.post("/teams", {"slug": "x", "phases": []}), 422, state_before=before)
    refused(root_api.post("/teams", {"slug": "x", "status": "done"}), 422, state_before=before)
    for patch in ({"max_turns": 0}, {"status": "done"}, {"goal": None}, {"phases": [""]}):
        refused(root_api.patch("/teams/alpha", patch), 422, state_before=before)
    detail = refused(
        root_api.patch("/teams/alpha", {"goal": "x" * (HUMAN_TEXT_LIMIT + 1)}),
        422,
        state_before=before,
    )
    assert "at most 20000 characters" in detail[0]["msg"]
    detail = refused(root_api.patch("/teams/alpha", {"goal": "a\x00b"}), 422, state_before=before)
    assert "NUL" in detail[0]["msg"]


def test_start_pause_resume_through_the_state_table(api, team):
    started = api.post("/teams/alpha/start")
    assert started.status_code == 200
    assert (started.json()["status"], started.json()["actions"]) == ("running", ["pause"])
    assert Turn.objects.filter(team=team, status="queued").count() == 1
    before = state()
    assert refused(api.post("/teams/alpha/start"), 409, state_before=before) == (
        "Team 'alpha' is already running."
    )
    assert refused(api.post("/teams/alpha/resume"), 409, state_before=before) == (
        "Team 'alpha' is running, not paused."
    )
    assert api.post("/teams/alpha/pause").json()["status"] == "paused"
    assert not Turn.objects.filter(team=team, status="queued").exists()
    assert api.post("/teams/alpha/resume").json()["status"] == "running"


# --- agents --------------------------------------------------------------------


def test_agents_roster(api, team, agents):
    assert [a["name"] for a in api.get("/teams/alpha/agents").json()] == [
        "coach",
        "researcher",
        "coder",
        "reviewer",
    ]
    added = api.post("/teams/alpha/agents", {"name": "bot", "role": "external"})
    assert added.status_code == 201 and added.json()["position"] == 4
    assert api.get("/teams/alpha/agents/bot").json()["role"] == "external"
    changed = api.patch("/teams/alpha/agents/bot", {"role_prompt": "Be brief.", "position": 9})
    assert (changed.json()["role_prompt"], changed.json()["position"]) == ("Be brief.", 9)
    before = state()
    assert refused(
        api.post("/teams/alpha/agents", {"name": "bot", "role": "coder"}), 409, state_before=before
    ) == ("Team 'alpha' already has an agent named 'bot'.")
    refused(api.patch("/teams/alpha/agents/bot", {"name": "coder"}), 409, state_before=before)
    refused(api.patch("/teams/alpha/agents/bot", {"turns": 0}), 422, state_before=before)
    refused(
        api.post("/teams/alpha/agents", {"name": "x", "role": "boss"}), 422, state_before=before
    )
    assert refused(api.get("/teams/alpha/agents/nobody"), 404, state_before=before) == (
        "Team 'alpha' has no agent named 'nobody'."
    )
    assert api.delete("/teams/alpha/agents/bot").status_code == 204
    assert not team.agents.filter(name="bot").exists()


def test_an_agent_in_a_turn_cannot_be_removed(api, team):
    api.post("/teams/alpha/start")  # the coach's turn is queued
    before = state()
    detail = refused(api.delete("/teams/alpha/agents/coach"), 409, state_before=before)
    assert detail.startswith("Agent 'coach' is in a turn now")


def test_drift_of_an_agent(api, team, agents):
    api.post("/teams/alpha/start")
    drain(team, limit=1)
    coach = api.get("/teams/alpha/agents/coach/drift").json()
    assert [t["number"] for t in coach["turns"]] == [1]
    assert coach["turns"][0]["drift_score"] == Agent.objects.get(name="coach").drift_score

    # map_context is for work phases by default: the PM's tool access opens it to all.
    api.patch("/teams/alpha", {"tool_access": {"map_context": {"phases": []}}})
    api.post("/teams/alpha/agents/reviewer/tools/map_context", {"level": "tactic", "content": "t"})
    drift = api.get("/teams/alpha/agents/reviewer/drift").json()
    assert drift["score"] == Agent.objects.get(name="reviewer").drift_score == 55
    assert (drift["meaning"], drift["tactic"], drift["context_updates"]) == ("some drift", "t", 1)
    assert drift["chain_breaks"] == ["Tactic set without a trajectory."]
    assert drift["recommendation"].startswith("⚠ Some drift detected.")
    assert drift["report"].startswith("=== DRIFT REPORT ===") and drift["turns"] == []


# --- the conversation ----------------------------------------------------------


def test_messages_pages_and_filters(api, team, agents):
    api.post("/teams/alpha/start")
    drain(team, limit=4)
    everything = api.get("/teams/alpha/messages").json()
    ids = [m["id"] for m in everything["messages"]]
    assert len(ids) >= 4 and ids == sorted(ids) and not everything["has_more"]
    first = api.get("/teams/alpha/messages", limit=2).json()
    assert [m["id"] for m in first["messages"]] == ids[:2] and first["has_more"]
    rest = api.get("/teams/alpha/messages", after=first["next_after"]).json()
    assert [m["id"] for m in rest["messages"]] == ids[2:]
    by_coach = api.get("/teams/alpha/messages", agent="coach").json()["messages"]
    assert by_coach and {m["speaker"] for m in by_coach} == {"coach"}
    system = api.get("/teams/alpha/messages", kind="system").json()["messages"]
    assert {m["kind"] for m in system} <= {"system"}
    before = state()
    refused(api.get("/teams/alpha/messages", kind="gossip"), 422, state_before=before)
    refused(api.get("/teams/alpha/messages", after=-1), 422, state_before=before)
    refused(api.get("/teams/alpha/messages", limit=501), 422, state_before=before)


def test_pm_message_is_posted_or_refused(api, team):
    posted = api.post("/teams/alpha/messages", {"content": "  Keep it small.  "})
    assert posted.status_code == 201
    assert (posted.json()["kind"], posted.json()["content"]) == ("pm", "Keep it small.")
    before = state()
    for content in ("", "   ", "x" * (HUMAN_TEXT_LIMIT + 1), "nul\x00"):
        refused(api.post("/teams/alpha/messages", {"content": content}), 422, state_before=before)


def test_answering_a_pm_request_resumes_the_team(api, team, agents):
    from teams.conversation import pm_requests

    api.post("/teams/alpha/start")
    drain(team, limit=1)
    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    assert api.get("/teams/alpha").json()["status"] == "awaiting_pm"
    listed = api.get("/teams/alpha/pm-requests", status="open").json()
    assert [r["id"] for r in listed] == [request.id]
    before = state()
    bad_key = {"answer": "Small.", "pin_as": "not a key!"}
    detail = refused(
        api.post(f"/teams/alpha/pm-requests/{request.id}/answer", bad_key), 422, state_before=before
    )
    assert detail[0]["loc"] == ["body", "pin_as"]
    answered = api.post(
        f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "Small.", "pin_as": "scope"}
    )
    assert answered.status_code == 200 and answered.json()["status"] == "answered"
    assert api.get("/teams/alpha").json()["status"] == "running"
    assert Turn.objects.filter(team=team, status="queued").exists()
    pinned = api.get("/teams/alpha/anchors").json()
    assert [(a["key"], a["value"], a["updated_by"]) for a in pinned] == [
        ("scope", "Small.", "token alpha program")
    ]
    assert api.get("/teams/alpha/pm-requests", status="open").json() == []
    before = state()
    again = api.post(f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "!"})
    assert refused(again, 409, state_before=before) == "This PM request was already answered."
    refused(
        api.post("/teams/alpha/pm-requests/999999/answer", {"answer": "?"}),
        404,
        state_before=before,
    )


def test_a_pm_request_of_another_team_is_not_found(api, other_team):
    from teams.conversation import pm_requests

    theirs = pm_requests.pm_request_open(team=other_team, question="Theirs?")
    before = state()
    response = api.post(f"/teams/alpha/pm-requests/{theirs.id}/answer", {"answer": "Mine."})
    assert refused(response, 404, state_before=before) == (
        f"Team 'alpha' has no PM request {theirs.id}."
    )
    assert PMRequest.objects.get(pk=theirs.pk).status == "open"


def test_turns_report_usage_cost_and_duration(api, team):
    api.post("/teams/alpha/start")
    drain(team, limit=2)
    page = api.get("/teams/alpha/turns").json()
    done = [t for t in page["turns"] if t["status"] == "done"]
    assert done and done[0]["agent"] == "coach" and done[0]["number"] == 1
    assert done[0]["model"] == "loom-offline" and done[0]["input_tokens"] > 0
    assert done[0]["duration_seconds"] is not None and done[0]["finished_at"]
    assert api.get("/teams/alpha/turns", status="queued", agent="coder").json()["turns"]


# --- knowledge -----------------------------------------------------------------


def test_queries_with_their_hop_chain(api, furnished):
    listed = api.get("/teams/alpha/queries").json()
    assert [q["key"] for q in listed] == [furnished.query.key]
    query = api.get(f"/teams/alpha/queries/{furnished.query.key}").json()
    assert query["lines"] == ["researcher asked coder"]
    assert query["question"] == "Which parser?" and query["status"] == "open"
    assert isinstance(query["enrichments"], list) and query["max_hops"] == 5
    before = state()
    refused(api.get("/teams/alpha/queries/q-000000000000"), 404, state_before=before)
    refused(api.get("/teams/alpha/queries/nonsense"), 404, state_before=before)


def test_keepers_listed_paged_and_searched(api, furnished):
    listed = api.get("/teams/alpha/keepers").json()
    assert [(k["id"], k["topic"], k["entries"]) for k in listed] == [
        (furnished.keeper.id, "parser", 3)
    ]
    page = api.get(f"/teams/alpha/keepers/{furnished.keeper.id}", limit=2).json()
    assert [e["position"] for e in page["entries"]] == [0, 1] and page["has_more"]
    rest = api.get(f"/teams/alpha/keepers/{furnished.keeper.id}", after=page["next_after"])
    assert [e["position"] for e in rest.json()["entries"]] == [2]
    found = api.post("/teams/alpha/keepers/retrieve", {"query": "LALR", "mode": "raw"})
    assert "LALR parser" in found.json()["result"]
    before = state()
    refused(api.get("/teams/alpha/keepers/999999"), 404, state_before=before)
    refused(
        api.post("/teams/alpha/keepers/retrieve", {"query": "x", "mode": "magic"}),
        422,
        state_before=before,
    )
    detail = refused(
        api.post("/teams/alpha/keepers/retrieve", {"query": "x", "keeper_id": 999999}),
        404,
        state_before=before,
    )
    assert detail == "Keeper 999999 not found in this team."


def test_anchors_keep_every_change(api, team, furnished):
    assert [a["key"] for a in api.get("/teams/alpha/anchors").json()] == ["db"]
    changed = api.put("/teams/alpha/anchors/db", {"value": "PostgreSQL 17"})
    assert changed.json()["value"] == "PostgreSQL 17"
    assert changed.json()["updated_by"] == "token alpha program"
    assert api.delete("/teams/alpha/anchors/db").status_code == 204
    assert api.get("/teams/alpha/anchors").json() == []
    history = api.get("/teams/alpha/anchors/db/history").json()
    assert [(h["value"], h["deleted"], h["changed_by"]) for h in history] == [
        ("", True, "token alpha program"),
        ("PostgreSQL 17", False, "token alpha program"),
        ("PostgreSQL 16", False, "pm"),
    ]
    api.put("/teams/alpha/anchors/db", {"value": "SQLite"})  # pinned again: one history
    assert len(api.get("/teams/alpha/anchors/db/history").json()) == 4
    before = state()
    detail = refused(
        api.put("/teams/alpha/anchors/bad key!", {"value": "x"}), 422, state_before=before
    )
    assert "Anchor keys start with a letter or digit" in detail[0]["msg"]
    refused(api.put("/teams/alpha/anchors/db", {"value": ""}), 422, state_before=before)
    refused(api.delete("/teams/alpha/anchors/nothing"), 404, state_before=before)
    refused(api.get("/teams/alpha/anchors/nothing/history"), 404, state_before=before)
    assert AnchorRevision.objects.filter(team=team, key="db").count() == 4


# --- tools ---------------------------------------------------------------------


def test_tools_listed_with_the_schema_the_model_gets():
    listed = {
        t["name"]: t
        for t in ApiClient(api_token(user=make_user("r", superuser=True))).get("/tools").json()
    }
    assert set(listed) == {tool.name for tool in registry.all_tools()}
    for tool in registry.all_tools():
        assert listed[tool.name]["input_schema"] == tool.definition()["input_schema"]
        assert listed[tool.name]["description"] == tool.description
    assert listed["ask_pm"]["roles"] == ["coach"]


def test_each_tool_is_an_operation_whose_body_is_its_parameter_model():
    schema = ninja_api.get_openapi_schema()
    for tool in registry.all_tools():
        op = schema["paths"][f"/api/teams/{{team}}/agents/{{agent}}/tools/{tool.name}"]["post"]
        ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        body = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        params = tool.Params.model_json_schema()
        assert set(body.get("properties", {})) == set(params.get("properties", {}))
        assert body.get("required", []) == params.get("required", [])
        assert {403, 422} <= {int(code) for code in op["responses"]}


def test_a_tool_runs_as_the_agent_through_the_registry(api, agents):
    sent = api.post(
        "/teams/alpha/agents/coder/tools/peer_message", {"to": "reviewer", "content": "Look."}
    )
    assert sent.json() == {
        "result": "Message sent to reviewer.",
        "is_error": False,
        "outcome": None,
    }
    inbox = Message.objects.get(recipient=agents["reviewer"])
    assert (inbox.author, inbox.kind, inbox.content) == (agents["coder"], "peer", "Look.")
    passed = api.post("/teams/alpha/agents/coder/tools/pass_turn", {"reason": "agree"})
    assert passed.json()["outcome"] == {"kind": "pass", "reason": "agree"}
    missing = api.post(
        "/teams/alpha/agents/coder/tools/peer_message", {"to": "nobody", "content": "?"}
    )
    assert missing.json()["result"].startswith("No agent named 'nobody' in this team.")


def test_a_tool_the_agent_may_not_use_or_bad_arguments_change_nothing(api, agents):
    before = state()
    detail = refused(
        api.post("/teams/alpha/agents/coder/tools/ask_pm", {"question": "Budget?"}),
        403,
        state_before=before,
    )
    assert detail == "ask_pm is only for the coach role; coder is a coder."
    detail = refused(
        api.post("/teams/alpha/agents/coder/tools/peer_message", {"to": "coach"}),
        422,
        state_before=before,
    )
    assert field_errors(detail) == {("content",): "Field required"}
    refused(
        api.post("/teams/alpha/agents/coder/tools/pass_turn", {"reason": "ok", "extra": 1}),
        422,
        state_before=before,
    )
    refused(
        api.post("/teams/alpha/agents/nobody/tools/pass_turn", {"reason": "ok"}),
        404,
        state_before=before,
    )


# --- programs as agents --------------------------------------------------------


def test_an_agents_token_reads_only_its_own_context(coder_api, agents):
    assert coder_api.get("/teams/alpha/agents/coder/context").status_code == 200
    refused = coder_api.get("/teams/alpha/agents/reviewer/context")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "This token acts only as agent 'coder', not as 'reviewer'."}


def test_only_superusers_name_a_workspace_folder(api, root_api, pm, team):
    from django.contrib.auth.models import Permission

    before = state()
    detail = refused(api.patch("/teams/alpha", {"workspace": "/etc"}), 403, state_before=before)
    assert detail.startswith("Only a superuser may set a team's workspace folder")
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    pm_api = ApiClient(api_token(user=pm))
    before = state()
    refused(pm_api.post("/teams", {"slug": "gamma", "workspace": "/etc"}), 403, state_before=before)
    assert root_api.patch("/teams/alpha", {"workspace": "/srv/alpha"}).status_code == 200


def test_an_external_agent_reads_its_context_and_speaks(api, team, agents):
    api.post("/teams/alpha/agents", {"name": "bot", "role": "external"})
    asked = api.post(
        "/teams/alpha/agents/coder/tools/peer_ask_question", {"question": "Ready?", "target": "bot"}
    ).json()["result"]
    key = asked.split("Query ID: ")[1].split(".")[0]
    context = api.get("/teams/alpha/agents/bot/context").json()
    assert [q["key"] for q in context["open_queries"]] == [key]
    inbox = [m for m in context["messages"] if m["to_you"]]
    assert inbox[0]["query"] == key and inbox[0]["content"].startswith("[Query from coder")
    answer = api.post(
        "/teams/alpha/agents/bot/tools/peer_answer_question", {"query_id": key, "answer": "Yes."}
    )
    assert answer.json()["result"] == f"Answer delivered for query {key}."
    assert api.get("/teams/alpha/agents/bot/context").json()["open_queries"] == []
    coder_sees = api.get("/teams/alpha/agents/coder/context").json()["messages"]
    assert any(m["content"].startswith(f"[Answer from bot | Query: {key}]") for m in coder_sees)

    polled = api.get("/teams/alpha/agents/bot/context", after=context["next_after"]).json()
    said = api.post("/teams/alpha/agents/bot/messages", {"content": "I am ready."})
    assert said.status_code == 201 and said.json()["speaker"] == "bot"
    newer = api.get("/teams/alpha/agents/bot/context", after=polled["next_after"]).json()
    assert [m["content"] for m in newer["messages"]] == ["I am ready."]
    assert Turn.objects.filter(agent__name="bot").count() == 0  # never given a model turn

    before = state()
    detail = refused(
        api.post("/teams/alpha/agents/coder/messages", {"content": "Hi"}), 403, state_before=before
    )
    assert "only external agents post messages through the API" in detail


# --- tokens and documents ------------------------------------------------------


def test_tokens_listed_created_and_revoked(api, root_api, agents):
    before = state()
    detail = refused(api.post("/teams/alpha/tokens", {"label": "more"}), 403, state_before=before)
    assert detail.startswith("A team token cannot create tokens")  # a leaked one breeds none
    api = root_api  # a person's account token
    created = api.post("/teams/alpha/tokens", {"label": "bot", "agent": "coder"})
    assert created.status_code == 201
    token = created.json()
    assert token["agent"] == "coder" and token["key"].startswith(token["prefix"])
    assert ApiToken.objects.get(pk=token["id"]).key_hash == ApiToken.hash_key(token["key"])
    listed = api.get("/teams/alpha/tokens").json()
    assert token["id"] in [t["id"] for t in listed] and all("key" not in t for t in listed)
    bound = ApiClient(token["key"])
    assert (
        bound.post("/teams/alpha/agents/reviewer/tools/pass_turn", {"reason": "x"}).status_code
        == 403
    )
    assert api.delete(f"/teams/alpha/tokens/{token['id']}").status_code == 204
    assert bound.get("/teams/alpha").status_code == 401
    before = state()
    refused(api.post("/teams/alpha/tokens", {"agent": "nobody"}), 404, state_before=before)
    refused(api.delete("/teams/alpha/tokens/999999"), 404, state_before=before)


def test_tokens_made_through_the_api_may_expire_and_be_read_only(root_api, team):
    """Issue 22: expiry and read-only scope at creation; the list shows them and the
    last use."""
    made = root_api.post(
        "/teams/alpha/tokens", {"label": "dashboard", "expires_in": "12h", "read_only": True}
    )
    assert made.status_code == 201
    token = made.json()
    assert token["read_only"] is True and token["expires_at"] is not None
    assert token["last_used_at"] is None
    reader = ApiClient(token["key"])
    assert reader.get("/teams/alpha").status_code == 200
    assert reader.post("/teams/alpha/messages", {"content": "Hi."}).status_code == 403
    listed = {t["id"]: t for t in root_api.get("/teams/alpha/tokens").json()}[token["id"]]
    assert listed["read_only"] is True and listed["expires_at"] == token["expires_at"]
    assert listed["last_used_at"] is not None  # used just now
    plain = root_api.post("/teams/alpha/tokens", {"label": "forever"}).json()
    assert (plain["expires_at"], plain["read_only"]) == (None, False)

    before = state()
    for bad in ("soon", "12", "0d", "4000d"):
        refused = root_api.post("/teams/alpha/tokens", {"label": "x", "expires_in": bad})
        assert refused.status_code == 422, bad
        assert refused.json()["detail"][0]["loc"] == ["body", "expires_in"]
    assert state() == before


def test_openapi_and_docs_are_served_without_a_cdn(client):
    schema = client.get("/api/openapi.json")
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "Loom API"
    docs = client.get("/api/docs")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page and "cdn" not in page.lower()


def test_answer_an_approval_request_through_the_api(api, team, messages_api):
    """Approve / Always approve / Deny with a note or edited arguments; a bad
    combination is a 422 and changes nothing."""
    from teams.models import PMRequest
    from tests.helpers import stop_at_approval

    stop_at_approval(team, messages_api)
    request = PMRequest.objects.get(team=team)
    url = f"/teams/{team.slug}/pm-requests/{request.id}/answer"
    listed = api.get(f"/teams/{team.slug}/pm-requests").json()
    shown = listed[0]
    assert shown["kind"] == "approval" and shown["tool"] == "peer_message"
    assert shown["choices"] == ["Approve", "Always approve", "Deny"]
    bad = api.post(url, {"answer": "Deny", "arguments": {"to": "coach", "content": "x"}})
    assert bad.status_code == 422 and "Approve, not Deny" in json.dumps(bad.json())
    unfit = api.post(url, {"answer": "Approve", "arguments": {"content": "x"}})
    assert unfit.status_code == 422 and "do not fit" in json.dumps(unfit.json())
    assert PMRequest.objects.get(pk=request.id).status == "open"
    done = api.post(url, {"answer": "Deny", "note": "No."})
    assert done.status_code == 200
    assert done.json()["answer"] == "Deny" and done.json()["note"] == "No."
    assert api.post(url, {"answer": "Deny"}).status_code == 409


def test_a_tool_that_needs_approval_is_refused_through_the_api(coder_api, team):
    from teams.models import Message, Team

    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    response = coder_api.post(
        f"/teams/{team.slug}/agents/coder/tools/peer_message",
        {"to": "reviewer", "content": "hi"},
    )
    assert response.status_code == 409
    assert "needs the PM's approval" in response.json()["detail"]
    assert not Message.objects.filter(kind=Message.Kind.PEER).exists()
