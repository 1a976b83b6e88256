"""The code's layers point one way: base <- domain <- observability <- tools <- engine
<- faces.

The base is what every row needs (teams.models, teams.lib, teams.errors); the domain is
teams' packages by role (run, conversation, files, history, integrations, live) and its
services, selectors and access rules; observability (traces, metrics, health) watches the
domain from above and is never imported by it; the tools (tools/) call the domain; the
engine (teams/engine/) runs turns with both; the faces (admin, pages and sockets, API,
MCP, commands, the app's wiring, the project package) sit on top. Every import counts,
lazy ones inside functions included."""

import ast
from pathlib import Path

import pytest

from tools import registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("teams", "tools", "loomsite")
LAYERS = ("base", "domain", "observability", "tools", "engine", "faces")
BASE = ("teams", "teams.errors", "teams.lib", "teams.models")
# The faces are packages: whatever lives in one is a face, nothing else is.
FACE_PACKAGES = (
    "loomsite",
    "teams.apps",
    "teams.admin",
    "teams.web",
    "teams.api",
    "teams.mcp",
    "teams.a2a",
    "teams.management",
)
# The domain's packages by role; each __init__ says what lives there.
DOMAIN_PACKAGES = (
    "teams.run",
    "teams.conversation",
    "teams.files",
    "teams.history",
    "teams.integrations",
    "teams.live",
    "teams.evals",
)
MAX_TOP_LEVEL_MODULES = 12


def _within(module: str, packages) -> bool:
    return any(module == package or module.startswith(f"{package}.") for package in packages)


def is_face(module: str) -> bool:
    return _within(module, FACE_PACKAGES)


def layer_of(module: str) -> str:
    if is_face(module):
        return "faces"
    if _within(module, ("teams.engine",)):
        return "engine"
    if _within(module, ("tools",)):
        return "tools"
    if _within(module, ("teams.observability",)):
        return "observability"
    if module == "teams" or _within(module, BASE[1:]):
        return "base"
    return "domain"


def module_files() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = module_files()


def resolve(name: str) -> str | None:
    """The project module an import names (the longest existing prefix)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from teams import services` imports the module teams.services.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for name in names:
            target = resolve(name)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def test_the_walk_sees_the_layers():
    # The test guards something: each layer has modules and real imports cross them.
    assert {layer_of(m) for m in MODULES} == set(LAYERS)
    assert "teams.run.turns" in GRAPH["teams.engine.loop"]
    assert "tools.registry" in GRAPH["teams.engine.loop"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module):
    rank = LAYERS.index(layer_of(module))
    upward = sorted(t for t in GRAPH[module] if LAYERS.index(layer_of(t)) > rank)
    assert not upward, f"{module} ({layer_of(module)}) imports a higher layer: {upward}"


def test_no_import_cycles():
    """Tarjan's strongly connected components: any with two or more modules is a cycle."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, f"modules that import each other: {cycles}"


def _string_constants(tree) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_tool_names_are_spelled_only_by_their_tools():
    """Outside tools/, texts name a tool through its class (PassTurn.name), so renaming
    a tool cannot leave a prompt pointing at one that does not exist."""
    names = {tool.name for tool in registry.all_tools()}
    assert "pass_turn" in names
    offenders = []
    for module, path in MODULES.items():
        if layer_of(module) == "tools":
            continue
        for text in _string_constants(ast.parse(path.read_text())):
            offenders += [f"{module}: {name!r} in {text[:60]!r}" for name in names if name in text]
    assert not offenders, offenders


def test_each_face_is_a_package_and_the_admin_never_imports_the_pages():
    assert all(package in MODULES for package in FACE_PACKAGES), FACE_PACKAGES
    pages = {"teams.web.views", "teams.web.urls"}
    offenders = {m: GRAPH[m] & pages for m in MODULES if m.startswith("teams.admin")}
    assert not any(offenders.values()), offenders


def test_the_domain_is_grouped_in_packages_that_say_what_they_hold():
    top_level = sorted(p.name for p in (ROOT / "teams").glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level
    for package in (*DOMAIN_PACKAGES, "teams.lib", "teams.models", "teams.observability"):
        doc = ast.get_docstring(ast.parse(MODULES[package].read_text())) or ""
        assert "May import" in doc, f"{package}'s __init__ says what it may import"


def test_the_layout_doc_names_every_module():
    layout = (ROOT / "docs" / "layout.md").read_text()
    unnamed = [
        module
        for module, path in MODULES.items()
        if path.name != "__init__.py" and path.stem not in layout
    ]
    assert not unnamed, f"docs/layout.md names no module {unnamed}"
