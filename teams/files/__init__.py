"""The team's workspace: guarded paths, bounded reads and writes, who wrote each file
last (workspace), every version of every file, content-addressed (revisions), and
shell commands run on a folder in a bubblewrap sandbox (sandbox, its launcher
sandbox_launch and the toolchain inside it).

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
