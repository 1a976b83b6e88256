"""The cost of an agent's history per message, in one request's build.

Builds the coder's request (prompts.build, then the stored copy and digest as a model
step keeps them, teams.history.model_requests.request_packed) for two teams whose single phase holds
100 and 1,000 messages, with what the process kept from the previous build (a steady
turn's case, no new rows), many times over, alternating the teams, and prints the
fastest of each and the difference per message: the part of a turn that grows with the
history. Taking the fastest of interleaved runs keeps a noisy machine's scatter out.

Run: .venv/bin/python bench/history_build.py [--runs 150]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = (100, 1000)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=150)
    args = parser.parse_args()
    os.environ.setdefault("LOOM_DATA_DIR", tempfile.mkdtemp(prefix="loom-bench-"))
    os.environ.setdefault("LOOM_DEBUG", "0")
    os.environ.setdefault("LOOM_SECRET_KEY", "bench-only-" + os.urandom(16).hex())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    teams = [_team(f"history-{size}", size) for size in SIZES]
    best = [float("inf")] * len(teams)
    for _ in range(args.runs):
        for i, team in enumerate(teams):
            best[i] = min(best[i], _build(*team))
    for size, seconds in zip(SIZES, best, strict=True):
        print(f"history of {size:>5} messages: {seconds * 1000:.2f} ms a build (fastest)")
    per_message = (best[1] - best[0]) / (SIZES[1] - SIZES[0]) * 1e6
    print(f"per message of history: {per_message:.2f} us")


def _team(slug: str, size: int):
    from teams import services
    from teams.engine import prompts
    from teams.models import Message

    team = services.team_create(
        slug=slug,
        goal="Measure the history.",
        phases=["work"],
        agents=[
            {"name": "coach", "role": "coach"},
            {"name": "researcher", "role": "researcher"},
            {"name": "coder", "role": "coder"},
            {"name": "reviewer", "role": "reviewer"},
        ],
    )
    agents = list(team.agents.order_by("position"))
    for n in range(size):
        author = agents[n % len(agents)]
        line = f"{author.name}: noted, carrying on with item {n}. " * 3
        services.message_add(team=team, content=line, author=author, phase="work")
    team.refresh_from_db()
    coder = next(a for a in agents if a.name == "coder")
    until = Message.objects.filter(team=team).order_by("-id").values_list("id", flat=True)[0]
    prompts.build(coder, team, until_id=until, phase="work")  # what a process keeps
    return team, coder, until


def _build(team, coder, until) -> float:
    from teams.engine import prompts
    from teams.history.model_requests import request_packed

    start = time.process_time()
    prompt = prompts.build(coder, team, until_id=until, phase="work")
    request = {"model": "m", "max_tokens": 1, "system": prompt.system, "messages": prompt.blocks}
    request_packed(request)
    return time.process_time() - start


if __name__ == "__main__":
    main()
