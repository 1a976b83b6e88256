"""The site's settings with channels-redis's pub/sub layer (RedisPubSubChannelLayer)
instead of its default one: `bench/load.py --layer pubsub` compares the two."""

from loomsite.settings import *  # noqa: F403 - the site as it is, but for the layer
from loomsite.settings import REDIS_URL

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}
