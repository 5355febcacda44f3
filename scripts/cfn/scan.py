#!/usr/bin/env python3
"""Runs checkov on translated templates and compares its findings with checkov-baseline.yaml.

    scan.py CHECKOV TEMPLATE.json...

Exit 1 when a finding is not in the baseline (fix it, or accept it there with its reason) or a
baseline entry no longer occurs (remove it); 0 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


def findings(checkov: str, path: str) -> set[tuple[str, str]]:
    run = subprocess.run(
        [checkov, "-f", path, "--framework", "cloudformation", "--quiet", "--compact", "--skip-download", "-o", "json"],
        capture_output=True,
        text=True,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_NO_OUTPUT_FILE": "1"},
    )
    if run.returncode not in (0, 1):
        sys.exit(f"checkov failed on {path} (exit {run.returncode}):\n{run.stderr}")
    report = json.loads(run.stdout)
    if isinstance(report, list):
        report = next(r for r in report if r.get("check_type") == "cloudformation")
    summary = report.get("summary", {})
    if summary.get("parsing_errors"):
        sys.exit(f"checkov could not parse {path}")
    out = set()
    for c in report.get("results", {}).get("failed_checks", []):
        out.add((c["check_id"], c["resource"].split(".", 1)[1]))
    print(f"checkov {os.path.basename(path)}: {summary.get('passed')} passed, {summary.get('failed')} failed "
          f"(resources {summary.get('resource_count')})")
    return out


def main() -> int:
    checkov, paths = sys.argv[1], sys.argv[2:]
    with open(os.path.join(HERE, "checkov-baseline.yaml"), encoding="utf-8") as f:
        baseline = yaml.safe_load(f)
    accepted = {}
    for entry in baseline:
        if not entry.get("reason", "").strip():
            print(f"checkov-baseline.yaml: {entry['check']} has no reason", file=sys.stderr)
            return 1
        for r in entry["resources"]:
            accepted[(entry["check"], r)] = entry
    seen: set[tuple[str, str]] = set()
    for p in paths:
        seen |= findings(checkov, p)
    new = sorted(seen - set(accepted))
    stale = sorted(set(accepted) - seen)
    for check, res in new:
        print(f"NEW finding {check} on {res}: fix it, or accept it in scripts/cfn/checkov-baseline.yaml with its reason",
              file=sys.stderr)
    for check, res in stale:
        print(f"STALE baseline entry {check} on {res}: checkov no longer reports it; remove it", file=sys.stderr)
    print(f"checkov: {len(seen)} finding(s), all accepted in the baseline" if not (new or stale) else
          f"checkov: {len(new)} new finding(s), {len(stale)} stale baseline entrie(s)")
    return 1 if new or stale else 0


if __name__ == "__main__":
    sys.exit(main())
