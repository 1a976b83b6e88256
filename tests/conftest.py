import os
import sys
import uuid

import pytest
from channels.testing import WebsocketCommunicator

from tests import template_database
from tests.helpers import make_team, make_user

# A socket's answer may take over the test communicator's default second on a loaded
# machine (make test runs the SQLite and PostgreSQL suites side by side on 2 cores):
# waits for what must come get 10 s; receive_nothing keeps its short wait.
SOCKET_WAIT = 10
for _method in ("connect", "receive_from", "receive_json_from"):
    getattr(WebsocketCommunicator, _method).__defaults__ = (SOCKET_WAIT,)
WebsocketCommunicator.disconnect.__defaults__ = (1000, SOCKET_WAIT)


# What a test that touches the database asks for (pytest-django refuses it otherwise).
DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "live_server",
}


def pytest_addoption(parser):
    parser.addoption(
        "--database-tests-only",
        action="store_true",
        help="run only the tests that use the database (make test's PostgreSQL run: "
        "the others ran on SQLite already and do not depend on the database)",
    )


def pytest_configure(config):
    # The controller of xdist workers names the run (the workers learn it as
    # workerinput["testrunuid"]): the name of its template database.
    if getattr(config.option, "numprocesses", None) and config.option.testrunuid is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        template_database.template_remove(run_id=config.option.testrunuid)


if os.environ.get("PYTEST_XDIST_WORKER"):
    # In an xdist worker: pytest-django's database set-up, with the run's workers
    # sharing one migration (tests/template_database.py). A plain run keeps
    # pytest-django's own (and its --reuse-db and --nomigrations).

    @pytest.fixture(scope="session")
    def django_db_setup(
        request, django_test_environment, django_db_blocker, django_db_modify_db_settings
    ):
        run_id = os.environ["PYTEST_XDIST_TESTRUNUID"]
        with django_db_blocker.unblock():
            config = template_database.setup_from_template(run_id=run_id, verbosity=0)
        yield
        with django_db_blocker.unblock():
            try:
                template_database.teardown(config)
            except Exception as exc:  # as pytest-django's: a warning, not an error
                request.node.warn(
                    pytest.PytestWarning(f"Error when trying to teardown test databases: {exc!r}")
                )


def uses_database(item) -> bool:
    if item.get_closest_marker("django_db") is not None:
        return True
    return bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


# What makes a module's tests long: a site in a child process, a browser, Schemathesis's
# every operation (one item of minutes). (The fault tests' layout is long too but keeps
# its place: first, it ran beside the browser tests, and its 3 s leases lapsed on the
# loaded machine.)
LONG_FIXTURES = {"start_site", "chromium", "api_schema"}


def is_long(items) -> bool:
    return any(LONG_FIXTURES.intersection(item.fixturenames) for item in items)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering for its fixtures
def pytest_collection_modifyitems(config, items):
    if config.getoption("--database-tests-only"):
        kept = [item for item in items if uses_database(item)]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if not uses_database(item)])
            items[:] = kept
    # The long modules first (each keeps its order): pytest-xdist's workers take whole
    # modules (--dist loadfile) in this order, so no long module starts last while the
    # other worker sits idle. A plain run keeps the order too (a stable sort).
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    long = {module for module, found in modules.items() if is_long(found)}
    items.sort(key=lambda item: item.nodeid.split("::", 1)[0] not in long)


@pytest.fixture(autouse=True)
def fast_offline_model(settings):
    settings.LOOM_OFFLINE_DELAY = 0


@pytest.fixture(autouse=True)
def private_data_dir(settings, tmp_path_factory):
    """Each test's team workspaces ($LOOM_DATA_DIR/workspaces/<slug>) in a folder of its
    own: files one test writes are never seen by the next."""
    settings.DATA_DIR = tmp_path_factory.mktemp("data")
    return settings.DATA_DIR


@pytest.fixture(autouse=True)
def names(monkeypatch):
    """The outbound guard's name lookups (teams.lib.outbound.resolve) answered here: no
    test looks a name up on the network. `localhost` is 127.0.0.1; a test adds the names
    it needs (`names["hooks.example.test"] = ["10.0.0.5"]`); any other name does not
    resolve."""
    import socket

    from teams.lib import outbound

    table = {"localhost": ["127.0.0.1"]}

    def resolve(host: str, port: int) -> list[str]:
        found = table.get(host.lower().removesuffix("."))
        if found is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return list(found)

    monkeypatch.setattr(outbound, "resolve", resolve)
    return table


@pytest.fixture(autouse=True)
def endpoint_table_fresh():
    """The endpoint table is read again in each test (a rolled-back row is gone)."""
    from teams.lib import catalog, endpoints

    endpoints.endpoints_invalidate()
    catalog.prices_invalidate()
    yield
    endpoints.endpoints_invalidate()
    catalog.prices_invalidate()


@pytest.fixture
def openai_api(db, settings):
    """Start a fake Chat Completions server with a script; `start(script)` returns it,
    served as the `local` endpoint `fake` (its models `fake/...` are free unless
    priced). The real openai SDK talks to it."""
    from teams.models import ModelEndpoint
    from tests.fakes.openai_api import FakeOpenAI

    servers = []
    settings.LOOM_MODEL_MAX_RETRIES = 2

    def start(script, name="fake", key_env="", local=True):
        api = FakeOpenAI(script).__enter__()
        servers.append(api)
        ModelEndpoint.objects.update_or_create(
            name=name,
            defaults={"api": "openai", "base_url": api.url, "key_env": key_env, "local": local},
        )
        return api

    yield start
    for api in servers:
        api.__exit__(None, None, None)


@pytest.fixture
def loopback_allowed(settings):
    """The outbound guard lets URLs lead to loopback (the suite's fake receivers and
    vendor APIs listen on 127.0.0.1), as LOOM_OUTBOUND_ALLOW_PRIVATE=1 does."""
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = True


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


@pytest.fixture(autouse=True)
def mcp_connections_closed():
    """MCP connections a test opened are closed after it (the runtime is per process)."""
    yield
    client = sys.modules.get("teams.engine.mcp_client")
    if client is not None:
        client.close_all()


@pytest.fixture
def mcp_http(loopback_allowed):
    """The fake MCP server over streamable HTTP, on a loopback port (which the outbound
    guard then allows)."""
    from tests.fakes.mcp_servers import McpHttpServer

    with McpHttpServer() as server:
        yield server


@pytest.fixture(scope="session")
def sandbox_toolchain(tmp_path_factory):
    """One toolchain for the run's sandboxed commands (teams.files.toolchain), not one
    per test's data folder."""
    return tmp_path_factory.mktemp("sandbox") / "toolchain"


@pytest.fixture
def sandbox_ready(monkeypatch, sandbox_toolchain):
    """Commands can run in a bwrap sandbox here; the test is skipped, saying why, where
    bwrap cannot run (not Linux, user namespaces refused, root without a pids cgroup)."""
    from teams.files import sandbox, toolchain

    monkeypatch.setattr(toolchain, "toolchain_folder", lambda: sandbox_toolchain)
    sandbox.forget()
    reason = sandbox.sandbox_unavailable()
    if reason:
        pytest.skip(f"no sandbox on this host: {reason}")
    yield
    sandbox.forget()
