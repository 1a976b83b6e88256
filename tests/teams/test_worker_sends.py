"""A worker sends its turns' events through its own running event loop (one set of
channel-layer connections for the process) rather than a new loop per send."""

import asyncio
import threading

from channels.layers import channel_layers, get_channel_layer

from teams.live import events
from teams.live.events import team_group


def test_events_from_a_turn_thread_go_out_through_the_workers_loop_in_order(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    channel_layers.backends.pop("default", None)
    layer = get_channel_layer()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    on_loop = []
    original = layer.group_send

    async def group_send(group, message):
        on_loop.append(asyncio.get_running_loop() is loop)
        await original(group, message)

    layer.group_send = group_send

    def on(coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(5)

    try:
        channel = on(layer.new_channel())
        on(layer.group_add(team_group(7), channel))
        events.send_through(loop)
        for text in ("one", "two"):
            events.publish(events.TextDelta(turn_id=1, agent="coder", text=text), team_id=7)
        got = [on(layer.receive(channel))["text"] for _ in range(2)]
    finally:
        events.send_through(None)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        channel_layers.backends.pop("default", None)
    assert got == ["one", "two"]
    assert on_loop == [True, True]
