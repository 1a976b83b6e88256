"""Short modules and short functions, as the project's standards ask: no module of the
code over 700 lines, and at most 3 functions over 60 lines (a failure names each one
and its length). Today's three: the engine's tool loop (loop.execute), the MCP
server's tool table (mcp/server.pm_tools) and the live page's view (web/views.team_live)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("teams", "tools", "loomsite")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 3


def code_files() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def long_functions() -> dict[str, int]:
    """Every function (methods and nested ones included) over the limit: its lines,
    by module path and name."""
    found = {}
    for path in code_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    return found


def test_the_walk_sees_the_code():
    assert len(code_files()) > 100
    assert any(p.name == "turns.py" for p in code_files())


def test_no_module_is_over_700_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for path in code_files()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_at_most_three_functions_are_over_60_lines():
    found = long_functions()
    assert len(found) <= MAX_LONG_FUNCTIONS, f"functions over {MAX_FUNCTION_LINES} lines: {found}"
