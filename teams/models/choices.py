"""The choices, limits and validators the rows share (statuses as TextChoices that the
constraints use)."""

import uuid

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, RegexValidator
from django.db import models

DEFAULT_PHASES = ["refinement", "planning", "pre-code-review", "implementation", "code-review"]
AGENT_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
ANCHOR_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$"

team_slug_validator = RegexValidator(
    r"^[a-z0-9]+(?:-[a-z0-9]+)*$", "Team slugs are lowercase letters, digits and dashes."
)
agent_name_validator = RegexValidator(
    AGENT_NAME_PATTERN,
    "Agent names start with a letter and use only letters, digits, '-' and '_' "
    "(at most 40), so they work as @mentions.",
)


# Choices live at module level so the models' constraints can use them (a Meta
# cannot see its own model's nested classes); each model exposes its own as an alias.


class TeamStatus(models.TextChoices):
    IDLE = "idle", "Idle"
    RUNNING = "running", "Running"
    AWAITING_PM = "awaiting_pm", "Awaiting PM"
    PAUSED = "paused", "Paused"
    DONE = "done", "Done"


class AgentRole(models.TextChoices):
    COACH = "coach", "Coach"
    RESEARCHER = "researcher", "Researcher"
    CODER = "coder", "Coder"
    REVIEWER = "reviewer", "Reviewer"
    TESTER = "tester", "Tester"
    EXTERNAL = "external", "External (driven over the API)"


class TurnStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # Stopped at a tool call that waits for the PM's approval; re-queued by the answer.
    WAITING = "waiting", "Waiting for approval"


class TurnOutcome(models.TextChoices):
    NONE = "", "—"
    MESSAGE = "message", "Message"
    PASS = "pass", "Pass"
    PM_REQUEST = "pm_request", "PM request"
    PHASE_COMPLETE = "phase_complete", "Phase complete"
    ERROR = "error", "Error"


class QueryStatus(models.TextChoices):
    OPEN = "open", "Open"
    ANSWERED = "answered", "Answered"
    EXPIRED = "expired", "Expired"


class MessageKind(models.TextChoices):
    CHAT = "chat", "Chat"
    PM = "pm", "PM"
    SYSTEM = "system", "System"
    PASS_NOTE = "pass_note", "Pass note"
    PHASE_SUMMARY = "phase_summary", "Phase summary"
    PEER = "peer", "Peer message"
    QUERY = "query", "Query"
    ANSWER = "answer", "Answer"
    TOOL_CALL = "tool_call", "Tool call"
    TOOL_RESULT = "tool_result", "Tool result"
    # The PM steering (teams.run.steering): a private note for one agent's next turn, and
    # a turn the PM wrote in an agent's seat.
    NUDGE = "nudge", "PM nudge"
    SEAT = "seat", "Written by the PM for an agent"


class PMRequestStatus(models.TextChoices):
    OPEN = "open", "Open"
    ANSWERED = "answered", "Answered"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_TURN_STATUSES = (TurnStatus.QUEUED, TurnStatus.RUNNING)


# The most a person (or a program acting as one) may submit in one text: a PM
# message or answer, a goal, a role prompt, an anchor. Agents' own output is bounded
# by the model's max_tokens instead.
HUMAN_TEXT_LIMIT = 20_000
human_text = MaxLengthValidator(
    HUMAN_TEXT_LIMIT,
    "At most %(limit_value)s characters are accepted here (this text has %(show_value)s).",
)

# The caps on what an agent's tool call or an API request may submit (issue 22), one
# table in docs/api.md "Limits": a message, question, answer, prompt or summary shares
# a person's cap (HUMAN_TEXT_LIMIT); a name, an id, a role or a label is a short text;
# a workspace path and a file's content keep the workspace's own limits
# (teams.files.workspace.MAX_PATH_CHARS, MAX_WRITE_BYTES); a search query keeps the keepers'
# (teams.conversation.keepers.MAX_QUERY_CHARS); an anchor key its column's width (Anchor.key).
SHORT_TEXT_LIMIT = 200
PHASE_GUIDE_TEXT_LIMIT = 1000  # one line of a phase guide

# A team's plan grows with every phase summary, so it may be longer than one paste.
PLAN_LIMIT = 100_000
plan_text = MaxLengthValidator(
    PLAN_LIMIT, "A plan has at most %(limit_value)s characters (this one has %(show_value)s)."
)

PHASES_NEEDED = "A team needs at least one phase, each a non-empty name."


MAX_PHASES = 1000
PHASE_NAME_MAX = 60  # as Turn.phase and Message.phase store it


def validate_phases(value) -> None:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(p, str) and p.strip() for p in value)
    ):
        raise ValidationError(PHASES_NEEDED)
    if len(value) > MAX_PHASES or any(len(p) > PHASE_NAME_MAX or "\x00" in p for p in value):
        raise ValidationError(
            f"A team has at most {MAX_PHASES} phases, each named in at most "
            f"{PHASE_NAME_MAX} characters (no NUL characters)."
        )


def validate_tool_access(value) -> None:
    """{tool: {"roles": [role, ...], "phases": [phase, ...]}}, either list optional."""
    problem = (
        'Tool access is {"tool_name": {"roles": [...], "phases": [...]}}: lists of role '
        "and phase names (an empty list means all)."
    )
    if not isinstance(value, dict):
        raise ValidationError(problem)
    for rule in value.values():
        if not isinstance(rule, dict) or set(rule) - {"roles", "phases"}:
            raise ValidationError(problem)
        for names in rule.values():
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ValidationError(problem)
        unknown = set(rule.get("roles", [])) - set(AgentRole.values)
        if unknown:
            raise ValidationError(
                f"Unknown role {sorted(unknown)[0]!r} in tool access; roles are "
                + ", ".join(AgentRole.values)
                + "."
            )


def validate_approvals(value) -> None:
    """{tool: "auto" | "ask" | "never"}."""
    policies = ("auto", "ask", "never")
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and v in policies for k, v in value.items()
    ):
        raise ValidationError('Approval policies are {"tool_name": "auto" | "ask" | "never"}.')


def validate_phase_guide(value) -> None:
    """{phase: {"produce": text, role: text, ...}}: texts of at most 1,000 characters."""
    problem = (
        'A phase guide is {"phase": {"produce": "...", "coder": "...", ...}}: a text per '
        "key, each at most 1,000 characters."
    )
    if not isinstance(value, dict):
        raise ValidationError(problem)
    for lines in value.values():
        if not isinstance(lines, dict):
            raise ValidationError(problem)
        for key, text in lines.items():
            if key != "produce" and key not in AgentRole.values:
                raise ValidationError(f"Unknown key {key!r} in the phase guide. {problem}")
            if not isinstance(text, str) or len(text) > PHASE_GUIDE_TEXT_LIMIT:
                raise ValidationError(problem)


def default_phases() -> list[str]:
    return list(DEFAULT_PHASES)


def new_query_key() -> str:
    return "q-" + uuid.uuid4().hex[:12]


class EvalRunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    DONE = "done", "Done"


class EvalCaseStatus(models.TextChoices):
    """Where one case of an eval run stands: waiting for a slot, its team at work, its
    team finished (every phase done), or stopped before the end (an unscripted PM
    request, a budget reached, a turn that failed, the case's time up)."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    STOPPED = "stopped", "Stopped"
