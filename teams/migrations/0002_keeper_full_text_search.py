"""Full-text search over keeper entries: FTS5 on SQLite, a stored tsvector column with
a GIN index on PostgreSQL. teams.keepers.search runs the matching query for each."""

from django.db import migrations

SQLITE_UP = [
    "CREATE VIRTUAL TABLE teams_keeperentry_fts USING fts5("
    "content, content='teams_keeperentry', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER teams_keeperentry_fts_ai AFTER INSERT ON teams_keeperentry BEGIN "
    "INSERT INTO teams_keeperentry_fts(rowid, content) VALUES (new.id, new.content); END",
    "CREATE TRIGGER teams_keeperentry_fts_ad AFTER DELETE ON teams_keeperentry BEGIN "
    "INSERT INTO teams_keeperentry_fts(teams_keeperentry_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); END",
    "CREATE TRIGGER teams_keeperentry_fts_au AFTER UPDATE ON teams_keeperentry BEGIN "
    "INSERT INTO teams_keeperentry_fts(teams_keeperentry_fts, rowid, content) "
    "VALUES ('delete', old.id, old.content); "
    "INSERT INTO teams_keeperentry_fts(rowid, content) VALUES (new.id, new.content); END",
    "INSERT INTO teams_keeperentry_fts(teams_keeperentry_fts) VALUES ('rebuild')",
]
SQLITE_DOWN = [
    "DROP TRIGGER IF EXISTS teams_keeperentry_fts_ai",
    "DROP TRIGGER IF EXISTS teams_keeperentry_fts_ad",
    "DROP TRIGGER IF EXISTS teams_keeperentry_fts_au",
    "DROP TABLE IF EXISTS teams_keeperentry_fts",
]
# A stored vector: ranking reads it instead of re-parsing every matching row.
POSTGRES_UP = [
    "ALTER TABLE teams_keeperentry ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english', content)) STORED",
    "CREATE INDEX teams_keeperentry_search_vector ON teams_keeperentry USING GIN (search_vector)",
]
POSTGRES_DOWN = [
    "DROP INDEX IF EXISTS teams_keeperentry_search_vector",
    "ALTER TABLE teams_keeperentry DROP COLUMN IF EXISTS search_vector",
]


def run(statements_by_vendor):
    def apply(apps, schema_editor):
        for statement in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(statement)

    return apply


class Migration(migrations.Migration):
    dependencies = [("teams", "0001_initial")]

    operations = [
        migrations.RunPython(
            run({"sqlite": SQLITE_UP, "postgresql": POSTGRES_UP}),
            run({"sqlite": SQLITE_DOWN, "postgresql": POSTGRES_DOWN}),
        ),
    ]
