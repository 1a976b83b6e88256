import pytest

from tests.helpers import make_team, make_user


@pytest.fixture(autouse=True)
def fast_offline_model(settings):
    settings.LOOM_OFFLINE_DELAY = 0


@pytest.fixture(autouse=True)
def private_data_dir(settings, tmp_path_factory):
    """Each test's team workspaces ($LOOM_DATA_DIR/workspaces/<slug>) in a folder of its
    own: files one test writes are never seen by the next."""
    settings.DATA_DIR = tmp_path_factory.mktemp("data")
    return settings.DATA_DIR


@pytest.fixture
def team(db):
    return make_team("alpha")


@pytest.fixture
def other_team(db):
    """Beta: a second team with only a coach, for what one team must not see of another."""
    return make_team("beta", goal="", agents=[{"name": "coach", "role": "coach"}])


# --- personas: who uses Loom ---------------------------------------------------


@pytest.fixture
def superuser(db):
    """Sees and may do everything."""
    return make_user("root", superuser=True)


@pytest.fixture
def pm(team):
    """A staff PM who manages the `team` (alpha) only."""
    return make_user("alice", manages=[team])


@pytest.fixture
def other_pm(other_team):
    """A staff PM of another team (beta): alpha must stay invisible to them."""
    return make_user("bob", manages=[other_team])


@pytest.fixture
def outsider(team):
    """Logged in, listed as alpha's manager, but not staff: no PM pages for them."""
    return make_user("eve", staff=False, manages=[team])


@pytest.fixture
def agents(team):
    return {agent.name: agent for agent in team.agents.all()}


@pytest.fixture
def messages_api(settings):
    """Start a fake Messages API with a script (and its options, e.g. count_tokens);
    the real anthropic client talks to it."""
    from tests.fakes.messages_api import FakeMessagesAPI

    servers = []

    def start(script, **options):
        api = FakeMessagesAPI(script, **options).__enter__()
        servers.append(api)
        settings.ANTHROPIC_API_KEY = "sk-test-key"
        settings.ANTHROPIC_BASE_URL = api.url
        settings.LOOM_MODEL_MAX_RETRIES = 2
        return api

    yield start
    for api in servers:
        api.__exit__(None, None, None)


@pytest.fixture
def ctx_for(team, agents):
    from teams.engine.loop import tool_context

    def make(name, messages=None, turn=None):
        return tool_context(team=team, agent=agents[name], turn=turn, messages=messages)

    return make
