"""A finished case's outcome and its check results: plain values, read by the runs,
the pages and the API without importing pydantic-evals (teams.evals.checks scores)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from teams.evals.judge import Verdict

MAX_FILES = 200  # read for the judge and the file checks
MAX_FILE_BYTES = 200 * 1024


@dataclass(frozen=True)
class Outcome:
    """What a case's team left when it stopped."""

    goal: str
    summary: str
    files: dict[str, str]
    folder: str
    turns: int
    cost_usd: Decimal


@dataclass(frozen=True)
class CheckResult:
    kind: str
    passed: bool
    detail: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "passed": self.passed, "detail": self.detail}


# (rubric, model, outcome) -> the verdict; the engine's, budgeted and priced.
Judge = Callable[[str, str, Outcome], Verdict]


def read_folder(folder: Path) -> dict[str, str]:
    """The folder's text files (at most MAX_FILES of MAX_FILE_BYTES each), by relative
    path; links and binary files are left out."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        if len(found) >= MAX_FILES:
            break
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()[:MAX_FILE_BYTES]
        try:
            found[path.relative_to(folder).as_posix()] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return found


@dataclass
class ToScore:
    """One finished case to score: its key, its outcome, its suite checks."""

    key: str
    outcome: Outcome
    checks: list
