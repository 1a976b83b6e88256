"""Load: the scaled-out layout (2 daphne, 2 turn workers, 1 sweeper on PostgreSQL and
Redis; scripts/scaled_out.py) with teams talking, 100 WebSocket clients on their
team sockets and 50 REST API requests per second, for 60 seconds, on loopback.

The teams' agents run on the fake Messages API server (one short line per call
after --latency seconds). The clients are spread over the web processes and the
teams; each reconnects (with ?after_seq=<the last sequence number it has>, as the
live view does) if its socket drops. Prints API latency p50/p95/p99 and errors,
socket connect errors, and per client: conversation messages received live,
received by catch-up (events marked `catch_up`: the socket filled a gap from the
database), missing (written while it watched, never received: must be 0) and
duplicates (received twice: must be 0), and gaps in the sequence numbers it got.
A probe samples the channel layer's per-process queues in Redis (backlog, age of
the oldest message) to show where live events wait or are lost.

Run: .venv/bin/python bench/load.py [--seconds 60] [--clients 100] [--rate 50] [--teams 10]
     [--postgres postgres://postgres@127.0.0.1:5432/loom_load_bench] [--redis redis://127.0.0.1:6379/6]
     [--layer core|pubsub]
"""

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--rate", type=float, default=50, help="API requests per second")
    parser.add_argument("--teams", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument(
        "--postgres",
        default="postgres://postgres@127.0.0.1:5432/loom_load_bench",
        help="the bench database (dropped and made again); not bench/throughput.py's",
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/6")
    parser.add_argument(
        "--layer",
        choices=["core", "pubsub"],
        default="core",
        help="channels-redis layer: the default (core) or RedisPubSubChannelLayer",
    )
    args = parser.parse_args()

    database_url = fresh_postgres(args.postgres)
    secret = "bench-only-" + os.urandom(16).hex()
    os.environ.update(
        DJANGO_SETTINGS_MODULE="loomsite.settings",
        LOOM_DATABASE_URL=database_url,
        LOOM_REDIS_URL=args.redis,
        LOOM_SECRET_KEY=secret,
        LOOM_DEBUG="0",
        NO_PROXY="127.0.0.1,localhost",
    )
    from scaled_out import Layout

    from tests.fakes.messages_api import FakeMessagesAPI, text

    with FakeMessagesAPI(lambda request: text("Noted.", delay=args.latency)) as api:
        layout = Layout(
            database_url=database_url,
            redis_url=args.redis,
            web=2,
            workers=2,
            env={
                "ANTHROPIC_API_KEY": "sk-bench",
                "ANTHROPIC_BASE_URL": api.url,
                "LOOM_SECRET_KEY": secret,
                "LOOM_API_RATE": "100000/min",
                "LOOM_DEBUG": "0",
                **(
                    {"DJANGO_SETTINGS_MODULE": "bench.pubsub_settings"}
                    if args.layer == "pubsub"
                    else {}
                ),
            },
        )
        with layout:
            import django

            django.setup()
            token, team_tokens = make_teams(args.teams)
            report(args, *asyncio.run(run_load(args, layout.urls, token, team_tokens)))


def fresh_postgres(url: str) -> str:
    """`url`, its database dropped and made again (on the same server)."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if not name.replace("_", "").isalnum():
        raise SystemExit(f"--postgres names an odd database {name!r}")
    server = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return url


def make_teams(count: int) -> tuple[str, dict[str, str]]:
    """The talking teams (as bench/throughput.py makes them), an account token for the
    API, and a team token per team for the sockets (a caller may hold 20 at most)."""
    from throughput import make_teams as make_talking_teams

    from teams import services
    from teams.models import Team

    token = make_talking_teams(count)
    team_tokens = {
        team.slug: services.api_token_create(team=team, label="bench sockets")[1]
        for team in Team.objects.all()
    }
    return token, team_tokens


def http(method: str, url: str, token: str) -> tuple[int, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(
        url,
        method=method,
        data=b"" if method == "POST" else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    start = time.perf_counter()
    try:
        with opener.open(request, timeout=30) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except OSError:
        status = 0
    return status, (time.perf_counter() - start) * 1000


def _brief(event: dict) -> str:
    """An event as a duplicate's report shows it."""
    message = event.get("message") or {}
    parts = [event.get("event", "?"), f"seq={event.get('seq')}"]
    if event.get("catch_up"):
        parts.append("catch_up")
    if event.get("head") is not None:
        parts.append(f"head={event['head']}")
    if message:
        parts.append(f"message={message.get('id')}")
    return " ".join(parts)


class Client:
    """One WebSocket client of one team: what it received, live or by catch-up."""

    def __init__(self, url: str, slug: str, token: str):
        self.url, self.slug, self.token = url, slug, token
        self.live: set[int] = set()  # conversation message ids
        self.caught_up: set[int] = set()
        self.duplicates = 0  # a message or a sequence number received again
        self.shown_duplicates: list = []  # the events just before each, as received
        self.seqs: list[int] = []
        self.last_seq: int | None = None
        self.omitted = 0  # catch_up_omitted, summed
        self.watching_since: float | None = None
        self.connect_errors = 0
        self.reconnects = 0

    @property
    def received(self) -> set[int]:
        return self.live | self.caught_up

    def take(self, event: dict):
        self.recent = [*getattr(self, "recent", [])[-5:], _brief(event)]
        seq = event.get("seq")
        if seq is not None:
            if self.last_seq is not None and seq <= self.last_seq:
                self.duplicates += 1
                self.shown_duplicates.append((self.slug, list(self.recent)))
                return
            self.seqs.append(seq)
            self.last_seq = seq
        elif event.get("event") == "team.status" and event.get("head") is not None:
            self.last_seq = max(self.last_seq or 0, event["head"])
            self.omitted += event.get("catch_up_omitted") or 0
        message = event.get("message")
        if event.get("event") == "message.created" and not message["recipient"]:
            if message["id"] in self.received:
                self.duplicates += 1
                self.shown_duplicates.append((self.slug, list(self.recent)))
            (self.caught_up if event.get("catch_up") else self.live).add(message["id"])

    def seq_gaps(self) -> int:
        """Numbers skipped between the first and the last it got (all events of a
        team are public to a team token, so none may be skipped)."""
        return (self.seqs[-1] - self.seqs[0] + 1 - len(self.seqs)) if self.seqs else 0

    async def run(self, stop: asyncio.Event):
        import websockets

        while not stop.is_set():
            after = "" if self.last_seq is None else f"?after_seq={self.last_seq}"
            ws_url = self.url.replace("http", "ws") + f"/ws/teams/{self.slug}/{after}"
            try:
                async with websockets.connect(
                    ws_url,
                    additional_headers={"Authorization": f"Bearer {self.token}"},
                    max_queue=None,
                    open_timeout=60,
                ) as socket:
                    if self.watching_since is None:
                        self.watching_since = time.time()
                    while not stop.is_set():
                        try:
                            raw = await asyncio.wait_for(socket.recv(), timeout=0.5)
                        except TimeoutError:
                            continue
                        self.take(json.loads(raw))
            except Exception:  # noqa: BLE001 - a dropped or refused socket: count, retry
                if stop.is_set():
                    break
                if self.watching_since is None:
                    self.connect_errors += 1
                self.reconnects += 1
                await asyncio.sleep(0.5)


class LayerProbe:
    """Samples, once a second, the channel layer's queues in Redis: the longest
    backlog of any process's queue and the age of its oldest message (channels-redis
    drops messages older than its expiry, and sends to a queue at capacity)."""

    def __init__(self, redis_url: str):
        import redis

        self.redis = redis.Redis.from_url(redis_url)
        self.max_backlog = 0
        self.max_age = 0.0

    async def run(self, stop: asyncio.Event):
        while not stop.is_set():
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(1)

    def sample(self):
        now = time.time()
        for key in self.redis.scan_iter(match="asgispecific.*", count=1000):
            if key.endswith(b"$inflight") or self.redis.type(key) != b"zset":
                continue
            count = self.redis.zcard(key)
            self.max_backlog = max(self.max_backlog, count)
            oldest = self.redis.zrange(key, 0, 0, withscores=True)
            if oldest:
                self.max_age = max(self.max_age, now - oldest[0][1])


async def run_load(args, urls: list[str], token: str, team_tokens: dict[str, str]):
    slugs = [f"t{n:03d}" for n in range(args.teams)]
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=64)
    for slug in slugs:
        status, _ = await loop.run_in_executor(
            pool, http, "POST", f"{urls[0]}/api/teams/{slug}/start", token
        )
        assert status == 200, status
    stop = asyncio.Event()
    clients = [
        Client(urls[i % len(urls)], slugs[i % len(slugs)], team_tokens[slugs[i % len(slugs)]])
        for i in range(args.clients)
    ]
    tasks = [asyncio.create_task(c.run(stop)) for c in clients]
    probe = LayerProbe(args.redis)
    tasks.append(asyncio.create_task(probe.run(stop)))
    await asyncio.sleep(2)  # every client connected and watching
    started = time.time()
    results: list[tuple[int, float]] = []
    lock = threading.Lock()

    def one_request(n: int):
        url = urls[n % len(urls)]
        path = [f"/api/teams/{slugs[n % len(slugs)]}/messages?limit=20", "/api/teams"][n % 2]
        outcome = http("GET", url + path, token)
        with lock:
            results.append(outcome)

    futures, n = [], 0
    interval = 1 / args.rate
    next_at = time.monotonic()
    end = next_at + args.seconds
    while time.monotonic() < end:
        futures.append(loop.run_in_executor(pool, one_request, n))
        n += 1
        next_at += interval
        await asyncio.sleep(max(0, next_at - time.monotonic()))
    await asyncio.gather(*futures)
    ended = time.time()
    # The teams stop talking; then every client gets up to 30 s to read what is still
    # on its way (a loaded machine queues events; queued is not lost).
    for slug in slugs:
        await loop.run_in_executor(pool, http, "POST", f"{urls[0]}/api/teams/{slug}/pause", token)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        expected = await asyncio.to_thread(expected_messages, clients, ended)
        if all(expected[i] <= c.received for i, c in enumerate(clients)):
            break
        await asyncio.sleep(1)
    stop.set()
    await asyncio.gather(*tasks)
    pool.shutdown()
    return results, clients, started, ended, probe


def expected_messages(clients, ended) -> list[set[int]]:
    """Per client: the conversation messages of its team written while it watched."""
    from datetime import datetime

    from django.db import close_old_connections

    from teams.models import Message

    close_old_connections()
    window_end = datetime.fromtimestamp(ended, tz=UTC)
    cache: dict[tuple, set[int]] = {}
    out = []
    for client in clients:
        since = datetime.fromtimestamp(client.watching_since or ended, tz=UTC)
        key = (client.slug, since)
        if key not in cache:
            cache[key] = set(
                Message.objects.filter(
                    team__slug=client.slug,
                    recipient__isnull=True,
                    created_at__gte=since,
                    created_at__lt=window_end,
                ).values_list("id", flat=True)
            )
        out.append(cache[key])
    return out


def report(args, results, clients, started, ended, probe):
    latencies = sorted(ms for _, ms in results)
    errors = sum(1 for status, _ in results if status != 200)

    def pct(p):
        return latencies[min(len(latencies) - 1, int(len(latencies) * p))]

    rows = []
    for client, expected in zip(clients, expected_messages(clients, ended), strict=True):
        live, caught = expected & client.live, expected & client.caught_up
        rows.append(
            (len(expected), len(live), len(caught), len(expected - client.received),
             client.duplicates, client.seq_gaps(), client.omitted)
        )
    seconds = ended - started
    print(f"layout: 2 daphne, 2 runworker, 1 sweep; PostgreSQL + Redis ({args.layer}); loopback")
    print(f"teams talking: {args.teams}; model latency {args.latency} s; window {seconds:.0f} s")
    statuses = Counter(status for status, _ in results if status != 200)
    by_status = ", ".join(f"{status or 'no answer'}: {n}" for status, n in sorted(statuses.items()))
    print(
        f"API: {len(results)} requests ({len(results) / seconds:.1f}/s), errors {errors}"
        + (f" ({by_status})" if by_status else "")
    )
    print(f"API latency: p50 {pct(0.5):.0f} ms, p95 {pct(0.95):.0f} ms, p99 {pct(0.99):.0f} ms")
    if latencies:
        print(f"API latency mean {statistics.mean(latencies):.0f} ms, max {latencies[-1]:.0f} ms")
    connect_errors = sum(c.connect_errors for c in clients)
    reconnects = sum(c.reconnects for c in clients)
    print(f"WebSocket clients: {len(clients)}; connect errors {connect_errors}; drops {reconnects}")
    total = [sum(column) for column in zip(*rows, strict=True)]
    print(
        f"messages per client, summed: expected {total[0]}, received live {total[1]}, "
        f"by catch-up {total[2]}, missing {total[3]}, duplicates {total[4]}, "
        f"sequence gaps {total[5]}, left out by a bounded catch-up {total[6]}"
    )
    for name, index in (("live", 1), ("catch-up", 2), ("missing", 3), ("duplicates", 4)):
        column = [row[index] for row in rows]
        print(f"  per client {name}: min {min(column)}, max {max(column)}")
    print(f"clients missing any: {sum(1 for row in rows if row[3])}; "
          f"with duplicates: {sum(1 for row in rows if row[4])}")
    for slug, recent in [d for c in clients for d in c.shown_duplicates][:5]:
        print(f"a duplicate on {slug}'s socket; its last events, as received:")
        for line in recent:
            print(f"    {line}")
    print(f"channel layer queues: longest backlog {probe.max_backlog} messages, "
          f"oldest message {probe.max_age:.1f} s")


if __name__ == "__main__":
    main()
