"""Socket slots: how many live sockets each user holds open, counted in this process
or, with the channels-redis layer, across every process (teams.web.consumers caps
them at MAX_SOCKETS_PER_USER)."""

import time
import weakref

# A socket's slot is a lease renewed while it lives, so the slots of a process
# that died free themselves within this many seconds.
SOCKET_LEASE_SECONDS = 60.0


class LocalSocketSlots:
    """The slots of the sockets this process serves. With the in-memory channel
    layer the site is one process, so this is the whole count; with another layer
    that is not Redis it is per process (a known limit: N processes allow N times
    the cap)."""

    def __init__(self):
        self.leases: dict[int, dict[str, float]] = {}

    async def take(self, user_id: int, channel: str, limit: int) -> bool:
        now = time.monotonic()
        held = self.leases.setdefault(user_id, {})
        for name in [name for name, deadline in held.items() if deadline <= now]:
            del held[name]
        if len(held) >= limit:
            return False
        held[channel] = now + SOCKET_LEASE_SECONDS
        return True

    async def renew(self, user_id: int, channel: str) -> None:
        self.leases.setdefault(user_id, {})[channel] = time.monotonic() + SOCKET_LEASE_SECONDS

    async def count(self) -> int:
        """The live sockets (unexpired slots) of every user (for /metrics)."""
        now = time.monotonic()
        return sum(1 for held in self.leases.values() for d in held.values() if d > now)

    async def release(self, user_id: int, channel: str) -> None:
        held = self.leases.get(user_id, {})
        held.pop(channel, None)
        if not held:
            self.leases.pop(user_id, None)


class RedisSocketSlots:
    """The slots of every process, in the Redis of the channels-redis layer: a
    sorted set per user of channel names scored by lease deadline. Taking a slot
    drops expired leases, adds this socket and counts, in one transaction, so
    processes racing for the last slot cannot both get it."""

    def __init__(self, layer):
        self.layer = layer

    def _key(self, user_id: int) -> str:
        return f"{self.layer.prefix}:loom-sockets:{user_id}"

    def _redis(self, key: str):
        return self.layer.connection(self.layer.consistent_hash(key))

    async def take(self, user_id: int, channel: str, limit: int) -> bool:
        key, now = self._key(user_id), time.time()
        redis = self._redis(key)
        async with redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {channel: now + SOCKET_LEASE_SECONDS})
            pipe.zcard(key)
            pipe.expire(key, int(SOCKET_LEASE_SECONDS) + 1)
            count = (await pipe.execute())[2]
        if count > limit:
            await redis.zrem(key, channel)
            return False
        return True

    async def renew(self, user_id: int, channel: str) -> None:
        key = self._key(user_id)
        redis = self._redis(key)
        async with redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {channel: time.time() + SOCKET_LEASE_SECONDS})
            pipe.expire(key, int(SOCKET_LEASE_SECONDS) + 1)
            await pipe.execute()

    async def count(self) -> int:
        """The live sockets (unexpired slots) of every user and process (/metrics)."""
        now, total = time.time(), 0
        for index in range(getattr(self.layer, "ring_size", 1) or 1):
            redis = self.layer.connection(index)
            async for key in redis.scan_iter(match=f"{self.layer.prefix}:loom-sockets:*"):
                total += await redis.zcount(key, now, "+inf")
        return total

    async def release(self, user_id: int, channel: str) -> None:
        await self._redis(self._key(user_id)).zrem(self._key(user_id), channel)


_slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def socket_slots(layer) -> LocalSocketSlots | RedisSocketSlots:
    """The slot keeper for a channel layer: Redis-wide for channels-redis (the
    scaled-out mode), this process's own otherwise."""
    slots = _slots.get(layer)
    if slots is None:
        is_redis = callable(getattr(layer, "connection", None)) and hasattr(layer, "prefix")
        slots = _slots[layer] = RedisSocketSlots(layer) if is_redis else LocalSocketSlots()
    return slots
