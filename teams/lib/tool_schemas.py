"""Tools' input schemas (an MCP server's, or a built-in tool's) checked, and arguments
validated against them, without ever opening a URL or a file and in linear time.

A schema comes from a server Loom does not control. The validator is jsonschema-rs
(`jsonschema_rs`), for two reasons the Python `jsonschema` library cannot give alone:

- its regular expressions (`pattern`, `patternProperties`) run on Rust's `regex`
  engine (`RegexOptions`), which has no backtracking: `^(a+)+$` against any input takes
  time linear in its length, and the check runs outside the GIL's long holds that
  stalled every thread of the process. A pattern that engine cannot run (lookaround,
  backreferences) makes the schema unusable, said when the server is listed.
- it resolves every `$ref` when the validator is built, through our `retriever`,
  which refuses everything: a `$ref` outside the schema itself never reaches the
  network or the disk. `schema_problem` says so at listing time, so such a tool is
  never offered.

Arguments are bounded first (`MAX_DEPTH` levels of nesting, `MAX_CHARS` characters as
JSON), as an API body is: 900 levels of lists are refused before any validator or
server sees them."""

from __future__ import annotations

import json
from functools import lru_cache

import jsonschema_rs

MAX_DEPTH = 32  # levels of nested objects and lists in one call's arguments
MAX_CHARS = 1_000_000  # characters of one call's arguments as JSON
REGEX_SIZE_LIMIT = 1_000_000  # bytes of one compiled pattern
# Keywords whose value is data, not a schema: a "$ref" inside is not a reference.
DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})
REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")


class SchemaUnusable(ValueError):
    """The schema cannot be used to validate anything; the message says why."""


def _refuse_retrieval(uri: str):
    raise SchemaUnusable(f"Loom never fetches a schema ({uri})")


def outside_references(schema) -> list[str]:
    """Every `$ref` of the schema that points outside it (anything but "#...")."""
    found: list[str] = []

    def walk(node, depth: int) -> None:
        if depth > 200 or len(found) > 10:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                if key in REFERENCE_KEYWORDS and isinstance(value, str):
                    if not value.startswith("#"):
                        found.append(value)
                elif key not in DATA_KEYWORDS:
                    walk(value, depth + 1)
        elif isinstance(node, list):
            for item in node:
                walk(item, depth + 1)

    walk(schema, 0)
    return found


@lru_cache(maxsize=512)
def _validator(schema_json: str):
    try:
        return jsonschema_rs.validator_for(
            json.loads(schema_json),
            retriever=_refuse_retrieval,
            pattern_options=jsonschema_rs.RegexOptions(size_limit=REGEX_SIZE_LIMIT),
            validate_formats=False,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or ["invalid"])[0]
        raise SchemaUnusable(f"is invalid: {first[:200]}") from None


def validator(schema: dict):
    """The compiled validator of `schema` (kept per schema); SchemaUnusable when it
    refers outside itself or is no valid JSON schema for a linear-time engine."""
    outside = outside_references(schema)
    if outside:
        raise SchemaUnusable(
            f"refers to {outside[0][:200]!r}, outside itself (Loom never fetches a schema)"
        )
    return _validator(json.dumps(schema, sort_keys=True))


def schema_problem(schema: dict) -> str | None:
    """Why `schema` cannot validate a tool's arguments ("is invalid: ...", "refers to
    ... outside itself"), or None."""
    try:
        validator(schema)
    except SchemaUnusable as exc:
        return str(exc)
    return None


def _depth(value, limit: int) -> int:
    """How deep `value` nests, counted up to limit + 1 (no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


def arguments_problem(arguments, schema: dict) -> str | None:
    """Why `arguments` do not fit `schema` ("where: what"), or None when they do. Raises
    SchemaUnusable when the schema itself cannot be used."""
    if _depth(arguments, MAX_DEPTH) > MAX_DEPTH:
        return f"arguments: nested over {MAX_DEPTH} levels deep, the most Loom accepts"
    try:
        size = len(json.dumps(arguments, ensure_ascii=False))
    except (TypeError, ValueError):
        return "arguments: not JSON"
    if size > MAX_CHARS:
        return f"arguments: {size:,} characters as JSON, over the {MAX_CHARS:,} allowed"
    try:
        validator(schema).validate(arguments)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path) or "arguments"
        return f"{where}: {exc.message}"
    return None
