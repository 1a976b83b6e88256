"""A team's past as a thing to use: run it again (cloning), a copy as of a message or
turn (forking) within its limits (fork_limits), two teams side by side (comparing),
and the requests each model call received, kept so people read what the model read
(model_requests).

May import: the base and the other domain packages. Never observability, tools, the
engine or a face."""
