from channels.routing import ChannelNameRouter
from django.urls import path

from teams import consumers
from teams.events import TURNS_CHANNEL

websocket_urlpatterns = [
    path("ws/teams/<slug:slug>/", consumers.TeamConsumer.as_asgi()),
    path("ws/pm/", consumers.PMInboxConsumer.as_asgi()),
]

channel_routes = ChannelNameRouter({TURNS_CHANNEL: consumers.TurnWorkerConsumer.as_asgi()})
