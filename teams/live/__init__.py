"""The browser sockets (consumers), their routes, and the per-user socket slots."""
