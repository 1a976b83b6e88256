import os
import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from teams import services
from teams.engine import mcp_demo_server
from teams.integrations import mcp_servers
from teams.lib.catalog import OFFLINE_MODEL
from teams.models import ConsultantProfile, Team
from teams.pm_group import PM_GROUP, PM_PERMISSIONS

DEMO_SLUG = "demo"
# Its first clause names what the offline model's lines are about: "a static-site
# generator for Markdown notes".
DEMO_GOAL = (
    "Design a static-site generator for Markdown notes: a command-line tool. Agree on "
    "the scope, plan the modules, write a first outline, then review it."
)
DEMO_AGENTS = [
    {"name": "coach", "role": "coach"},
    {"name": "researcher", "role": "researcher"},
    {"name": "coder", "role": "coder"},
    {"name": "reviewer", "role": "reviewer"},
]


# Two offline consultants with two lenses (correctness; architecture), so the demo
# consults with no key. They are enabled for the demo team only: another team's
# agents ask only the consultants a PM enables for it.
DEMO_CONSULTANTS = [
    {"name": "critic", "strengths": "correctness, logic, edge cases"},
    {"name": "architect", "strengths": "architecture, patterns, scalability"},
]


def pm_group_ensure() -> Group:
    """The "PM" group with exactly the admin permissions a PM needs (PM_PERMISSIONS):
    made if missing, put back to exactly those if changed."""
    group, _ = Group.objects.get_or_create(name=PM_GROUP)
    permissions = list(
        Permission.objects.filter(content_type__app_label="teams", codename__in=PM_PERMISSIONS)
    )
    missing = set(PM_PERMISSIONS) - {p.codename for p in permissions}
    if missing:
        raise CommandError(f"Missing permissions {sorted(missing)}: run migrate first.")
    group.permissions.set(permissions)
    return group


class Command(BaseCommand):
    help = (
        "Create the demo team (slug 'demo') and the 'admin' account if they are missing, "
        "and the 'PM' group (give it to staff who manage teams)."
    )

    def handle(self, *args, **options):
        with transaction.atomic():
            team = Team.objects.filter(slug=DEMO_SLUG).first()
            if team is None:
                team = services.team_create(
                    slug=DEMO_SLUG, name="Demo team", goal=DEMO_GOAL, agents=DEMO_AGENTS
                )
                self.stdout.write(f"Created the demo team '{team.slug}' with 4 agents.")
            else:
                self.stdout.write(f"The demo team '{team.slug}' already exists.")
            self._ensure_admin(team)
            for spec in DEMO_CONSULTANTS:
                profile, made = ConsultantProfile.objects.get_or_create(
                    name=spec["name"],
                    defaults={**spec, "provider": "offline", "model": OFFLINE_MODEL},
                )
                team.consultants.add(profile)
                if made:
                    self.stdout.write(f"Created the offline consultant '{spec['name']}'.")
            pm_group_ensure()
            self.stdout.write(
                f"The '{PM_GROUP}' group has the {len(PM_PERMISSIONS)} admin permissions a PM "
                "needs; add staff PMs to it and to their teams' managers."
            )
            server = mcp_demo_server.register(team)
        self._list_demo_tools(server)

    def _list_demo_tools(self, server):
        """The demo MCP server's tools, listed now so the coder is offered them (its
        word_count call waits for the PM's approval: the first run shows one). Listed
        from the server's own module in this process: no child is started for it."""
        if server.tools:
            return
        server = mcp_servers.mcp_server_record_tools(
            server=server, tools=mcp_demo_server.listing()
        )
        names = ", ".join(t["name"] for t in server.tools)
        self.stdout.write(f"Registered the demo MCP server '{server.name}' ({names}; ask).")

    def _ensure_admin(self, team):
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None:
            password = os.environ.get("LOOM_ADMIN_PASSWORD")
            generated = not password
            password = password or secrets.token_urlsafe(12)
            try:  # Django's password validators, the chosen password included
                validate_password(password, User(username="admin", email="admin@localhost"))
            except ValidationError as exc:
                raise CommandError(
                    "LOOM_ADMIN_PASSWORD is too weak: " + " ".join(exc.messages)
                ) from None
            user = User.objects.create_superuser("admin", "admin@localhost", password)
            if generated:
                self.stdout.write(
                    self.style.WARNING(
                        f"Created the admin account: user 'admin', password {password} "
                        "(shown once; set LOOM_ADMIN_PASSWORD to choose it)."
                    )
                )
            else:
                self.stdout.write(
                    "Created the admin account 'admin' (password from LOOM_ADMIN_PASSWORD)."
                )
        team.managers.add(user)
