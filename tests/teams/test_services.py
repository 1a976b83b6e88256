import pytest
from django.db import IntegrityError, transaction

from teams import selectors, services
from teams.conversation import pm_requests
from teams.errors import Conflict, InvalidInput, NotFound
from teams.models import Agent, Anchor, ApiToken, Message, PMRequest, Team
from tests.helpers import make_team, make_turn


def test_team_create_with_agents_in_rotation_order(team):
    assert team.phase == "refinement"
    assert [a.name for a in team.agents.all()] == ["coach", "researcher", "coder", "reviewer"]
    assert [a.position for a in team.agents.all()] == [0, 1, 2, 3]


def test_team_slug_unique(team):
    with pytest.raises(Conflict, match="is not available"):
        services.team_create(slug="alpha")
    assert Team.objects.count() == 1


@pytest.mark.parametrize("slug", ["", "Has Spaces", "UPPER"])
def test_team_slug_must_be_a_slug(db, slug):
    with pytest.raises(InvalidInput):
        services.team_create(slug=slug)
    assert not Team.objects.exists()


def test_team_needs_phases_and_turn_budget(db):
    with pytest.raises(InvalidInput, match="phase"):
        services.team_create(slug="x", phases=[])
    with pytest.raises(InvalidInput, match="turn budget"):
        services.team_create(slug="x", max_turns=0)


def test_bad_agent_rolls_back_the_whole_team(db):
    with pytest.raises(InvalidInput):
        services.team_create(
            slug="x", agents=[{"name": "ok", "role": "coach"}, {"name": "@no", "role": "coder"}]
        )
    assert not Team.objects.exists()
    assert not Agent.objects.exists()


def test_agent_name_unique_in_team(team):
    with pytest.raises(Conflict, match="already has an agent named 'coder'"):
        services.agent_create(team=team, name="coder", role="tester")
    other = services.team_create(slug="beta")
    assert services.agent_create(team=other, name="coder", role="coder").team == other


@pytest.mark.parametrize("name", ["1abc", "has space", "at@sign", "", "x" * 41, "dot.name"])
def test_agent_name_must_work_as_mention(team, name):
    with pytest.raises(InvalidInput, match="@mention"):
        services.agent_create(team=team, name=name, role="coder")


def test_agent_role_must_be_known(team):
    with pytest.raises(InvalidInput, match="Unknown role"):
        services.agent_create(team=team, name="zed", role="wizard")


def test_anchor_key_unique_and_save_replaces_with_history(team):
    services.anchor_save(team=team, key="language", value="Python", changed_by="coach")
    anchor = services.anchor_save(team=team, key="language", value="Rust", changed_by="pm")
    assert Anchor.objects.filter(team=team).count() == 1
    assert anchor.value == "Rust"
    assert [r.value for r in anchor.revisions.all()] == ["Rust", "Python"]


@pytest.mark.parametrize(
    "key, value", [("", "v"), ("has space", "v"), ("ok", "  "), ("ok", "nul\x00")]
)
def test_anchor_bad_input(team, key, value):
    with pytest.raises(InvalidInput):
        services.anchor_save(team=team, key=key, value=value)
    assert not Anchor.objects.exists()


def test_one_open_pm_request_per_team(team, agents):
    pm_requests.pm_request_open(team=team, question="Which format?", agent=agents["coach"])
    with pytest.raises(Conflict, match="already has an open PM request"):
        pm_requests.pm_request_open(team=team, question="Another?", agent=agents["coach"])
    assert PMRequest.objects.count() == 1


def test_message_add_and_conversation_order(team, agents):
    services.message_add(team=team, content="first", author=agents["coach"])
    services.message_add(team=team, content="private", recipient=agents["coder"], kind="peer")
    services.message_add(team=team, content="second", author_label="pm", kind="pm")
    conversation = selectors.team_conversation(team=team)
    assert [m.content for m in conversation] == ["first", "second"]
    assert [m.content for m in selectors.agent_inbox(agent=agents["coder"])] == ["private"]


def test_message_add_rejects_bad_input(team, agents):
    with pytest.raises(InvalidInput):
        services.message_add(team=team, content="   ")
    with pytest.raises(InvalidInput, match="Unknown message kind"):
        services.message_add(team=team, content="x", kind="shout")
    stranger = services.agent_create(
        team=services.team_create(slug="beta"), name="zed", role="coder"
    )
    with pytest.raises(InvalidInput, match="not in team"):
        services.message_add(team=team, content="x", author=stranger)
    with pytest.raises(InvalidInput, match="content may not contain NUL"):
        services.message_add(team=team, content="a\x00b")
    assert not Message.objects.exists()


def test_text_postgresql_cannot_store_is_refused_everywhere(team, agents):
    with pytest.raises(InvalidInput, match="goal may not contain NUL"):
        services.team_create(slug="gamma", goal="ship\x00")
    with pytest.raises(InvalidInput, match="question may not contain NUL"):
        pm_requests.pm_request_open(team=team, question="Why\x00?", agent=agents["coach"])
    assert not PMRequest.objects.exists()
    with pytest.raises(InvalidInput, match="role_prompt may not contain NUL"):
        services.agent_create(team=team, name="tess", role="tester", role_prompt="\x00\x0b")
    assert not team.agents.filter(name="tess").exists()


def test_api_token_hashed_at_rest(team, agents, superuser, outsider):
    token, raw = services.api_token_create(team=team, label="ci")
    assert raw.startswith(token.prefix)
    assert raw not in (token.key_hash, token.prefix)
    assert len(token.key_hash) == 64
    bound, _ = services.api_token_create(agent=agents["coder"], label="ci")  # labels may repeat
    assert bound.team == team and bound.agent == agents["coder"]
    account, _ = services.api_token_create(user=superuser)
    assert account.team is None and account.user == superuser
    with pytest.raises(InvalidInput, match="not both or neither"):
        services.api_token_create(team=team, user=superuser)
    with pytest.raises(InvalidInput, match="not active staff"):
        services.api_token_create(user=outsider)
    with pytest.raises(InvalidInput, match="not in team"):
        services.api_token_create(team=make_team("gamma"), agent=agents["coder"])
    assert ApiToken.objects.count() == 3


def test_selectors_not_found(team):
    with pytest.raises(NotFound):
        selectors.team_get(slug="nope")
    with pytest.raises(NotFound):
        selectors.agent_get(team=team, name="nope")


class TestDatabaseConstraints:
    """The database itself holds the invariants, whoever writes."""

    def test_agent_name_pattern(self, team):
        with pytest.raises(IntegrityError), transaction.atomic():
            Agent.objects.create(team=team, name="bad name", role="coder")

    def test_agent_name_unique(self, team):
        with pytest.raises(IntegrityError), transaction.atomic():
            Agent.objects.create(team=team, name="coder", role="coder")

    def test_anchor_key_unique(self, team):
        Anchor.objects.create(team=team, key="k", value="1")
        with pytest.raises(IntegrityError), transaction.atomic():
            Anchor.objects.create(team=team, key="k", value="2")

    def test_one_open_pm_request(self, team):
        PMRequest.objects.create(team=team, question="a")
        PMRequest.objects.create(team=team, question="b", status="answered")
        with pytest.raises(IntegrityError), transaction.atomic():
            PMRequest.objects.create(team=team, question="c")

    def test_statuses_are_choices(self, team, agents):
        with pytest.raises(IntegrityError), transaction.atomic():
            Team.objects.filter(pk=team.pk).update(status="sleeping")
        with pytest.raises(IntegrityError), transaction.atomic():
            make_turn(agents["coder"], status="lost")

    def test_one_active_turn_per_agent(self, team, agents):
        make_turn(agents["coder"])
        make_turn(agents["coder"], status="done")
        with pytest.raises(IntegrityError), transaction.atomic():
            make_turn(agents["coder"], status="running")


def test_human_text_is_capped_and_nothing_is_stored(team, agents):
    from teams.conversation import pm_requests
    from teams.models import HUMAN_TEXT_LIMIT

    too_long = "x" * (HUMAN_TEXT_LIMIT + 1)
    with pytest.raises(InvalidInput, match="at most 20,000 are accepted"):
        pm_requests.pm_message_post(team=team, content=too_long)
    with pytest.raises(InvalidInput, match="At most 20000 characters"):
        services.team_create(slug="long", goal=too_long)
    with pytest.raises(InvalidInput, match="At most 20000 characters"):
        services.anchor_save(team=team, key="k", value=too_long)
    with pytest.raises(InvalidInput, match="At most 20000 characters"):
        services.agent_create(team=team, name="verbose", role="coder", role_prompt=too_long)
    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="?")
    with pytest.raises(InvalidInput, match="answer has 20,001 characters"):
        pm_requests.pm_request_answer(request_id=request.id, answer=too_long)
    assert not Message.objects.filter(kind="pm").exists()
    assert not Team.objects.filter(slug="long").exists() and not Anchor.objects.exists()
    pm_requests.pm_message_post(team=team, content="x" * HUMAN_TEXT_LIMIT)  # the limit itself


def test_phase_names_are_bounded_and_clean(db):
    from teams.models import PHASE_NAME_MAX

    for phases in (["x" * (PHASE_NAME_MAX + 1)], ["a\x00b"]):
        with pytest.raises(InvalidInput, match="at most .* characters|may not contain NUL"):
            services.team_create(slug="bad-phases", phases=phases)
    assert not Team.objects.filter(slug="bad-phases").exists()


def test_an_agents_hierarchy_is_capped_like_any_human_text(team, agents):
    from teams.errors import validated
    from teams.models import HUMAN_TEXT_LIMIT

    coder = agents["coder"]
    coder.trajectory = "x" * (HUMAN_TEXT_LIMIT + 1)
    with pytest.raises(InvalidInput, match="At most 20000 characters"):
        validated(coder)


def test_every_service_has_a_caller_besides_the_tests():
    """A write no face, engine, tool or other service calls is dead code that still
    has to be kept correct (services.message_edit was one)."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    source = (root / "teams" / "services.py").read_text()
    names = [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]
    code = [
        path.read_text()
        for package in ("teams", "tools", "loomsite")
        for path in (root / package).rglob("*.py")
        if "migrations" not in path.parts and path.name != "services.py"
    ]
    uncalled = [
        name
        for name in names
        if len(re.findall(rf"\b{name}\b", source)) < 2
        and not any(re.search(rf"\b{name}\b", text) for text in code)
    ]
    assert len(names) > 10 and uncalled == []
