"""A small suite for the eval tests: the offline coach and coder, one phase."""

import json
from pathlib import Path

import yaml
from django.core.management import call_command

OFFLINE_TEAM = {
    "agents": [
        {"name": "coach", "role": "coach", "model": "loom-offline"},
        {"name": "coder", "role": "coder", "model": "loom-offline"},
    ],
    "phases": ["implementation"],
    "max_turns": 40,
    "max_cost_usd": 1,
}
GOAL = "Outline a word counter for plain-text files."
PLAN = "notes/plan.md"  # what the offline coder writes (teams.engine.offline.lines)


def case(name="outline", checks=None, **fields):
    return {
        "name": name,
        "goal": GOAL,
        "pm_answers": ["Keep it small."],
        "checks": checks or [{"file_exists": PLAN}],
        **fields,
    }


def suite_file(tmp_path: Path, cases, name="small", **fields) -> Path:
    path = tmp_path / f"{name}-{len(list(tmp_path.iterdir()))}.yaml"
    body = {"name": name, "team": OFFLINE_TEAM, "cases": cases, **fields}
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def run_eval(tmp_path: Path, suite: Path, *args) -> dict:
    """`eval run SUITE --json FILE ...`, the report it wrote."""
    out = tmp_path / f"report-{len(list(tmp_path.iterdir()))}.json"
    call_command("eval", "run", str(suite), "--json", str(out), "--concurrency", "1", *args)
    return json.loads(out.read_text())


def checks_of(report: dict, name: str, repeat: int = 1) -> list[dict]:
    found = next(c for c in report["cases"] if c["case"] == name and c["repeat"] == repeat)
    return found["checks"]
