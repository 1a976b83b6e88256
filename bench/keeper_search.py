"""Raw keeper retrieval over 100,000 entries: full-text search against a plain scan.

Fills one team's keepers with 100,000 entries of generated conversation, then runs
the same keyword queries through teams.conversation.keepers.search (FTS5 on SQLite, tsvector on
PostgreSQL) and through a substring scan (icontains on every term), and prints the
median time of each. Target: full-text under 20 ms median on SQLite.

Run: .venv/bin/python bench/keeper_search.py [--entries 100000] [--queries 50]
(a fresh SQLite database in a temporary folder unless LOOM_DATABASE_URL is set)
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from functools import reduce
from operator import or_
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WORDS = (
    "parser renderer template markdown front matter token auth bearer session cache "
    "index schema migration query keeper anchor phase review test deploy config flag "
    "stream buffer encode decode header footer layout theme style script build release "
    "version branch commit merge conflict latency memory budget retry timeout error "
    "logging metric trace span worker queue channel socket router handler model prompt"
).split()
FILLER = "the a we should could use keep make with for and then also maybe now later".split()


def sentence(rng: random.Random) -> str:
    words = [
        rng.choice(WORDS if rng.random() < 0.45 else FILLER) for _ in range(rng.randint(8, 30))
    ]
    return " ".join(words).capitalize() + "."


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("LOOM_DATA_DIR", tempfile.mkdtemp(prefix="loom-bench-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Q

    call_command("migrate", verbosity=0)
    from teams import services
    from teams.conversation import keepers
    from teams.models import Keeper, KeeperEntry

    rng = random.Random(7)
    team = services.team_create(
        slug=f"kb-{int(time.time())}", agents=[{"name": "coder", "role": "coder"}]
    )
    agent = team.agents.get()
    start = time.perf_counter()
    per_keeper = 1000
    for k in range(0, args.entries, per_keeper):
        keeper = Keeper.objects.create(team=team, agent=agent, topic=f"topic {k // per_keeper}")
        KeeperEntry.objects.bulk_create(
            KeeperEntry(
                keeper=keeper,
                position=i,
                role=rng.choice(["coder", "reviewer"]),
                content=sentence(rng),
            )
            for i in range(min(per_keeper, args.entries - k))
        )
    if connection.vendor == "postgresql":
        # What autovacuum does after a bulk load; without statistics the planner
        # guesses one matching row and picks a nested loop.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE teams_keeperentry; ANALYZE teams_keeper;")
    print(
        f"database: {connection.vendor}; {args.entries:,} entries loaded in "
        f"{time.perf_counter() - start:.1f} s"
    )

    queries = [" ".join(rng.sample(WORDS, 2)) for _ in range(args.queries)]
    fts, scan, hits = [], [], []
    for query in queries:
        t = time.perf_counter()
        found = keepers.search(team=team, query=query)
        fts.append((time.perf_counter() - t) * 1000)
        hits.append(len(found))
        terms = keepers.search_terms(query)
        t = time.perf_counter()
        matches = reduce(or_, (Q(content__icontains=term) for term in terms))
        list(KeeperEntry.objects.filter(matches, keeper__team=team).values_list("id", flat=True))
        scan.append((time.perf_counter() - t) * 1000)
    print(f"queries: {len(queries)} two-word keyword lookups, {keepers.SEARCH_LIMIT} best kept")
    print(
        f"full-text search: median {statistics.median(fts):.2f} ms, "
        f"max {max(fts):.2f} ms (median {statistics.median(hits):.0f} hits returned)"
    )
    print(
        f"substring scan:   median {statistics.median(scan):.2f} ms, max {max(scan):.2f} ms "
        "(every matching entry, unranked)"
    )


if __name__ == "__main__":
    main()
