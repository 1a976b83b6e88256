"""`python -m tests.fakes.mcp_stdio` (or by path): the fake MCP server over stdio
(tests.fakes.mcp_servers has its tools)."""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run by path: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.fakes.mcp_servers import run_stdio  # noqa: E402

if __name__ == "__main__":
    run_stdio()
