"""On SQLite a live event is numbered in one statement (teams.event_log): its INSERT
reads the team's counter, and this trigger moves the counter on to the number taken.
PostgreSQL does the same in one statement without a trigger (an UPDATE ... RETURNING
in a WITH), so there this migration does nothing."""

from django.db import migrations

CREATE = """
CREATE TRIGGER teams_liveevent_numbers_team AFTER INSERT ON teams_liveevent
BEGIN
    UPDATE teams_team SET event_seq = NEW.seq WHERE id = NEW.team_id AND event_seq < NEW.seq;
END
"""
DROP = "DROP TRIGGER IF EXISTS teams_liveevent_numbers_team"


def _on_sqlite(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "sqlite":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0021_agent_cost_warned_at"),
    ]

    operations = [
        migrations.RunPython(_on_sqlite(CREATE), _on_sqlite(DROP), elidable=False),
    ]
