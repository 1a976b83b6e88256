"""Print the slowest tests of one or more pytest runs, from their JUnit XML reports
(`pytest --junitxml=...`); a test's time is its setup, call and teardown together.

Usage: slowest_tests.py COUNT LABEL=REPORT.xml [LABEL=REPORT.xml ...]
A report that does not exist (a run that was skipped) is left out."""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def timings(label: str, report: Path) -> list[tuple[float, str]]:
    found = []
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        found.append((float(case.get("time") or 0), f"{label:<10}  {name}"))
    return found


def main() -> int:
    count, reports = int(sys.argv[1]), sys.argv[2:]
    rows = []
    for spec in reports:
        label, _, path = spec.partition("=")
        if Path(path).exists():
            rows += timings(label, Path(path))
    if not rows:
        return 0
    print(f"== The {count} slowest tests (setup + call + teardown)")
    for seconds, name in sorted(rows, reverse=True)[:count]:
        print(f"{seconds:8.2f}s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
