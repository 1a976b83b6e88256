"""What connects a team to the outside: webhooks and their deliveries as rows,
MCP servers (their settings, tools and approvals policy), consultants and consultations.
The network calls themselves are the engine's (teams.engine).

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
