"""The ASGI application: WebSockets only from this site's own pages (scheme, host
and port), and static paths that climb out of the static folders are a 404."""

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator, WebsocketCommunicator

from loomsite.asgi import application
from tests.helpers import make_team

pytestmark = pytest.mark.django_db(transaction=True)

DENIED = (False, 1000)  # closed before the handshake, by the origin check
REFUSED_BY_CONSUMER = (False, 4403)  # the origin check passed; anonymous is refused


async def open_socket(origin, host="127.0.0.1:8000", path="/ws/teams/alpha/", extra=()):
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    communicator = WebsocketCommunicator(application, path, headers=[*headers, *extra])
    result = await communicator.connect()
    if result[0]:  # accepted: the consumer may still refuse it with a close code
        output = await communicator.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            result = (False, output.get("code"))
    await communicator.disconnect()
    return result


@pytest.fixture
def alpha(transactional_db):
    return make_team()


@pytest.mark.parametrize(
    "origin",
    [
        "http://127.0.0.1:9999",  # another app on the same machine
        "http://localhost:8000",  # an allowed host name, but not this page's origin
        "https://127.0.0.1:8000",  # another scheme
        "http://127.0.0.1",  # port 80
        "http://evil.example:8000",
        "null",
        "",
        None,  # no Origin at all
    ],
)
async def test_a_socket_from_another_origin_is_refused(alpha, origin):
    assert await open_socket(origin) == DENIED


async def test_a_socket_from_the_pages_own_origin_reaches_the_consumer(alpha):
    assert await open_socket("http://127.0.0.1:8000") == REFUSED_BY_CONSUMER
    assert await open_socket("http://localhost:8000", host="localhost:8000") == (
        REFUSED_BY_CONSUMER
    )
    assert await open_socket("http://127.0.0.1", host="127.0.0.1") == REFUSED_BY_CONSUMER
    assert await open_socket("http://127.0.0.1:8000", path="/ws/pm/") == REFUSED_BY_CONSUMER


async def test_the_host_must_be_an_allowed_host(alpha):
    """A page of a host name pointed at us (DNS rebinding) is not our own origin."""
    assert await open_socket("http://evil.example:8000", host="evil.example:8000") == DENIED


async def test_trusted_origins_are_allowed_with_their_scheme_and_port(alpha, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://loom.example", "https://*.corp.example:8443"]
    assert await open_socket("https://loom.example") == REFUSED_BY_CONSUMER
    assert await open_socket("https://loom.example:443") == REFUSED_BY_CONSUMER
    assert await open_socket("http://loom.example") == DENIED
    assert await open_socket("https://loom.example:8443") == DENIED
    assert await open_socket("https://a.corp.example:8443") == REFUSED_BY_CONSUMER
    assert await open_socket("https://a.corp.example") == DENIED
    assert await open_socket("https://corp.example.evil:8443") == DENIED


async def test_behind_a_tls_proxy_the_own_origin_is_https(alpha, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    forwarded = [(b"x-forwarded-proto", b"https")]
    own = "https://127.0.0.1:8000"
    assert await open_socket(own, extra=forwarded) == REFUSED_BY_CONSUMER
    assert await open_socket("http://127.0.0.1:8000", extra=forwarded) == DENIED
    assert await open_socket(own) == DENIED  # no header: plain http


async def test_a_logged_in_pm_streams_from_the_own_origin(alpha):
    from django.test import Client

    from tests.helpers import make_user

    def login():
        client = Client()
        client.force_login(make_user("alice", manages=[alpha]))
        return client.cookies["sessionid"].value

    session = await database_sync_to_async(login)()
    communicator = WebsocketCommunicator(
        application,
        "/ws/teams/alpha/",
        headers=[
            (b"host", b"127.0.0.1:8000"),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"cookie", f"sessionid={session}".encode()),
        ],
    )
    assert (await communicator.connect())[0]
    hello = await communicator.receive_json_from(timeout=5)
    assert hello["event"] == "team.status"
    await communicator.disconnect()


async def get(path, headers=()):
    """Status and body (HttpCommunicator.get_response trips on a streamed file's
    last, empty body message, which ASGI lets leave out "body")."""
    communicator = HttpCommunicator(application, "GET", path, headers=list(headers))
    await communicator.send_input({"type": "http.request", "body": b""})
    start = await communicator.receive_output(timeout=5)
    body, more = b"", True
    while more:
        chunk = await communicator.receive_output(timeout=5)
        body += chunk.get("body", b"")
        more = chunk.get("more_body", False)
    await communicator.wait(timeout=5)  # the handler's end: the request finished
    return {"status": start["status"], "body": body}


@pytest.mark.parametrize(
    "path",
    [
        "/static/../settings.py",
        "/static/../../loomsite/settings.py",
        "/static/teams/../../../../etc/passwd",
        "/static/%2e%2e/settings.py",
    ],
)
async def test_a_static_path_out_of_the_static_folders_is_a_404(path):
    response = await get(path)
    assert response["status"] == 404


async def test_static_files_are_still_served():
    response = await get("/static/teams/socket.js")
    assert response["status"] == 200
    assert b"loomLive" in response["body"]


async def test_a_request_closes_the_database_connections_it_opened(alpha):
    """Each ASGI request runs in a thread of its own, which ends with it: a connection
    it kept would stay open, unused, until garbage collected (at 50 requests/s the
    web processes exhausted PostgreSQL's connections, and every further request was a
    500). A turn worker's threads keep theirs: they live on."""
    from django.db.backends.signals import connection_created

    from tests.helpers import api_token

    token = await database_sync_to_async(api_token)(team=alpha)
    opened = []

    def note(sender, connection, **kwargs):
        opened.append(connection)

    connection_created.connect(note)
    try:
        for _ in range(3):
            bearer = [(b"host", b"127.0.0.1:8000"), (b"authorization", f"Bearer {token}".encode())]
            response = await get(f"/api/teams/{alpha.slug}", headers=bearer)
            assert response["status"] == 200
    finally:
        connection_created.disconnect(note)
    assert opened, "the requests read the database"
    assert all(connection.connection is None for connection in opened)
