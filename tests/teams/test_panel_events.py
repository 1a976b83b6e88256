"""The live view's panels follow the team without a reload: each change is published
once, as its declared event, by the service that commits it, and only once committed
(a change rolled back tells nobody)."""

import asyncio
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from teams import services
from teams.conversation import hierarchy, keepers
from teams.errors import InvalidInput
from teams.files import workspace
from teams.integrations import consultations
from teams.lib.catalog import Usage
from teams.live import events
from teams.models import ConsultantProfile, Message
from tests.helpers import make_consultation, make_turn

pytestmark = pytest.mark.django_db(transaction=True)


class Listener:
    """A channel in the team's group of the real channel layer: what a team socket hears."""

    def __init__(self, team):
        self.layer = get_channel_layer()
        self.channel = async_to_sync(self.layer.new_channel)()
        async_to_sync(self.layer.group_add)(events.team_group(team.id), self.channel)

    def heard(self, name: str | None = None) -> list[dict]:
        """Everything sent so far (of one event type when `name` is given)."""

        async def drain():
            got = []
            while True:
                try:
                    got.append(await asyncio.wait_for(self.layer.receive(self.channel), 0.2))
                except TimeoutError:
                    return got

        messages = async_to_sync(drain)()
        return [m for m in messages if name is None or m["type"] == name]


@pytest.fixture
def coder(team):
    return team.agents.get(name="coder")


def test_a_file_written_is_published_with_the_teams_file_count(team, coder):
    ears = Listener(team)
    turn = make_turn(coder, number=3)
    workspace.file_write(
        team=team,
        agent=coder,
        turn=turn,
        path="src/app.py",
        content="print(1)\n",
        writes_this_turn=0,
    )
    workspace.file_write(
        team=team, agent=coder, turn=turn, path="README.md", content="hi", writes_this_turn=1
    )
    heard = ears.heard("file.written")
    assert [m["file"]["path"] for m in heard] == ["src/app.py", "README.md"]
    assert [m["files"] for m in heard] == [1, 2]
    assert heard[0]["file"] | {"updated_at": None} == {
        "path": "src/app.py",
        "size": 9,
        "agent": "coder",
        "turn": 3,
        "writes": 1,
        "updated_at": None,
    }


def test_a_refused_write_publishes_nothing(team, coder):
    ears = Listener(team)
    with pytest.raises(InvalidInput, match="out of the workspace"):
        workspace.file_write(
            team=team, agent=coder, turn=None, path="../x", content="x", writes_this_turn=0
        )
    assert ears.heard("file.written") == []


def test_anchors_pinned_changed_and_unpinned_are_published(team):
    ears = Listener(team)
    services.anchor_save(team=team, key="db", value="PostgreSQL")
    services.anchor_save(team=team, key="db", value="PostgreSQL 16", changed_by="alice")
    services.anchor_delete(team=team, key="db")
    heard = ears.heard()
    saved = [m for m in heard if m["type"] == "anchor.saved"]
    assert [(m["anchor"]["value"], m["anchors"]) for m in saved] == [
        ("PostgreSQL", 1),
        ("PostgreSQL 16", 1),
    ]
    assert saved[0]["anchor"]["source"] == "the PM"
    assert [(m["key"], m["anchors"]) for m in heard if m["type"] == "anchor.deleted"] == [("db", 0)]


def test_an_anchor_saved_in_a_transaction_rolled_back_tells_nobody(team):
    ears = Listener(team)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.anchor_save(team=team, key="db", value="PostgreSQL")
        raise RuntimeError("rolled back")
    assert ears.heard() == []


def test_an_offload_publishes_its_keeper(team, coder):
    lines = [services.message_add(team=team, content=f"line {n}", author=coder) for n in range(3)]
    ears = Listener(team)
    keepers.offload(agent=coder, messages=lines, topic="early talk")
    (heard,) = ears.heard("keeper.created")
    assert heard["keeper"]["agent"] == "coder"
    assert heard["keeper"]["topic"] == "early talk" and heard["keeper"]["messages"] == 3


def test_a_tactic_and_an_action_reach_the_drift_card(team, coder):
    ears = Listener(team)
    hierarchy.agent_declare_intent(agent=coder, trajectory="Ship the parser", tactic="Tests first")
    hierarchy.agent_map_context(agent=coder, level="action", content="Write the tokenizer test")
    heard = ears.heard("agent.intent")
    assert [(m["tactic"], m["action"]) for m in heard] == [
        ("Tests first", ""),
        ("Tests first", "Write the tokenizer test"),
    ]
    assert all(m["agent"] == "coder" and 0 <= m["drift_score"] <= 100 for m in heard)


def test_an_admin_edit_of_the_hierarchy_is_published(team, coder, admin_client):
    ears = Listener(team)
    page = f"/admin/teams/agent/{coder.pk}/change/"
    form = admin_client.get(page).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if k in form.fields and v is not None}
    data["action"] = "Review the lexer"
    admin_client.post(page, data)
    (heard,) = ears.heard("agent.intent")
    assert heard["action"] == "Review the lexer"
    data["role_prompt"] = "Be brief."
    admin_client.post(page, data)
    assert ears.heard("agent.intent") == []  # not a level of the hierarchy


def test_each_consultant_answering_publishes_its_whole_ask(team, coder):
    profiles = [
        ConsultantProfile.objects.create(name=name, model="loom-offline") for name in ("a", "b")
    ]
    batch = uuid.uuid4()
    rows = [
        make_consultation(coder, profile=p, batch=batch, prompt="Plan ok?" if i == 0 else "")
        for i, p in enumerate(profiles)
    ]
    ears = Listener(team)
    output = consultations.PeerOutput.model_validate(
        {
            "answer": "Looks sound.",
            "confidence": 0.8,
            "key_points": ["small steps"],
            "suggested_actions": [],
            "file_references": [],
            "responder": "a",
            "timestamp": "2026-01-01T00:00:00Z",
        }
    )
    consultations.consultation_close(
        consultation=rows[0], model="loom-offline", usage=Usage(), seconds=1.5, output=output
    )
    consultations.consultation_close(
        consultation=rows[1], model="loom-offline", usage=Usage(), seconds=2, error="Timed out."
    )
    first, second = (m["batch"] for m in ears.heard("consultation.closed"))
    assert first["batch"] == second["batch"] == str(batch)
    assert first["prompt"] == "Plan ok?" and first["agent"] == "coder"
    assert [c["status"] for c in first["consultations"]] == ["done", "pending"]
    assert first["consultations"][0]["answer"] == "Looks sound."
    assert [c["status"] for c in second["consultations"]] == ["done", "failed"]
    assert second["consultations"][1]["error"] == "Timed out."
    assert not Message.objects.exists()  # the panel's event, not a message
