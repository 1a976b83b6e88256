"""`manage.py serve` exporting traces over OTLP/HTTP to a receiver in the test: a
team's turns arrive as spans with the GenAI conventions' names, in the trace of the
API request that started them."""

import json
import time
import urllib.request

import pytest

from tests import live_site
from tests.fakes.otlp_receiver import OtlpReceiver
from tests.helpers import api_token, make_team, make_user

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


@pytest.fixture
def sites(transactional_db, request):
    sites = live_site.Sites(request.node.name)
    yield sites
    sites.close()


def test_serve_exports_a_teams_turns_as_genai_spans(sites):
    team = make_team("alpha")
    root = make_user("root", superuser=True)
    token = api_token(user=root, label="trace e2e")
    with OtlpReceiver() as receiver:
        site = sites.start(
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            OTEL_SERVICE_NAME="loom-e2e",
            LOOM_OFFLINE_DELAY="0",
        )
        request = urllib.request.Request(
            f"{site.url}/api/teams/{team.slug}/start",
            data=b"{}",
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01",
            },
        )
        with OPENER.open(request, timeout=10) as response:
            assert response.status == 200, response.read()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with receiver.lock:
                names = {s.name for s in receiver.spans}
            if {"invoke_agent coach", "invoke_agent researcher"} <= names:
                break
            time.sleep(0.2)
        with receiver.lock:
            spans = list(receiver.spans)
    assert "invoke_agent coach" in {s.name for s in spans}, (
        [s.name for s in spans],
        site.log()[-3000:],
    )
    assert set(receiver.content_types) == {"application/x-protobuf"}
    coach = next(s for s in spans if s.name == "invoke_agent coach")
    assert coach.service == "loom-e2e"
    assert (coach.trace_id, coach.parent_span_id) == (TRACE_ID, PARENT_ID)
    assert coach.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert coach.attributes["gen_ai.agent.name"] == "coach"
    assert coach.attributes["loom.team"] == "alpha"
    assert coach.attributes["loom.turn.attempt"] == 1
    chats = [s for s in spans if s.parent_span_id == coach.span_id and s.name.startswith("chat ")]
    assert chats and chats[0].name == "chat loom-offline"
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert chats[0].attributes["gen_ai.provider.name"] == "loom.offline"
    assert chats[0].attributes["gen_ai.usage.output_tokens"] > 0
    # The turn the worker queued after the coach's is in the same trace.
    researcher = next(s for s in spans if s.name == "invoke_agent researcher")
    assert researcher.trace_id == TRACE_ID
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    for span in tools:
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.type"] == "function"
    assert "sk-" not in json.dumps([s.attributes for s in spans], default=str)
