"""The Django admin, the console: every teams-app row scoped to the teams the user may
see (scoping), what a PM edits (teams), the records of what happened (records), what
programs use (integrations) and the site-wide catalog (catalog)."""

# The tool registry lists tools in the order their modules are first imported, and
# this package is imported first (admin autodiscovery). The engine's providers import
# them in the order GET /api/tools and the OpenAPI document have always listed them.
from teams.engine import providers  # noqa: F401, I001 (first: see above)
from teams.admin import catalog, integrations, records, teams  # noqa: F401 (they register)
