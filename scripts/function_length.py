#!/usr/bin/env python3
"""Functions longer than a limit (python3 standard library only).

Counts each `fn` item's lines from its signature to its closing brace (string contents and
`//` comments ignored when matching braces) in the `.rs` files under the folders given, test
files (`tests.rs`, `*_tests.rs`) left out, and fails naming every function over `--max` lines.
CI keeps the rotator pass (shared/src/handlers/rotator) in functions of at most 100 lines, so
that each step of a pass can be read, tested and changed on its own.

Usage: scripts/function_length.py --max 100 shared/src/handlers/rotator
"""

import argparse
import os
import re
import sys

FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def functions(path):
    """(lines, name, line number) of every fn with a body in the file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FN.match(lines[i])
        if not m or lines[i].strip().startswith("//"):
            i += 1
            continue
        depth, started, j = 0, False, i
        while j < len(lines):
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[j]).split("//")[0]
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth == 0:
                break
            if not started and code.rstrip().endswith(";"):
                break
            j += 1
        if started:
            out.append((j - i + 1, m.group(1), i + 1))
            i = j + 1
        else:
            i += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max", type=int, required=True)
    ap.add_argument("folders", nargs="+")
    args = ap.parse_args()
    long = []
    count = 0
    for folder in args.folders:
        for root, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith(".rs") or name == "tests.rs" or name.endswith("_tests.rs"):
                    continue
                path = os.path.join(root, name)
                for n, fn, line in functions(path):
                    count += 1
                    if n > args.max:
                        long.append(f"{path}:{line}: fn {fn} is {n} lines (at most {args.max})")
    for l in long:
        print(l)
    if long:
        print(f"function length: {len(long)} of {count} functions over {args.max} lines")
        return 1
    print(f"function length: {count} functions, none over {args.max} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
