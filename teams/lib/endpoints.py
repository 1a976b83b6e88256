"""Model endpoints and model ids: where a model id's calls go.

A model id is `ENDPOINT/MODEL` (`ollama/qwen3:8b`, `openai/gpt-5-mini`,
`openrouter/meta-llama/llama-4-scout`: everything after the first slash is the
endpoint's own model name); a bare `claude-…` id means the `anthropic` endpoint and
`loom-offline` the offline model, so ids saved before endpoints existed keep working.

An endpoint is data: the built-in ones below, ready when their key variable is set,
and the rows superusers add or change (teams.models.ModelEndpoint, handed to this
module as `endpoint_rows` by TeamsConfig.ready(): the models import this module, not
the other way round). A row named like a built-in replaces it. Keys are never held
here: an endpoint names the environment variable that holds its key."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.conf import settings

OFFLINE_MODEL = "loom-offline"
CLAUDE_PREFIX = "claude-"
ENDPOINT_NAME_PATTERN = r"^[a-z0-9-]{1,32}$"
ENDPOINT_NAME = re.compile(ENDPOINT_NAME_PATTERN)
ANTHROPIC_ENDPOINT = "anthropic"
MODEL_ID_MAX = 100

# The two APIs an endpoint may speak (teams.models.EndpointApi is their TextChoices).
API_ANTHROPIC = "anthropic"
API_OPENAI = "openai"


@dataclass(frozen=True)
class Endpoint:
    name: str
    api: str
    base_url: str = ""  # empty: the SDK's default (the anthropic one: ANTHROPIC_BASE_URL)
    key_env: str = ""  # the NAME of the variable holding the key; empty: no key
    header_vars: Mapping[str, str] = field(default_factory=dict, hash=False)  # header -> var
    local: bool = False  # private addresses allowed; its models free unless priced
    builtin: bool = False  # one of BUILTINS as shipped (not replaced by a row)

    def key(self) -> str:
        """The key from the environment ("" when none is named or it is unset). The
        anthropic one is read through settings, as Claude always was."""
        if not self.key_env:
            return ""
        if self.key_env == "ANTHROPIC_API_KEY":
            return settings.ANTHROPIC_API_KEY or ""
        return os.environ.get(self.key_env, "")

    def headers(self) -> dict[str, str]:
        """The extra headers, each from its variable (unset ones left out)."""
        values = {header: os.environ.get(var, "") for header, var in self.header_vars.items()}
        return {header: value for header, value in values.items() if value}

    def problem(self) -> str:
        """Why calls to this endpoint cannot be made now (a variable unset), or ""."""
        if self.key_env and not self.key():
            return (
                f"the endpoint {self.name!r} needs its key: the variable {self.key_env} is not set"
            )
        unset = [var for var in self.header_vars.values() if not os.environ.get(var)]
        if unset:
            return (
                f"the endpoint {self.name!r} sends headers from variables that are not set: "
                + ", ".join(sorted(unset))
            )
        return ""

    def url(self) -> str:
        if self.base_url or self.api != API_ANTHROPIC:
            return self.base_url
        return settings.ANTHROPIC_BASE_URL or ""


BUILTINS: dict[str, Endpoint] = {
    e.name: e
    for e in (
        Endpoint(ANTHROPIC_ENDPOINT, API_ANTHROPIC, "", "ANTHROPIC_API_KEY", builtin=True),
        Endpoint("openai", API_OPENAI, "https://api.openai.com/v1", "OPENAI_API_KEY", builtin=True),
        Endpoint(
            "gemini",
            API_OPENAI,
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "GEMINI_API_KEY",
            builtin=True,
        ),
        Endpoint(
            "openrouter",
            API_OPENAI,
            "https://openrouter.ai/api/v1",
            "OPENROUTER_API_KEY",
            builtin=True,
        ),
        Endpoint("ollama", API_OPENAI, "http://127.0.0.1:11434/v1", "", local=True, builtin=True),
    )
}

# The table as this process last read it: re-read after a save here, and at least
# every TABLE_TTL seconds (another process saved).
TABLE_TTL = 30.0
_rows = None
_table: dict[str, Endpoint] | None = None
_read_at = 0.0


def endpoints_load_with(loader) -> None:
    """`loader()` yields the rows as Endpoints (teams.models.endpoint_rows)."""
    global _rows
    _rows = loader
    endpoints_invalidate()


def endpoints_invalidate() -> None:
    global _table
    _table = None


def endpoint_table() -> dict[str, Endpoint]:
    """Name -> Endpoint: the built-ins, and the rows (a row replaces its built-in)."""
    global _table, _read_at
    now = time.monotonic()
    if _table is None or now - _read_at > TABLE_TTL:
        table = dict(BUILTINS)
        table.update({e.name: e for e in (_rows() if _rows is not None else ())})
        _table, _read_at = dict(sorted(table.items())), now
    return _table


@dataclass(frozen=True)
class Route:
    """Where a model id goes: `endpoint` (None for the offline model) asked for
    `model`, the endpoint's own name for it; `problem` says why it goes nowhere."""

    endpoint: Endpoint | None
    model: str
    problem: str = ""


def shape_problem(model_id: str) -> str:
    """What is wrong with `model_id` as a model id, said after the id ("is not a model
    id: ..."; checked without the table, e.g. on LOOM_MODEL before the database is
    there), or ""."""
    if not model_id or any(c.isspace() for c in model_id):
        return "is not a model id: it is empty or contains whitespace"
    if len(model_id) > MODEL_ID_MAX:
        return f"is not a model id: it is longer than {MODEL_ID_MAX} characters"
    if model_id == OFFLINE_MODEL or (
        model_id.startswith(CLAUDE_PREFIX) and model_id != CLAUDE_PREFIX
    ):
        return ""
    name, slash, rest = model_id.partition("/")
    if not slash:
        return (
            "is a model no endpoint serves: write ENDPOINT/MODEL (e.g. ollama/qwen3:8b, "
            f"openai/gpt-5-mini), a {CLAUDE_PREFIX}… id or {OFFLINE_MODEL}"
        )
    if not ENDPOINT_NAME.match(name):
        return (
            f"is not a model id: {name[:40]!r} before the slash is no endpoint name "
            "(a-z, 0-9 and -, up to 32)"
        )
    if not rest:
        return f"is not a model id: no model follows the endpoint {name!r}"
    return ""


def route(model_id: str) -> Route:
    problem = shape_problem(model_id)
    if problem:
        return Route(None, model_id, f"{model_id[:MODEL_ID_MAX]!r} {problem}")
    if model_id == OFFLINE_MODEL:
        return Route(None, model_id)
    name, slash, rest = model_id.partition("/")
    if not slash:  # a bare claude-… id
        name, rest = ANTHROPIC_ENDPOINT, model_id
    endpoint = endpoint_table().get(name)
    if endpoint is None:
        known = ", ".join(endpoint_table())
        return Route(
            None,
            rest,
            f"{model_id!r} names the endpoint {name!r}, which does not exist "
            f"(endpoints: {known}); a superuser adds it: manage.py model endpoint add",
        )
    return Route(endpoint, rest)


def is_local(model_id: str) -> bool:
    """Is this id served by a `local` endpoint (free unless it has a price row)?"""
    endpoint = route(model_id).endpoint
    return endpoint is not None and endpoint.local
