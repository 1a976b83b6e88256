"""Running a team: its status machine (lifecycle), the PM's and the engine's actions on
it (team_actions), turns (queue, claim, finish, fail, the sweeper's repairs: turns),
budgets and usage, the stuck checks, steering, and drift with its alerts.

May import: the base (teams.models, teams.lib, teams.errors) and the other domain
packages. Never observability, tools, the engine or a face."""
