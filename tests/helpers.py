"""What tests share besides fixtures: users, live sockets and driving a conversation."""

from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

PASSWORD = "pm-password-1"


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


def socket(user, path):
    """A client of our WebSocket routes, as `user` (the auth middleware's job)."""
    from teams.routing import websocket_urlpatterns

    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    return communicator


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
