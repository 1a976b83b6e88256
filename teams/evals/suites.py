"""A suite file: the team template every case starts from, the cases, their checks.

Read from YAML (`suite_load`) or taken as JSON (`suite_parse`, the API's), validated
by the pydantic models below; a mistake is a SuiteError naming the line (YAML) and the
field, e.g. `demo.yaml, line 14, cases[0].checks[2].max_turns: Input should be
greater than or equal to 1`. `--set KEY=VALUE` changes the template before it is
validated (`overrides_apply`)."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from teams.errors import InvalidInput
from teams.models import AGENT_NAME_PATTERN, HUMAN_TEXT_LIMIT, MAX_PHASES, PHASE_NAME_MAX, AgentRole

MAX_CASES = 200
MAX_REPEAT = 20
MAX_FILE_CHARS = 200 * 1024  # a workspace file's limit (teams.files.workspace)
CHECK_KINDS = ("command", "file_exists", "file_contains", "max_turns", "max_cost_usd", "rubric")
CASE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,59}$"
# Fields of POST /api/teams a suite's template may not set: each case's team gets its
# own slug and its own fresh folder.
NOT_IN_TEMPLATE = {
    "slug": "each case's team gets its own slug",
    "workspace": "each case's team gets a fresh workspace folder",
}


class SuiteError(InvalidInput):
    """A suite that cannot run: the message names the line (when read from YAML) and
    the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _relative_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts:
        raise ValueError(f"{path!r} is not a relative path inside the workspace")
    return path


Files = dict[
    Annotated[str, Field(max_length=500)], Annotated[str, Field(max_length=MAX_FILE_CHARS)]
]


def _check_paths(files: dict[str, str]) -> dict[str, str]:
    for path in files:
        _relative_path(path)
    return files


class AgentSpec(_Strict):
    name: str = Field(pattern=AGENT_NAME_PATTERN)
    role: AgentRole
    model: str = Field("", max_length=100, description="Empty: the default model.")
    role_prompt: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    max_cost_usd: Decimal | None = Field(None, gt=0, max_digits=10, decimal_places=4)
    max_tokens: int | None = Field(None, ge=256, le=128_000, description="One reply's most.")
    position: int | None = Field(None, ge=0, le=10_000, description="Order in the rotation.")


class TeamTemplate(_Strict):
    """Any field POST /api/teams takes, less the slug and workspace (each case's own)."""

    name: str = Field("", max_length=120)
    goal: str = Field("", max_length=HUMAN_TEXT_LIMIT, description="A case's goal replaces it.")
    plan: str = Field("", max_length=100_000)
    phases: list[Annotated[str, Field(min_length=1, max_length=PHASE_NAME_MAX)]] | None = Field(
        None, min_length=1, max_length=MAX_PHASES
    )
    max_turns: int = Field(200, ge=1, le=1_000_000)
    max_cost_usd: Decimal = Field(Decimal("5"), ge=0, max_digits=10, decimal_places=4)
    agents: list[AgentSpec] = Field(min_length=1, max_length=50)

    @model_validator(mode="before")
    @classmethod
    def _not_per_case(cls, data):
        if isinstance(data, dict):
            for field, why in NOT_IN_TEMPLATE.items():
                if field in data:
                    raise ValueError(f"{field} is not set in a suite: {why}")
        return data

    @field_validator("agents")
    @classmethod
    def _unique_agents(cls, agents):
        names = [a.name for a in agents]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two agents are named {twice[0]!r}")
        return agents


class CommandCheck(_Strict):
    command: str = Field(min_length=1, max_length=2000)
    files: Files = Field({}, description="Added for this check only; the team never sees them.")
    timeout_seconds: int = Field(60, ge=1, le=600)

    _paths = field_validator("files")(_check_paths)


class FileExistsCheck(_Strict):
    file_exists: str = Field(max_length=500)

    _path = field_validator("file_exists")(_relative_path)


class FileContains(_Strict):
    path: str = Field(max_length=500)
    pattern: str = Field(min_length=1, max_length=1000, description="A regular expression.")

    _path = field_validator("path")(_relative_path)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return pattern


class FileContainsCheck(_Strict):
    file_contains: FileContains


class MaxTurnsCheck(_Strict):
    max_turns: int = Field(ge=1)


class MaxCostCheck(_Strict):
    max_cost_usd: Decimal = Field(ge=0, max_digits=10, decimal_places=4)


class RubricCheck(_Strict):
    rubric: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)
    model: str | None = Field(
        None, max_length=100, description="The judge; the suite's by default."
    )


def check_kind(data: Any) -> str | None:
    """Which check a mapping is: the one kind key it has."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if not isinstance(data, dict):
        return None
    kinds = [kind for kind in CHECK_KINDS if kind in data]
    return kinds[0] if len(kinds) == 1 else None


Check = Annotated[
    Annotated[CommandCheck, Tag("command")]
    | Annotated[FileExistsCheck, Tag("file_exists")]
    | Annotated[FileContainsCheck, Tag("file_contains")]
    | Annotated[MaxTurnsCheck, Tag("max_turns")]
    | Annotated[MaxCostCheck, Tag("max_cost_usd")]
    | Annotated[RubricCheck, Tag("rubric")],
    Discriminator(
        check_kind,
        custom_error_type="check_kind",
        custom_error_message=f"a check has exactly one of {', '.join(CHECK_KINDS)}",
    ),
]


class CaseSpec(_Strict):
    name: str = Field(pattern=CASE_NAME_PATTERN, description="Letters, digits, '.', '_', '-'.")
    goal: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)
    files: Files = Field({}, description="The workspace before the run.")
    pm_answers: list[Annotated[str, Field(min_length=1, max_length=HUMAN_TEXT_LIMIT)]] = Field(
        [], max_length=100, description="Answers to the team's questions, in order."
    )
    checks: list[Check] = Field(min_length=1, max_length=50)

    _paths = field_validator("files")(_check_paths)


class SuiteSpec(_Strict):
    name: str = Field(min_length=1, max_length=120)
    team: TeamTemplate
    cases: list[CaseSpec] = Field(min_length=1, max_length=MAX_CASES)
    judge: str = Field("", max_length=100, description="The rubric checks' model by default.")
    judge_max_cost_usd: Decimal = Field(
        Decimal("1"),
        ge=0,
        max_digits=10,
        decimal_places=4,
        description="What the run's judges may spend together.",
    )
    case_timeout_seconds: int = Field(
        900, ge=1, le=86_400, description="A case's team still at work after this stops."
    )

    @field_validator("cases")
    @classmethod
    def _unique_cases(cls, cases):
        names = [c.name for c in cases]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two cases are named {twice[0]!r}")
        return cases


# --- reading -----------------------------------------------------------------------


def _without_tags(loc: tuple) -> tuple:
    """An error's location less the check union's tag (the kind after a check's index)."""
    return tuple(
        part
        for i, part in enumerate(loc)
        if not (
            i >= 2
            and loc[i - 2] == "checks"
            and isinstance(loc[i - 1], int)
            and part in CHECK_KINDS
        )
    )


def _dotted(loc: tuple) -> str:
    """('cases', 0, 'checks', 1, 'max_turns') -> 'cases[0].checks[1].max_turns'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _line_of(node, loc: tuple) -> int | None:
    """The line (1-based) of the deepest YAML node the error's location reaches."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
            if child is None:  # a key that is missing: the mapping's line
                key = next((k for k, _ in node.value if getattr(k, "value", None) == part), None)
                child = key
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            child = node.value[part] if part < len(node.value) else None
        if child is None:
            break
        node, line = child, child.start_mark.line + 1
    return line


def _problem(error: dict) -> str:
    message = error["msg"]
    return message.removeprefix("Value error, ")


def suite_parse(data: Any, *, source: str = "suite", root=None) -> SuiteSpec:
    """A validated suite from its plain data; SuiteError naming the first problem's
    field (and line, given the YAML `root` node)."""
    if not isinstance(data, dict):
        raise SuiteError(f"{source}: a suite is a mapping with name, team and cases.")
    try:
        return SuiteSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = _without_tags(first["loc"])
        field = _dotted(loc)
        line = _line_of(root, loc) if root is not None else None
        where = f"{source}, line {line}" if line else source
        more = len(exc.errors()) - 1
        also = f" (and {more} more problem{'s' * (more > 1)})" if more else ""
        raise SuiteError(
            f"{where}, {field or 'suite'}: {_problem(first)}{also}", field=field
        ) from None


def suite_load(path: str | Path, *, overrides: list[str] = ()) -> SuiteSpec:
    """Read and validate a suite file, with `--set` overrides applied to its team."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(
            f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})."
        ) from None
    return suite_read(text, source=str(path), overrides=overrides)


def suite_read(text: str, *, source: str = "suite", overrides: list[str] = ()) -> SuiteSpec:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f", line {mark.line + 1}" if mark else ""
        raise SuiteError(
            f"{source}{line}: not valid YAML ({exc.problem or exc.context})."
        ) from None
    except yaml.YAMLError as exc:
        raise SuiteError(f"{source}: not valid YAML ({exc}).") from None
    if overrides and isinstance(data, dict):
        data = overrides_apply(data, overrides)
    return suite_parse(data, source=source, root=root)


# --- --set KEY=VALUE ---------------------------------------------------------------

LIST_FIELDS = {"phases"}


def _value(key: str, raw: str):
    """The value a --set gives: a comma list for a list field, else a YAML scalar."""
    last = key.rsplit(".", 1)[-1]
    if last in LIST_FIELDS:
        return [part.strip() for part in raw.split(",") if part.strip()]
    if last in ("model", "name", "role", "role_prompt", "goal", "plan"):
        return raw
    try:
        return yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        return raw


def override_apply(team: dict, setting: str) -> dict:
    """One `KEY=VALUE` on the team template: `max_turns=40`,
    `phases=implementation,code-review`, `agents.coder.model=claude-haiku-4-5` (an
    agent by its name)."""
    key, sep, raw = setting.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SuiteError(f"--set {setting}: give KEY=VALUE, e.g. agents.coder.model=loom-offline.")
    parts = key.split(".")
    node, i = team, 0
    while i < len(parts) - 1:
        part, child = parts[i], node.get(parts[i])
        if isinstance(child, list):  # a list of named items: the next part is a name
            if i + 2 > len(parts) - 1:
                raise SuiteError(
                    f"--set {key}: name the {part} item and its field, e.g. {part}.NAME.model=...",
                    field=key,
                )
            name = parts[i + 1]
            node = next((a for a in child if isinstance(a, dict) and a.get("name") == name), None)
            if node is None:
                names = ", ".join(str(a.get("name")) for a in child if isinstance(a, dict))
                raise SuiteError(
                    f"--set {key}: no {part.removesuffix('s')} named {name!r} "
                    f"(there are: {names or 'none'}).",
                    field=key,
                )
            i += 2
            continue
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise SuiteError(f"--set {key}: {part} is not a mapping.", field=key)
        node, i = child, i + 1
    node[parts[-1]] = _value(key, raw)
    return team


def overrides_apply(data: dict, overrides: list[str]) -> dict:
    """The suite's data with each --set applied to its `team`, in order."""
    team = data.get("team")
    if not isinstance(team, dict):
        raise SuiteError("--set changes the suite's team, and this suite has none.", field="team")
    for setting in overrides:
        override_apply(team, setting)
    return data


def case_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:30] or "case"
