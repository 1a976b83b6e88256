"""Who calls the API in these tests: tokens for each persona, and a team with a row
behind every path parameter (a query, a keeper, an anchor, a PM request, a token)."""

import pytest
from django.core.cache import cache

from teams.files import workspace
from tests.helpers import ApiClient, api_token, furnish


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    """Rate-limit history lives in the cache: each test starts with none."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def alpha_key(team):
    """A team token of alpha: everything a PM may do there, and acting as any agent."""
    return api_token(team=team, label="alpha program")


@pytest.fixture
def api(alpha_key):
    return ApiClient(alpha_key)


@pytest.fixture
def coder_api(agents):
    """A token of alpha bound to its coder: acts as the coder only."""
    return ApiClient(api_token(agent=agents["coder"], label="coder program"))


@pytest.fixture
def beta_api(other_team):
    """Another team's token: alpha must be as absent as a team that does not exist."""
    return ApiClient(api_token(team=other_team))


@pytest.fixture
def root_api(superuser):
    """An account token of a superuser."""
    return ApiClient(api_token(user=superuser, label="root's scripts"))


@pytest.fixture
def furnished(team, agents):
    """Alpha with one of each thing the paths name: the query researcher→coder
    (key in .query.key), a keeper of the coach's, the anchor "db", an open PM
    request, a token ("old script") and the coder's file notes.md in the workspace."""
    furnished = furnish(team, agents)
    workspace.file_write(
        team=team,
        agent=agents["coder"],
        turn=None,
        path="notes.md",
        content="# Notes\nThe parser is LALR.\n",
        writes_this_turn=0,
    )
    # The MCP server the paths' {name} names (consultants' paths name "critic" too).
    from teams.integrations import mcp_servers

    mcp_servers.mcp_server_create(
        team=team, name="critic", transport="http", url="https://mcp.example.test/mcp"
    )
    # An eval run (a superuser reads every one) for /evals/{run_id}.
    from teams.models import EvalRun

    furnished.eval_run = EvalRun.objects.create(suite_name="furnished", suite={})
    # ...and the model endpoint they name.
    from teams.models import ModelEndpoint

    ModelEndpoint.objects.create(
        name="critic", api="openai", base_url="http://127.0.0.1:9/v1", local=True
    )
    return furnished
