"""The Django admin, the console: every teams-app row scoped to the teams the user may
see (scoping), what a PM edits (teams), the records of what happened (records), what
programs use (integrations) and the site-wide catalog (catalog)."""

from teams.admin import catalog, integrations, records, teams  # noqa: F401 (they register)
