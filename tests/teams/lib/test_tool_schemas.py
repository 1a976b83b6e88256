"""teams.lib.tool_schemas: a schema's `$ref` outside itself is never fetched, patterns
run in linear time, arguments are bounded (issue 33, findings 2, 3 and 7)."""

import time

import pytest

from teams.lib import tool_schemas
from tests.fakes.counting_server import CountingServer


def schema_with(prop: dict) -> dict:
    return {"type": "object", "properties": {"x": prop}}


@pytest.fixture
def metadata():
    with CountingServer() as target:
        yield target


@pytest.mark.parametrize("where", ["http", "file"])
def test_a_ref_outside_the_schema_is_a_problem_and_is_never_fetched(metadata, where):
    ref = f"{metadata.url}/latest/meta-data/" if where == "http" else "file:///etc/passwd"
    schema = schema_with({"$ref": ref})
    assert tool_schemas.schema_problem(schema) == (
        f"refers to {ref!r}, outside itself (Loom never fetches a schema)"
    )
    with pytest.raises(tool_schemas.SchemaUnusable):
        tool_schemas.arguments_problem({"x": "a"}, schema)
    assert metadata.requests == []


def test_a_relative_ref_under_a_remote_id_is_not_fetched_either(metadata):
    schema = {"$id": f"{metadata.url}/root", "type": "object", "properties": {"x": {"$ref": "x"}}}
    assert "outside itself" in tool_schemas.schema_problem(schema)
    assert metadata.requests == []


def test_a_local_ref_works_and_a_ref_in_data_is_only_data():
    schema = {
        "type": "object",
        "$defs": {"word": {"type": "string"}},
        "properties": {"x": {"$ref": "#/$defs/word", "default": {"$ref": "http://x/"}}},
    }
    assert tool_schemas.schema_problem(schema) is None
    assert tool_schemas.arguments_problem({"x": "a"}, schema) is None
    assert tool_schemas.arguments_problem({"x": 5}, schema) == 'x: 5 is not of type "string"'


def test_a_pathological_pattern_runs_in_linear_time():
    schema = schema_with({"type": "string", "pattern": "^(a+)+$"})
    started = time.perf_counter()
    problem = tool_schemas.arguments_problem({"x": "a" * 40 + "!"}, schema)
    assert time.perf_counter() - started < 0.1
    assert problem == 'x: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" does not match "^(a+)+$"'
    keys = {"type": "object", "patternProperties": {"^(a+)+$": {"type": "integer"}}}
    started = time.perf_counter()
    assert tool_schemas.arguments_problem({"a" * 40 + "!": "text"}, keys) is None
    assert time.perf_counter() - started < 0.1


def test_a_pattern_the_linear_engine_cannot_run_makes_the_schema_invalid():
    problem = tool_schemas.schema_problem(schema_with({"type": "string", "pattern": "(a)\\1"}))
    assert problem.startswith("is invalid: ")


def test_arguments_nested_too_deep_are_refused_before_validation():
    deep: list = []
    inner = deep
    for _ in range(900):
        inner.append([])
        inner = inner[0]
    problem = tool_schemas.arguments_problem({"x": deep}, {"type": "object"})
    assert problem == "arguments: nested over 32 levels deep, the most Loom accepts"
    shallow = {"x": [[[["fine"]]]]}
    assert tool_schemas.arguments_problem(shallow, {"type": "object"}) is None
