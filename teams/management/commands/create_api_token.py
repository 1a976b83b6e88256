"""create_api_token TEAM [--agent NAME] | --user NAME, and [--label TEXT]
[--expires-in 90d] [--read-only]

Prints what the token can do, then the token alone on the last line: it is shown
this once (only its hash is stored), so scripts can take it with `tail -n 1`."""

from datetime import UTC

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from teams import selectors, services
from teams.errors import LoomError


class Command(BaseCommand):
    help = (
        "Create a REST API token: for one team (optionally acting only as one of its "
        "agents), or with --user for a staff user's account. The token is printed alone "
        "on the last line, once."
    )

    def add_arguments(self, parser):
        parser.add_argument("team", nargs="?", help="The team's slug (omit with --user).")
        parser.add_argument("--agent", help="Bind the token to this agent of the team.")
        parser.add_argument("--user", help="An account token acting with this staff user's rights.")
        parser.add_argument("--label", default="", help="A note saying what the token is for.")
        parser.add_argument(
            "--expires-in",
            default=None,
            metavar="LIFETIME",
            help="Expire this long from now: minutes, hours or days, e.g. 30m, 12h, 90d "
            "(at most 3650d). Default: never.",
        )
        parser.add_argument(
            "--read-only",
            action="store_true",
            help="Reads only: every GET works; writes and tool calls are refused (403).",
        )

    def handle(self, *args, team, agent, user, label, expires_in, read_only, **options):
        if user and (team or agent):
            raise CommandError("Give a TEAM (and maybe --agent) or --user NAME, not both.")
        if not user and not team:
            raise CommandError("Give the team's slug, or --user NAME for an account token.")
        try:
            if user:
                account = get_user_model().objects.filter(username=user).first()
                if account is None:
                    raise CommandError(f"No user named {user!r}.")
                token, key = services.api_token_create(
                    user=account, label=label, expires_in=expires_in, read_only=read_only
                )
                scope = f"account token of {account.get_username()} (acts with their rights)"
            else:
                row = selectors.team_get(slug=team)
                member = selectors.agent_get(team=row, name=agent) if agent else None
                token, key = services.api_token_create(
                    team=row,
                    agent=member,
                    label=label,
                    expires_in=expires_in,
                    read_only=read_only,
                )
                scope = f"team token of {row.slug}" + (
                    f", acting only as agent {member.name}" if member else ""
                )
        except LoomError as exc:
            raise CommandError(exc.message) from exc
        if token.read_only:
            scope += ", read-only (no writes, no tool calls)"
        if token.expires_at is not None:
            scope += f", expiring at {token.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        self.stdout.write(
            f"Created {scope}; id {token.id}, prefix {token.prefix}.\n"
            "Keep the token now: it is shown this once. Use it as "
            "'Authorization: Bearer <token>'."
        )
        self.stdout.write(key)
