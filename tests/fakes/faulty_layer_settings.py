"""The site's settings, with a channel layer that drops the live events whose text
contains "lost in transit" (tests.fakes.faulty_layer)."""

from tests.fakes.site_settings import *  # noqa: F403 - a test's site, but for the layer

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "tests.fakes.faulty_layer.FaultyInMemoryChannelLayer",
        "CONFIG": {"drop_containing": "lost in transit"},
    }
}
