"""What one fork costs in its request: wall time, CPU time and the peak of memory
Python allocates, for teams of 250 and LOOM_FORK_MAX_MESSAGES (1,000) messages.

A fork runs in the request that asks for it (teams.history.forking.team_fork): the
limit on its size (teams.history.fork_limits) is what keeps that request within a
budget. Each team has four agents, one finished turn per message and its messages
of about 150 characters; the fork is at its last message, so everything is copied.
Memory is tracemalloc's peak during the fork (Python's own allocations: the rows
and the copies), time the wall clock and the process's CPU time.

Run: .venv/bin/python bench/fork.py [--sizes 250,1000]
(a fresh SQLite database in a temporary folder)
"""

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="250,1000")
    args = parser.parse_args()
    os.environ.setdefault("LOOM_DATA_DIR", tempfile.mkdtemp(prefix="loom-bench-"))
    os.environ.setdefault("LOOM_DEBUG", "0")
    os.environ.setdefault("LOOM_SECRET_KEY", "bench-only-" + os.urandom(16).hex())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    os.environ.setdefault("LOOM_FORK_MAX_MESSAGES", "1000000")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    for size in (int(s) for s in args.sizes.split(",")):
        team, last = _team(f"fork-{size}", size)
        wall, cpu, peak = _fork(team, last)
        print(
            f"fork of {size:>6,} messages: {wall:6.2f} s wall, {cpu:6.2f} s CPU, "
            f"{peak / 2**20:7.1f} MiB peak allocated"
        )


def _team(slug: str, size: int):
    from teams import services
    from teams.models import Message, Turn

    team = services.team_create(
        slug=slug,
        goal="Measure a fork.",
        phases=["work"],
        agents=[
            {"name": "coach", "role": "coach"},
            {"name": "researcher", "role": "researcher"},
            {"name": "coder", "role": "coder"},
            {"name": "reviewer", "role": "reviewer"},
        ],
    )
    agents = list(team.agents.order_by("position"))
    turns = Turn.objects.bulk_create(
        Turn(team=team, agent=agents[n % 4], number=n + 1, status=Turn.Status.DONE, phase="work")
        for n in range(size)
    )
    Message.objects.bulk_create(
        Message(
            team=team,
            author=agents[n % 4],
            turn=turns[n],
            kind=Message.Kind.CHAT,
            phase="work",
            content=f"{agents[n % 4].name}: noted, carrying on with item {n}. " * 3,
        )
        for n in range(size)
    )
    last = Message.objects.filter(team=team).order_by("-id").values_list("id", flat=True)[0]
    return team, last


def _fork(team, last) -> tuple[float, float, int]:
    from teams.history import forking

    tracemalloc.start()
    wall, cpu = time.perf_counter(), time.process_time()
    forking.team_fork(team=team, slug=f"{team.slug}-f", at_message=last)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return wall, cpu, peak


if __name__ == "__main__":
    main()
