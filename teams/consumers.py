import asyncio
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.consumer import AsyncConsumer
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from teams import conversation, events, selectors
from teams.models import Team
from teams.worker import run_claimed_turn

MAX_CONCURRENT_TURNS = 8


class TurnWorkerConsumer(AsyncConsumer):
    """Listens on `loom.turns`; each wake-up names a turn to claim and run.

    Turns run in their own threads so one slow model call does not hold up the
    others; the claim makes a duplicate wake-up harmless."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.slots = asyncio.Semaphore(MAX_CONCURRENT_TURNS)
        self.tasks: set[asyncio.Task] = set()

    async def turn_queued(self, message):
        task = asyncio.ensure_future(self._run(message["turn_id"]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, turn_id: int):
        async with self.slots:
            await sync_to_async(run_claimed_turn, thread_sensitive=False)(turn_id)


class TeamConsumer(AsyncJsonWebsocketConsumer):
    """Streams one team's events to a user who may see that team."""

    async def connect(self):
        slug = self.scope["url_route"]["kwargs"]["slug"]
        self.team = await database_sync_to_async(selectors.team_for_user)(
            user=self.scope.get("user"), slug=slug
        )
        if self.team is None:
            await self.close(code=4403)
            return
        self.group = events.team_group(self.team.id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        # Catch up on what happened between rendering the page (or losing the
        # connection) and joining the group; the page drops duplicates by id.
        missed, status = await database_sync_to_async(_team_catch_up)(
            self.team.id, _after_id(self.scope)
        )
        for message in missed:
            await self.send_json({"event": "message.created", "message": message})
        await self.send_json({"event": "team.status", **status})

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def _forward(self, event):
        payload = {k: v for k, v in event.items() if k != "type"}
        await self.send_json({"event": event["type"], **payload})

    message_created = _forward
    text_delta = _forward
    turn_started = _forward
    turn_finished = _forward
    pm_request_opened = _forward
    pm_request_answered = _forward
    team_status = _forward


class PMInboxConsumer(AsyncJsonWebsocketConsumer):
    """Open PM requests appearing and leaving, for the teams this user may see."""

    async def connect(self):
        user = self.scope.get("user")
        self.team_ids = await database_sync_to_async(_visible_team_ids)(user)
        if self.team_ids is None:
            await self.close(code=4403)
            return
        await self.channel_layer.group_add(events.INBOX_GROUP, self.channel_name)
        await self.accept()
        # The open requests as of now, so the page can settle anything it missed.
        requests = await database_sync_to_async(_open_requests)(user)
        await self.send_json({"event": "pm_request.open_list", "requests": requests})

    async def disconnect(self, code):
        await self.channel_layer.group_discard(events.INBOX_GROUP, self.channel_name)

    async def _forward(self, event):
        team_id = event["request"]["team_id"]
        if team_id not in self.team_ids:
            # A team the user was given since connecting?
            self.team_ids = (
                await database_sync_to_async(_visible_team_ids)(self.scope.get("user")) or set()
            )
            if team_id not in self.team_ids:
                return
        await self.send_json({"event": event["type"], "request": event["request"]})

    pm_request_opened = _forward
    pm_request_answered = _forward


def _visible_team_ids(user) -> set[int] | None:
    if user is None or not user.is_authenticated or not user.is_staff:
        return None
    return set(selectors.teams_visible_to(user=user).values_list("id", flat=True))


def _after_id(scope) -> int:
    value = parse_qs(scope.get("query_string", b"").decode()).get("after", ["0"])[0]
    return int(value) if value.isdigit() else 0


def _team_catch_up(team_id: int, after_id: int) -> tuple[list[dict], dict]:
    team = Team.objects.get(pk=team_id)
    missed = [
        conversation.message_payload(m)
        for m in selectors.team_messages_after(team=team, after_id=after_id)
    ]
    request = selectors.team_open_pm_request(team=team)
    status = conversation.team_status_payload(team)
    status["pm_request"] = conversation.pm_request_payload(request) if request else None
    return missed, status


def _open_requests(user) -> list[dict]:
    return [conversation.pm_request_payload(r) for r in selectors.open_pm_requests_for(user=user)]
