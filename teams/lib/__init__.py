"""Plain helpers the rows themselves need, with no rows of their own: model ids and
their default prices (catalog), and the outbound guard every request Loom sends to an
address a person gave passes (outbound), and tools' input schemas applied without
fetching anything, in linear time (tool_schemas).

May import: nothing of the project (the standard library, Django's settings and
third-party packages only)."""
