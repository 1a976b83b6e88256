"""The "PM" group (made by `manage.py loom_demo`): the admin permissions a PM needs to
run and edit their teams, agents and anchors, read their history, answer PM requests,
manage their API tokens, webhooks and MCP servers (streamable HTTP ones: stdio servers
are superusers') (docs/pm-pages.md). Whatever the group allows, staff see only the
teams they manage (teams.admin.scoping)."""

PM_GROUP = "PM"
PM_PERMISSIONS = (
    "view_team",
    "change_team",
    "view_agent",
    "change_agent",
    "view_anchor",
    "change_anchor",
    "view_message",
    "view_turn",
    "view_turnstep",
    "view_query",
    "view_keeper",
    "view_keeperentry",
    "view_anchorrevision",
    "view_pmrequest",
    "change_pmrequest",
    "view_apitoken",
    "add_apitoken",
    "change_apitoken",
    "view_consultation",
    "view_workspacefile",
    "view_webhook",
    "add_webhook",
    "change_webhook",
    "delete_webhook",
    "view_webhookdelivery",
    "view_mcpserver",
    "add_mcpserver",
    "change_mcpserver",
    "delete_mcpserver",
)
