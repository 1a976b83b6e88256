"""A channel layer that loses some live events between the commit and the sockets: the
in-memory layer, except that a group send whose text contains `drop_containing` never
reaches the group. For the real site in a child process (tests/browser), through
tests.fakes.faulty_layer_settings."""

import json

from channels.layers import InMemoryChannelLayer


class FaultyInMemoryChannelLayer(InMemoryChannelLayer):
    def __init__(self, drop_containing: str = "", **kwargs):
        super().__init__(**kwargs)
        self.drop_containing = drop_containing

    async def group_send(self, group, message):
        if self.drop_containing and self.drop_containing in json.dumps(message):
            return  # lost in transit
        await super().group_send(group, message)
