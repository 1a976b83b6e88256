from channels.routing import ChannelNameRouter
from django.urls import path

from teams.engine.worker import TurnWorkerConsumer
from teams.live.events import TURNS_CHANNEL
from teams.web import consumers

websocket_urlpatterns = [
    path("ws/teams/<slug:slug>/", consumers.TeamConsumer.as_asgi()),
    path("ws/pm/", consumers.PMInboxConsumer.as_asgi()),
]

channel_routes = ChannelNameRouter({TURNS_CHANNEL: TurnWorkerConsumer.as_asgi()})
