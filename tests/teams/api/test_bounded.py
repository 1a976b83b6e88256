"""Issue 22 through the API: every text a tool or the API accepts is capped (422,
nothing stored), pages of texts are bounded, a question stored once still reads whole,
and a tool that may spend is refused over a cost budget (409) with the budget request."""

from decimal import Decimal

import pytest

from teams import services
from teams.api.paging import PAGE_CHARS
from teams.conversation import questions
from teams.live import events
from teams.models import (
    HUMAN_TEXT_LIMIT,
    ConsultantProfile,
    Consultation,
    Message,
    PMRequest,
    Query,
    Team,
)


def test_the_live_event_and_the_context_page_show_the_whole_question(
    team, agents, api, monkeypatch
):
    told = []
    publish = events.publish
    monkeypatch.setattr(events, "publish", lambda e, **kw: (told.append(e), publish(e, **kw)))
    query = questions.ask(team=team, origin=agents["coder"], question="Which parser?")
    whole = questions.query_text(query)
    (stored,) = Message.objects.filter(query=query, recipient=agents["reviewer"])
    assert stored.content == f"[Query from coder | ID: {query.key}]"
    created = [e.message.content for e in told if isinstance(e, events.MessageCreated)]
    assert created == [whole] * 3
    page = api.get("/teams/alpha/agents/reviewer/context").json()
    (shown,) = [m["content"] for m in page["messages"] if m["query"] == query.key]
    assert shown == whole


def test_the_consultations_list_shows_each_its_request(api, team):
    for name in ("architect", "critic"):
        team.consultants.add(ConsultantProfile.objects.create(name=name, model="loom-offline"))
    api.post("/teams/alpha/agents/coder/tools/ask_multi", {"prompt": "Which?", "context": "Hm."})
    listed = api.get("/teams/alpha/consultations").json()
    assert [c["prompt"] for c in listed] == ["Which?", "Which?"]


# --- caps: a tool's text over its cap is a 422 through the API, nothing stored ----------


@pytest.mark.parametrize(
    ("tool", "field", "limit", "body"),
    [
        ("peer_ask_question", "question", HUMAN_TEXT_LIMIT, {}),
        ("peer_ask_question", "context", HUMAN_TEXT_LIMIT, {"question": "Which?"}),
        ("peer_message", "content", HUMAN_TEXT_LIMIT, {"to": "reviewer"}),
        ("ask_multi", "prompt", HUMAN_TEXT_LIMIT, {}),
        ("file_write", "content", 200 * 1024, {"path": "big.txt"}),
    ],
)
def test_a_tool_text_over_its_cap_is_a_422_and_nothing_is_stored(
    api, team, tool, field, limit, body
):
    before = (Message.objects.count(), Query.objects.count(), Consultation.objects.count())
    over = api.post(f"/teams/alpha/agents/coder/tools/{tool}", {**body, field: "x" * (limit + 1)})
    assert over.status_code == 422, over.content
    assert field in str(over.json()["detail"])
    assert (Message.objects.count(), Query.objects.count(), Consultation.objects.count()) == before


def test_every_text_an_api_body_accepts_has_a_cap(api):
    """Each string of every request body (tools' and the API's own) has a maxLength,
    a pattern or an enum: none is unbounded."""
    schema = api.get("/openapi.json").json()
    components = schema["components"]["schemas"]
    unbounded = []

    def walk(node, where):
        if isinstance(node, dict):
            if any(option.get("type") == "number" for option in node.get("anyOf", [])):
                return  # a decimal, as a number or its digits: bounded by max_digits
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[-1]
                if name not in seen:
                    seen.add(name)
                    walk(components[name], name)
                return
            if node.get("type") == "string" and not (
                {"maxLength", "pattern", "enum", "format", "const"} & set(node)
            ):
                unbounded.append(where)
            if node.get("type") == "array" and "maxItems" not in node:
                unbounded.append(f"{where}[]")
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    seen: set[str] = set()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                walk(body["schema"], f"{method} {path}")
    assert unbounded == []


# --- bounded pages -------------------------------------------------------------------


def test_the_context_page_is_bounded_in_characters(api, team, agents):
    big = "y" * HUMAN_TEXT_LIMIT
    for _ in range(80):  # 1.6 million characters in the reviewer's inbox
        services.message_add(
            team=team,
            content=big,
            kind=Message.Kind.PEER,
            author=agents["coder"],
            recipient=agents["reviewer"],
        )
    first = api.get("/teams/alpha/agents/reviewer/context", limit=500)
    page = first.json()
    assert len(first.content) < PAGE_CHARS + 2 * HUMAN_TEXT_LIMIT
    assert page["has_more"] is True
    rest = api.get(
        "/teams/alpha/agents/reviewer/context", limit=500, after=page["next_after"]
    ).json()
    big_ones = [m for m in page["messages"] + rest["messages"] if m["content"] == big]
    assert len(big_ones) == 80  # nothing lost: the next page has the rest


# --- the cost budget ---------------------------------------------------------------


def test_a_costing_tool_through_the_api_is_refused_over_the_cost_budget(api, team):
    team.consultants.add(ConsultantProfile.objects.create(name="critic", model="loom-offline"))
    Team.objects.filter(pk=team.pk).update(
        max_cost_usd=Decimal("1.00"), spent_usd=Decimal("1.00"), status=Team.Status.RUNNING
    )
    for _ in range(2):
        refused = api.post("/teams/alpha/agents/coder/tools/ask_multi", {"prompt": "Which?"})
        assert refused.status_code == 409, refused.content
        assert refused.json()["detail"].startswith("Cost budget reached ($1.00 of $1.00).")
        assert "ask_multi may call a model, so it was not run." in refused.json()["detail"]
    assert not Consultation.objects.exists()
    (request,) = PMRequest.objects.filter(team=team, kind=PMRequest.Kind.BUDGET)
    assert request.status == "open" and request.agent is None
    assert Team.objects.get(pk=team.pk).status == Team.Status.PAUSED
    # A tool that spends nothing still runs.
    listed = api.post("/teams/alpha/agents/coder/tools/peer_discovery", {})
    assert listed.status_code == 200
