"""The team's workspace: guarded paths, bounded reads and writes, who wrote each file
last (workspace), and every version of every file, content-addressed (revisions).

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
