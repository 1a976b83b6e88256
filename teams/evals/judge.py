"""A rubric check's judge: what it is asked (the goal, the team's final summary, the
files, the rubric) and how its verdict is read. The call itself is the engine's
(teams.engine.evals), through the provider layer, checked against the run's judge
budget and priced like every call."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from teams.lib.catalog import Usage

VERDICT_TOOL = "verdict"
JUDGE_MAX_TOKENS = 1024
FILE_CHARS = 12_000  # of one file, in the request
FILES_CHARS = 60_000  # of all files together

SYSTEM = (
    "You judge the work of a team of AI agents against one rubric. Judge the outcome "
    "(the files they left and their final summary), not how plausible their plans "
    "sound. Answer only by calling the verdict tool: passed is true when the work meets "
    "the rubric, and reasons says why in a few sentences, citing files."
)

VERDICT_SCHEMA = {
    "type": "object",
    "properties": {
        "passed": {"type": "boolean", "description": "Does the work meet the rubric?"},
        "reasons": {"type": "string", "description": "Why, in a few sentences."},
    },
    "required": ["passed", "reasons"],
}


@dataclass(frozen=True)
class JudgeRequest:
    system: list[dict]
    messages: list[dict]
    tools: list[dict]


@dataclass
class Verdict:
    passed: bool
    reasons: str
    model: str = ""
    usage: Usage = field(default_factory=Usage)


def judge_request(*, rubric: str, goal: str, summary: str, files: dict[str, str]) -> JudgeRequest:
    """The request a judge gets: the goal, the summary, the files (each cut at
    FILE_CHARS, all at FILES_CHARS) and the rubric."""
    shown, budget = [], FILES_CHARS
    for path in sorted(files):
        text = files[path][: min(FILE_CHARS, budget)]
        if not text and files[path]:
            shown.append(f"--- {path} (not shown: the request's room for files is used up)")
            continue
        cut = " (cut)" if len(text) < len(files[path]) else ""
        shown.append(f"--- {path}{cut}\n{text}")
        budget -= len(text)
    prompt = (
        f"## The team's goal\n{goal}\n\n"
        f"## The team's final summary\n{summary or '(none)'}\n\n"
        f"## The files in its workspace\n{chr(10).join(shown) or '(none)'}\n\n"
        f"## The rubric\n{rubric}"
    )
    tool = {
        "name": VERDICT_TOOL,
        "description": "Give your verdict on the rubric.",
        "input_schema": VERDICT_SCHEMA,
    }
    return JudgeRequest(
        system=[{"type": "text", "text": SYSTEM}],
        messages=[{"role": "user", "content": prompt}],
        tools=[tool],
    )


def verdict_of(content: list[dict]) -> Verdict | None:
    """The verdict in a judge's reply (its verdict tool call, or the same as JSON
    text), or None when it gave none."""
    for block in content:
        if block.get("type") == "tool_use" and block.get("name") == VERDICT_TOOL:
            return _verdict(block.get("input"))
    text = "".join(b.get("text", "") for b in content if b.get("type") == "text").strip()
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        try:
            return _verdict(json.loads(text[start : end + 1]))
        except json.JSONDecodeError:
            return None
    return None


def _verdict(data) -> Verdict | None:
    if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
        return None
    return Verdict(passed=data["passed"], reasons=str(data.get("reasons", "")).strip())
