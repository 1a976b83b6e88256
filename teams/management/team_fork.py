"""`manage.py team fork SLUG (--at-message ID | --at-turn ID) [--slug NEW]` and
`manage.py team replay SLUG [--slug NEW] [--until-turn N]`."""

from __future__ import annotations

from django.core.management.base import CommandError

from teams.engine import replay
from teams.history import cloning, forking


def add_arguments(parser) -> None:
    parser.add_argument("--at-message", type=int, default=None, help="For `fork`: a message id.")
    parser.add_argument("--at-turn", type=int, default=None, help="For `fork`: a turn id.")
    parser.add_argument(
        "--slug",
        default=None,
        dest="new_slug",
        help="For `fork` and `replay`: the new team's slug (default SLUG-2... / SLUG-replay).",
    )
    parser.add_argument(
        "--until-turn", type=int, default=None, help="For `replay`: stop after this turn number."
    )


def fork(stdout, team, options) -> None:
    if (options["at_message"] is None) == (options["at_turn"] is None):
        raise CommandError("Fork at one point: --at-message ID or --at-turn ID.")
    slug = options["new_slug"] or cloning.next_free_slug(team.slug)
    made = forking.team_fork(
        team=team,
        slug=slug,
        at_message=options["at_message"],
        at_turn=options["at_turn"],
    )
    stdout.write(f"{forking.made_message(made)} Start it with: manage.py team start {made.slug}")


def run_replay(stdout, team, options) -> int:
    row = replay.team_replay(team=team, slug=options["new_slug"], until_turn=options["until_turn"])
    stdout.write(replay.report_text(row))
    return 1 if row.status == row.Status.DIVERGED else 0
