#!/usr/bin/env python3
"""Repeated code in production: the pairs of places the `duplicates` command (the team's tool
library, not in this repo) finds in the code that ships, with tests left out.

    python3 scripts/repetition.py [REPO] [duplicates options...]

Copies the tracked production sources of REPO (default: this checkout) to a scratch folder: Rust,
Python, TypeScript and shell, without tests (`tests/`, `tests.rs`, `*_tests.rs`, property tests
`props*.rs`), test-support fakes (`fake/`, `kube/memory.rs`, the fake cloud), benches and inline
`#[cfg(test)] mod` blocks. Then runs `duplicates --most 200` over the copy and prints its rows
with the copy's paths made relative. Exit 2 when `duplicates` is not on PATH.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

TEST_PATH = re.compile(
    r"(^|/)tests?\.rs$|_tests?\.rs$|(^|/)tests/|/fake/|fakecloud|(^|/)check_"
    r"|(^|/)props[a-z_]*\.rs$|kube/memory\.rs$|^shared/benches/|^cdk/test"
)
INLINE_TESTS = re.compile(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*\{")


def production(path):
    return bool(re.search(r"\.(rs|py|ts|sh)$", path)) and not path.endswith(".d.ts") \
        and not TEST_PATH.search(path)


def without_inline_tests(text):
    """`text` without its `#[cfg(test)] mod x { ... }` blocks (braces matched)."""
    while True:
        m = INLINE_TESTS.search(text)
        if not m:
            return text
        i, depth = m.end(), 1
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        text = text[: m.start()] + text[i:]


def main(argv):
    repo = argv[0] if argv and not argv[0].startswith("-") else "."
    extra = argv[1:] if argv and not argv[0].startswith("-") else argv
    if shutil.which("duplicates") is None:
        print("repetition.py: the `duplicates` command is not on PATH", file=sys.stderr)
        return 2
    files = subprocess.run(["git", "-C", repo, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    out = tempfile.mkdtemp(prefix="nodecycle-production-")
    try:
        for path in filter(production, files):
            src = os.path.join(repo, path)
            if not os.path.isfile(src):
                continue
            with open(src, errors="replace") as f:
                text = f.read()
            if path.endswith(".rs"):
                text = without_inline_tests(text)
            dst = os.path.join(out, path)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "w") as f:
                f.write(text)
        run = subprocess.run(["duplicates", "--repo", out, "--most", "200", "--seconds", "120",
                              *extra], capture_output=True, text=True)
        print(run.stdout.replace(out + "/", ""), end="")
        return 0
    finally:
        shutil.rmtree(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
