"""An agent's token sees only its agent (keepers, enrichments), and every tool it runs
goes through the team's state table (issue 22)."""

import pytest

from teams import services
from teams.conversation import keepers, questions
from teams.errors import Conflict
from teams.integrations import webhooks
from teams.models import Anchor, Message, Query, Team, WebhookDelivery
from teams.run import team_actions
from tests.helpers import ApiClient, api_token

pytestmark = pytest.mark.django_db

SECRET = "The staging password is tangerine-42."


def tool_path(name, agent="coder"):
    return f"/teams/alpha/agents/{agent}/tools/{name}"


@pytest.fixture
def coach_api(agents):
    return ApiClient(api_token(agent=agents["coach"], label="coach program"))


@pytest.fixture
def researchers_keeper(team, agents):
    """The researcher offloads its context: a line of the team conversation and a
    peer message only the researcher was sent."""
    public = services.message_add(
        team=team, content="We keep the staging server in Paris.", author=agents["coach"]
    )
    private = services.message_add(
        team=team,
        content=SECRET,
        kind=Message.Kind.PEER,
        author=agents["coach"],
        recipient=agents["researcher"],
    )
    return keepers.offload(
        agent=agents["researcher"], messages=[public, private], topic="staging"
    ).keeper


class TestKeepers:
    def test_a_bound_token_reads_no_other_agents_inbox_line_in_a_keeper(
        self, researchers_keeper, coder_api, api, team, agents
    ):
        (listed,) = coder_api.get("/teams/alpha/keepers").json()
        assert (listed["id"], listed["entries"]) == (researchers_keeper.id, 1)
        shown = coder_api.get(f"/teams/alpha/keepers/{researchers_keeper.id}").json()
        assert [e["content"] for e in shown["entries"]] == ["We keep the staging server in Paris."]
        # A keeper of nothing but another agent's inbox lines is not there at all.
        only_private = keepers.offload(
            agent=agents["researcher"],
            messages=list(Message.objects.filter(content=SECRET)),
            topic="vault",
        ).keeper
        assert coder_api.get(f"/teams/alpha/keepers/{only_private.id}").status_code == 404
        assert only_private.id not in [
            k["id"] for k in coder_api.get("/teams/alpha/keepers").json()
        ]
        # A team token not bound to an agent (and a PM) reads everything.
        entries = api.get(f"/teams/alpha/keepers/{researchers_keeper.id}").json()["entries"]
        assert SECRET in [e["content"] for e in entries]
        assert len(api.get("/teams/alpha/keepers").json()) == 2

    def test_a_bound_tokens_search_skips_another_agents_inbox_lines(
        self, researchers_keeper, coder_api, api
    ):
        body = {"query": "staging", "mode": "raw"}
        found = coder_api.post("/teams/alpha/keepers/retrieve", body).json()["result"]
        assert "Paris" in found  # the team conversation's line: any agent may read it
        assert "tangerine" not in found
        assert "tangerine" in api.post("/teams/alpha/keepers/retrieve", body).json()["result"]
        # The tool, through the API or the agent loop, searches the same way.
        tool = coder_api.post(tool_path("context_retrieve"), body).json()
        assert "Paris" in tool["result"] and "tangerine" not in tool["result"]
        asked = coder_api.post(
            tool_path("context_retrieve"),
            {"query": "password tangerine", "keeper_id": researchers_keeper.id, "mode": "raw"},
        ).json()
        assert asked["result"].startswith("No relevant context found")

    def test_the_agent_that_offloaded_still_finds_its_own_lines(self, researchers_keeper, agents):
        researcher_api = ApiClient(api_token(agent=agents["researcher"]))
        found = researcher_api.post(
            tool_path("context_retrieve", "researcher"), {"query": "tangerine", "mode": "raw"}
        ).json()["result"]
        assert SECRET in found

    def test_query_enrichments_carry_no_agents_inbox_line(
        self, researchers_keeper, coder_api, team, agents
    ):
        query = questions.ask(
            team=team,
            origin=agents["coder"],
            question="What is the staging password, tangerine or not?",
            target="reviewer",
        )
        assert "tangerine" not in " ".join(Query.objects.get(pk=query.pk).enrichments)
        shown = coder_api.get(f"/teams/alpha/queries/{query.key}").json()
        assert "tangerine-42" not in str(shown["enrichments"])
        delivered = Message.objects.get(query=query, kind=Message.Kind.QUERY)
        assert "tangerine-42" not in delivered.content


class TestQueries:
    def test_only_the_target_answers_a_targeted_query(self, team, agents, api):
        query = questions.ask(
            team=team, origin=agents["researcher"], question="Which parser?", target="coder"
        )
        reviewer = ApiClient(api_token(agent=agents["reviewer"]))
        refused = reviewer.post(
            tool_path("peer_answer_question", "reviewer"),
            {"query_id": query.key, "answer": "Whatever."},
        ).json()
        assert refused["is_error"] and refused["result"].startswith("Error: Query")
        assert "only an agent it was put to may answer it" in refused["result"]
        query.refresh_from_db()
        assert query.status == Query.Status.OPEN and query.answered_by is None
        assert not Message.objects.filter(kind=Message.Kind.ANSWER).exists()
        # The target still can.
        coder = ApiClient(api_token(agent=agents["coder"]))
        done = coder.post(
            tool_path("peer_answer_question"), {"query_id": query.key, "answer": "LALR."}
        ).json()
        assert done["result"] == f"Answer delivered for query {query.key}."

    def test_the_agent_a_query_was_forwarded_to_may_answer_it(self, team, agents):
        query = questions.ask(
            team=team, origin=agents["researcher"], question="Which parser?", target="coder"
        )
        questions.forward(
            team=team, key=query.key, forwarder=agents["coder"], target="reviewer",
            enrichment="The reviewer chose it.",
        )  # fmt: skip
        reviewer = ApiClient(api_token(agent=agents["reviewer"]))
        done = reviewer.post(
            tool_path("peer_answer_question", "reviewer"),
            {"query_id": query.key, "answer": "LALR."},
        ).json()
        assert not done["is_error"]
        query.refresh_from_db()
        assert query.answered_by == agents["reviewer"]

    def test_nobody_else_forwards_a_targeted_query(self, team, agents):
        query = questions.ask(
            team=team, origin=agents["researcher"], question="Which parser?", target="coder"
        )
        reviewer = ApiClient(api_token(agent=agents["reviewer"]))
        refused = reviewer.post(
            tool_path("peer_forward_question", "reviewer"),
            {"query_id": query.key, "enrichment": "No idea.", "target": "coach"},
        ).json()
        assert refused["is_error"] and "may forward it" in refused["result"]
        assert Message.objects.filter(query=query, kind=Message.Kind.QUERY).count() == 1


class TestAnchors:
    def test_an_agent_cannot_overwrite_an_anchor_the_pm_pinned(self, team, coder_api, api):
        services.anchor_save(team=team, key="db", value="PostgreSQL 16", changed_by="pm")
        refused = coder_api.post(tool_path("save_anchor"), {"key": "db", "value": "SQLite"}).json()
        assert refused["is_error"]
        assert "pinned by the PM" in refused["result"] and "only a person" in refused["result"]
        assert Anchor.objects.get(team=team, key="db").value == "PostgreSQL 16"
        # An agent's own anchor it may change; the PM may change the PM's.
        coder_api.post(tool_path("save_anchor"), {"key": "port", "value": "8000"})
        again = coder_api.post(tool_path("save_anchor"), {"key": "port", "value": "8001"}).json()
        assert not again["is_error"]
        assert api.put("/teams/alpha/anchors/db", {"value": "SQLite"}).status_code == 200


class TestTeamState:
    def finish(self, team, agents):
        team = Team.objects.get(pk=team.pk)
        team_actions.team_start(team=team)
        while team.status != Team.Status.DONE:
            team = team_actions.phase_complete(team=team, agent=agents["coach"], summary="Ok.")
        return team

    def test_a_finished_team_refuses_a_second_phase_end_and_webhook(
        self, team, agents, coach_api, loopback_allowed
    ):
        webhooks.webhook_create(team=team, url="http://127.0.0.1:9/loom", events=["team.done"])
        self.finish(team, agents)
        summaries = Message.objects.filter(kind=Message.Kind.PHASE_SUMMARY).count()
        response = coach_api.post(tool_path("signal_phase_complete", "coach"), {"summary": "x"})
        assert response.status_code == 409
        assert response.json()["detail"].startswith("Team alpha is finished; ")
        assert Message.objects.filter(kind=Message.Kind.PHASE_SUMMARY).count() == summaries
        assert WebhookDelivery.objects.filter(event="team.done").count() == 1
        # The domain refuses it as well, whoever calls it.
        with pytest.raises(Conflict, match="is finished"):
            team_actions.phase_complete(team=team, agent=agents["coach"], summary="Forged.")
        assert WebhookDelivery.objects.filter(event="team.done").count() == 1

    def test_a_paused_team_does_not_finish_its_phase(self, team, agents, coach_api):
        team_actions.team_start(team=team)
        team_actions.team_pause(team=Team.objects.get(pk=team.pk))
        response = coach_api.post(tool_path("signal_phase_complete", "coach"), {"summary": "x"})
        assert response.status_code == 409
        assert (
            "is paused; signal_phase_complete works only while the team is running"
            in (response.json()["detail"])
        )
        team.refresh_from_db()
        assert (team.status, team.phase_index) == ("paused", 0)
        assert not Message.objects.filter(kind=Message.Kind.PHASE_SUMMARY).exists()

    def test_a_finished_team_is_only_read(self, team, agents, coder_api):
        self.finish(team, agents)
        before = Message.objects.count()
        response = coder_api.post(tool_path("peer_message"), {"to": "coach", "content": "Hi"})
        assert response.status_code == 409
        assert "finished" in response.json()["detail"]
        assert Message.objects.count() == before
        # Reading still works.
        listed = coder_api.post(tool_path("peer_discovery"), {}).json()
        assert not listed["is_error"] and "coach (coach)" in listed["result"]


def test_an_automatic_keepers_topic_names_no_inbox_word(researchers_keeper):
    lines = [e.message for e in researchers_keeper.entries.order_by("position")]
    assert "tangerine" not in keepers.topic_of(lines)
    assert "staging" in keepers.topic_of(lines)
