import pytest

from teams import services


@pytest.fixture(autouse=True)
def fast_offline_model(settings):
    settings.LOOM_OFFLINE_DELAY = 0


@pytest.fixture
def team(db):
    return services.team_create(
        slug="alpha",
        name="Alpha",
        goal="Ship the parser.",
        agents=[
            {"name": "coach", "role": "coach"},
            {"name": "researcher", "role": "researcher"},
            {"name": "coder", "role": "coder"},
            {"name": "reviewer", "role": "reviewer"},
        ],
    )


@pytest.fixture
def agents(team):
    return {agent.name: agent for agent in team.agents.all()}


@pytest.fixture
def messages_api(settings):
    """Start a fake Messages API with a script; the real anthropic client talks to it."""
    from tests.fakes.messages_api import FakeMessagesAPI

    servers = []

    def start(script):
        api = FakeMessagesAPI(script).__enter__()
        servers.append(api)
        settings.ANTHROPIC_API_KEY = "sk-test-key"
        settings.ANTHROPIC_BASE_URL = api.url
        settings.LOOM_MODEL_MAX_RETRIES = 2
        return api

    yield start
    for api in servers:
        api.__exit__(None, None, None)


def drain(team, worker="test-worker", limit=50):
    """Run queued turns of the team one by one, as a worker would, until none is left."""
    from teams.engine import loop
    from teams.models import Turn

    ran = []
    for _ in range(limit):
        turn = Turn.objects.filter(team=team, status=Turn.Status.QUEUED).order_by("id").first()
        if turn is None:
            break
        ran.append(loop.run_turn(turn.id, worker))
    return ran


def per_agent(scripts):
    """A fake-API script serving each agent its own replies in order, picked by the
    name in the system prompt. An item may be a callable taking the request."""

    def reply(request):
        item = scripts[request.agent].pop(0)
        return item(request) if callable(item) else item

    return reply


@pytest.fixture
def ctx_for(team, agents):
    from teams.engine.loop import tool_context

    def make(name, messages=None, turn=None):
        return tool_context(team=team, agent=agents[name], turn=turn, messages=messages)

    return make
