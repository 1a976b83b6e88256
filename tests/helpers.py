"""What tests share besides fixtures: teams, users, live sockets and driving a
conversation."""

import contextlib
import json
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

PASSWORD = "pm-password-1"


FOUR_AGENTS = [
    {"name": "coach", "role": "coach"},
    {"name": "researcher", "role": "researcher"},
    {"name": "coder", "role": "coder"},
    {"name": "reviewer", "role": "reviewer"},
]


def make_team(slug="alpha", **kwargs):
    """The usual team: Alpha, shipping the parser, a coach and three agents."""
    from teams import services

    spec = {"name": slug.capitalize(), "goal": "Ship the parser.", "agents": FOUR_AGENTS}
    return services.team_create(slug=slug, **{**spec, **kwargs})


def make_user(name, *, superuser=False, staff=True, manages=()):
    """A person: a superuser, a staff PM managing `manages`, or (staff=False) a
    logged-in user with no business on the PM's pages."""
    User = get_user_model()
    if superuser:
        return User.objects.create_superuser(name, f"{name}@example.test", PASSWORD)
    user = User.objects.create_user(name, f"{name}@example.test", PASSWORD, is_staff=staff)
    for team in manages:
        team.managers.add(user)
    return user


def client_for(user):
    """A test client logged in as `user`."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


class ApiClient:
    """The REST API as a program calls it: JSON in and out, a Bearer token (or none).

    Each method returns the response; `.json()` reads its body."""

    def __init__(self, token: str | None = None, client=None):
        from django.test import Client

        self.client = client or Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _send(self, method: str, path: str, body=None, /, **params):
        call = getattr(self.client, method)
        if method == "get":
            return call(f"/api{path}", params, headers=self.headers)
        data = None if body is None else json.dumps(body)
        return call(f"/api{path}", data, content_type="application/json", headers=self.headers)

    def get(self, path, /, **params):  # a query may have a `path` too
        return self._send("get", path, **params)

    def post(self, path, body=None):
        return self._send("post", path, {} if body is None else body)

    def patch(self, path, body):
        return self._send("patch", path, body)

    def put(self, path, body):
        return self._send("put", path, body)

    def delete(self, path):
        return self._send("delete", path)


def api_token(**kwargs) -> str:
    """A new API token's key (services.api_token_create's arguments)."""
    from teams import services

    return services.api_token_create(**kwargs)[1]


def socket(user, path):
    """A client of our WebSocket routes, as `user` (the auth middleware's job)."""
    from teams.web.routing import websocket_urlpatterns

    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    return communicator


async def refused_with(communicator) -> int | None:
    """The close code a socket is refused with (accepted, then closed at once), or
    None when it stays open."""
    connected, code = await communicator.connect()
    if not connected:
        return code
    output = await communicator.receive_output(timeout=5)
    return output.get("code") if output["type"] == "websocket.close" else None


async def receive_until(communicator, predicate, limit=30):
    """Events from the socket until one matches; all of them, in order."""
    seen = []
    for _ in range(limit):
        event = await communicator.receive_json_from(timeout=5)
        seen.append(event)
        if predicate(event):
            return seen
    raise AssertionError(f"not seen in {seen}")


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


def key_in(request) -> str:
    """The query id in a fake-API request (what the agent was asked)."""
    return re.search(r"ID: (q-[0-9a-f]+)", request.dump).group(1)


def forward_chain_script():
    """A forwarded question in the four-agent team: the researcher asks the coder,
    the coder forwards to the reviewer with what it knows, the reviewer answers."""
    from tests.fakes.messages_api import text, tool

    return per_agent(
        {
            "coach": [text("Start."), text("Go on.")],
            "researcher": [
                tool(
                    "peer_ask_question", {"question": "How do we sign tokens?", "target": "coder"}
                ),
                text("Waiting."),
                text("Got it."),
            ],
            "coder": [
                lambda r: tool(
                    "peer_forward_question",
                    {
                        "query_id": key_in(r),
                        "target": "reviewer",
                        "enrichment": "Tokens are made in auth.py.",
                    },
                ),
                text("Forwarded."),
            ],
            "reviewer": [
                lambda r: tool(
                    "peer_answer_question", {"query_id": key_in(r), "answer": "HMAC with SHA-256."}
                ),
                text("Done."),
            ],
        }
    )


def state() -> dict:
    """Every row of the teams app (and every team's managers), to show a refused
    request changed nothing. A token's last use is bookkeeping, not state.

    Read with one plain SELECT per table, as the database returns it: the ORM's
    row-to-dict work made this a third of the access tests' time."""
    from django.apps import apps
    from django.db import connection

    from teams.models import Team

    rows = {}
    with connection.cursor() as cursor:
        for model in [*apps.get_app_config("teams").get_models(), Team.managers.through]:
            meta = model._meta
            columns = [f.column for f in meta.concrete_fields if f.column != "last_used_at"]
            quote = connection.ops.quote_name
            cursor.execute(
                f"SELECT {', '.join(map(quote, columns))} FROM {quote(meta.db_table)} "
                f"ORDER BY {quote(meta.pk.column)}"
            )
            rows[meta.db_table] = cursor.fetchall()
    return rows


def price_model(model: str, input_usd="0.4", output_usd="1.6"):
    """A price row for `model` (an id the fake APIs serve that the default table does not
    price): Loom calls no model it cannot price. The default rows are put back first
    when the table is empty (a transactional test's flush empties it), so one new row
    does not leave every other model unpriced."""
    from decimal import Decimal

    from teams.lib import catalog
    from teams.models import ModelPrice

    if not ModelPrice.objects.exists():
        for prefix, (inp, out) in catalog.PRICES.items():
            price = catalog.Price.of(inp, out)
            ModelPrice.objects.create(
                model=prefix,
                input_usd=price.input,
                output_usd=price.output,
                cache_write_usd=price.cache_write,
                cache_read_usd=price.cache_read,
            )
    price = catalog.Price.of(Decimal(input_usd), Decimal(output_usd))
    row, _ = ModelPrice.objects.update_or_create(
        model=model,
        defaults={
            "input_usd": price.input,
            "output_usd": price.output,
            "cache_write_usd": price.cache_write,
            "cache_read_usd": price.cache_read,
        },
    )
    return row


def make_turn(agent, **fields):
    """A turn row of `agent` in its team, with the fields given (the engine's own
    turns are enqueued by teams.run.turns; tests that need a turn in a state make one)."""
    from teams.models import Turn

    return Turn.objects.create(team=fields.pop("team", None) or agent.team, agent=agent, **fields)


def make_consultation(agent, **fields):
    """A consultation row asked by `agent` in its team, with the fields given."""
    from teams.models import Consultation

    return Consultation.objects.create(
        team=fields.pop("team", None) or agent.team, agent=agent, **fields
    )


def furnish(team, agents, *, token_label="old script"):
    """One of each thing the API's paths name, in `team`: the query researcher→coder,
    three chat lines offloaded to a keeper of the coach's, the anchor "db", an open PM
    request of the coach's and a team token. A namespace of query, keeper, request
    and token."""
    from types import SimpleNamespace

    from teams import services
    from teams.conversation import keepers, pm_requests, questions

    query = questions.ask(
        team=team, origin=agents["researcher"], question="Which parser?", target="coder"
    )
    for n in range(3):
        services.message_add(team=team, content=f"We chose the LALR parser, note {n}.")
    offload = keepers.offload(
        agent=agents["coach"], messages=list(team.messages.filter(kind="chat")), topic="parser"
    )
    services.anchor_save(team=team, key="db", value="PostgreSQL 16", changed_by="pm")
    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    token, _ = services.api_token_create(team=team, label=token_label)
    return SimpleNamespace(query=query, keeper=offload.keeper, request=request, token=token)


PEER_CALL = {"to": "reviewer", "content": "check my layout"}


def coder_asks_peer(messages_api, after=()):
    """A fake-API script: the coach speaks; the coder calls peer_message (PEER_CALL,
    saying why), then speaks; `after` are the coder's later replies."""
    from tests.fakes.messages_api import text, tool

    return messages_api(
        per_agent(
            {
                "coach": [text("Start."), text("Go on."), text("Still here.")],
                "researcher": [text("Noted."), text("Noted again.")],
                "coder": [
                    tool("peer_message", PEER_CALL, "toolu_peer", say="The reviewer must see it."),
                    text("Sent my layout."),
                    *after,
                ],
                "reviewer": [text("Fine."), text("Fine again.")],
            }
        )
    )


def stop_at_approval(team, messages_api, after=()):
    """Run the team until the coder's peer_message (set to `ask`) waits for the PM;
    the fake API's record."""
    from teams.models import Team
    from teams.run import team_actions

    Team.objects.filter(pk=team.pk).update(tool_approvals={"peer_message": "ask"})
    team.refresh_from_db()
    api = coder_asks_peer(messages_api, after)
    team_actions.team_start(team=team)
    drain(team)
    return api


# The fake MCP server over stdio (tests/fakes/mcp_stdio.py: a light script whose tools
# mirror the SDK's fake in tests.fakes.mcp_servers), as a command.
FAKE_MCP_COMMAND = [
    sys.executable,
    str(Path(__file__).resolve().parent / "fakes" / "mcp_stdio.py"),
]


def make_mcp_server(team, name="fake", **kwargs):
    """A stdio MCP server of the team running the fake (made as a superuser would)."""
    from teams.integrations import mcp_servers

    spec = {"transport": "stdio", "command": FAKE_MCP_COMMAND, "by_superuser": True}
    return mcp_servers.mcp_server_create(team=team, name=name, **{**spec, **kwargs})


def worker_redis_url() -> str | None:
    """LOOM_TEST_REDIS_URL (None when unset), on a Redis database of this test process's
    own: pytest-xdist's worker gw<n> takes the database the URL names plus n (of Redis's
    16), so the runworker processes two workers start never take each other's wake-ups
    (they listen on the same channel names)."""
    url = os.environ.get("LOOM_TEST_REDIS_URL")
    if not url:
        return None
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(database + worker) % 16}"))


@contextlib.contextmanager
def rows_for_the_module(django_db_blocker, data_dir, **settings):
    """What a module-scoped fixture makes once for the module's tests (a whole demo run
    is seconds of CPU): made in a transaction rolled back when the fixture ends, each
    test's own work in a savepoint inside it (as Django's TestCase.setUpTestData does),
    under the suite's per-test settings (tests/conftest.py) given for the module, plus
    `settings`. Yields a MonkeyPatch undone at the end."""
    import pytest
    from django.db import transaction
    from django.test import override_settings

    with (
        django_db_blocker.unblock(),
        override_settings(LOOM_OFFLINE_DELAY=0, DATA_DIR=data_dir, **settings),
        pytest.MonkeyPatch.context() as monkeypatch,
        transaction.atomic(),
    ):
        yield monkeypatch
        transaction.set_rollback(True)
