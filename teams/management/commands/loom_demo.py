import os
import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from teams import services
from teams.models import Team

DEMO_SLUG = "demo"
DEMO_GOAL = (
    "Design a small command-line tool that turns a folder of Markdown notes into a "
    "static website: agree on the scope, plan the modules, then review the plan."
)
DEMO_AGENTS = [
    {"name": "coach", "role": "coach"},
    {"name": "researcher", "role": "researcher"},
    {"name": "coder", "role": "coder"},
    {"name": "reviewer", "role": "reviewer"},
]


class Command(BaseCommand):
    help = "Create the demo team (slug 'demo') and the 'admin' account, if they are missing."

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

    def _ensure_admin(self, team):
        User = get_user_model()
        user = User.objects.filter(username="admin").first()
        if user is None:
            password = os.environ.get("LOOM_ADMIN_PASSWORD")
            generated = not password
            password = password or secrets.token_urlsafe(12)
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
