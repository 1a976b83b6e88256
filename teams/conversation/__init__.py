"""What agents and the PM say to each other: the query router (questions), PM
requests and their answers (pm_requests), approvals of tool calls, keepers (offload,
search, retrieve), the trajectory/tactic/action hierarchy and the plan (hierarchy), and
the phase guide.

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
