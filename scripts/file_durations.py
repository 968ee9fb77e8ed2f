"""Seconds per test file from a pytest JUnit XML report, as JSON, for `tests/durations.json`.

Why: the suite's conftest starts the longest files first, so that two xdist workers finish together.
Usage: ``python scripts/file_durations.py report.xml > tests/durations.json`` after a full run with
``-o junit_family=xunit1 --junitxml report.xml`` (xunit1 names each case's file).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def file_seconds(report: str) -> dict[str, float]:
    """{path relative to the repo: seconds of its tests, setup and teardown included}, longest first."""
    totals: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).getroot().iter("testcase"):
        path = case.get("file")
        if path is None:
            sys.exit(f"{report}: a test case names no file; run pytest with -o junit_family=xunit1")
        totals[path] += float(case.get("time") or 0.0)
    return {p: round(s, 1) for p, s in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/file_durations.py REPORT.xml > tests/durations.json")
    json.dump(file_seconds(sys.argv[1]), sys.stdout, indent=1)
    print()
