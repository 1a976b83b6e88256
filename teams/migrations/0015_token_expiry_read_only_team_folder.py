"""Tokens may expire and may be read-only; a team's default workspace folder is named
by the team's own UUID, not by its slug (an existing slug folder is moved to it)."""

import uuid
from pathlib import Path

from django.conf import settings
from django.db import migrations, models


def name_folders(apps, schema_editor):
    Team = apps.get_model("teams", "Team")
    workspaces = Path(settings.DATA_DIR) / "workspaces"
    for team in Team.objects.all():
        team.folder = uuid.uuid4()
        team.save(update_fields=["folder"])
        old = workspaces / team.slug
        if not team.workspace and old.is_dir() and not old.is_symlink():
            old.rename(workspaces / str(team.folder))


class Migration(migrations.Migration):
    dependencies = [("teams", "0014_phase_guide_tool_access_anchor_source")]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(
                blank=True,
                help_text="Empty: never expires. Past it, every use is a 401.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="apitoken",
            name="read_only",
            field=models.BooleanField(
                default=False,
                help_text="Reads only: no writes, no tools (403 with the reason).",
            ),
        ),
        migrations.AddField(
            model_name="team",
            name="folder",
            field=models.UUIDField(editable=False, null=True),
        ),
        migrations.RunPython(name_folders, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="team",
            name="folder",
            field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
        ),
    ]
