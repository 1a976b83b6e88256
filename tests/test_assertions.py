"""No test asserts a constant: `assert "text"` or `assert 1` always passes (or always
fails), so it checks nothing; the intended comparison was left out."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def constant_assertions(source: str) -> list[int]:
    """The lines of `source` whose assert tests a literal (a string, f-string, number)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant | ast.JoinedStr)
    ]


def test_no_assertion_tests_a_constant():
    found = {
        str(path.relative_to(TESTS)): lines
        for path in sorted(TESTS.rglob("*.py"))
        if (lines := constant_assertions(path.read_text()))
    }
    assert found == {}


def test_the_scan_sees_a_constant_assertion():
    source = 'assert "Error: never compared"\nassert 1\nassert f"{x}"\nassert "a" in text\n'
    assert constant_assertions(source) == [1, 2, 3]
