"""Run a team to its end in this process, with no server: every queued turn runs as a
worker would run it, and each PM request gets a canned answer. For reading what the
model received afterwards (manage.py team prompt SLUG AGENT --text).

Run: LOOM_DATA_DIR=/tmp/x .venv/bin/python scripts/demo_run.py [SLUG] [--turns 200]
(after manage.py migrate and manage.py loom_demo in that data dir)"""

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loomsite.settings")

import django  # noqa: E402

django.setup()

from teams.conversation import pm_requests  # noqa: E402
from teams.engine import loop  # noqa: E402
from teams.models import PMRequest, Team, Turn  # noqa: E402
from teams.run import team_actions  # noqa: E402

ANSWERS = {
    PMRequest.Kind.BUDGET: "Stop",
    PMRequest.Kind.QUESTION: "Only the core for the first version; more later.",
    PMRequest.Kind.APPROVAL: "Approve",
    PMRequest.Kind.STUCK: "Let them go on",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("slug", nargs="?", default="demo")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    team = Team.objects.get(slug=args.slug)
    if team.status == Team.Status.IDLE:
        team_actions.team_start(team=team)
    for _ in range(args.turns):
        request = PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).first()
        if request is not None:
            answer = ANSWERS.get(request.kind, "Go on.")
            print(f"PM answers {request.question[:70]!r}: {answer}")
            pm_requests.pm_request_answer(request_id=request.id, answer=answer)
        turn = Turn.objects.filter(team=team, status=Turn.Status.QUEUED).order_by("id").first()
        if turn is None:
            break
        done = loop.run_turn(turn.id, "demo-run")
        print(f"turn {done.number:>3} {done.phase:<16} {done.agent.name:<11} {done.outcome}")
    team.refresh_from_db()
    print(f"team {team.slug}: {team.status}, phase {team.phase}, {team.turn_count} turns")


if __name__ == "__main__":
    main()
