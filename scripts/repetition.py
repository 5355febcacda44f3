#!/usr/bin/env python3
"""Repeated code in production: the pairs of places the `duplicates` command (the team's tool
library, not in this repo) finds in the code that ships, with tests left out.

    python3 scripts/repetition.py [REPO] [duplicates options...]

Copies the tracked production sources of REPO (default: this checkout) to a scratch folder: Rust,
Python, TypeScript and shell, without tests (`tests/`, `tests.rs`, `*_tests.rs`, property tests
`props*.rs`), the fake cloud, benches, and the Rust compiled only for tests: inline `#[cfg(test)]`
modules, and the modules and items behind `#[cfg(any(test, feature = "test-support"))]` (the
in-memory fakes: `fake/`, `kube/memory.rs`, `doctor/memory.rs`). Then runs `duplicates --most 200` over the copy and prints its rows
with the copy's paths made relative. Exit 2 when `duplicates` is not on PATH.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

TEST_PATH = re.compile(
    r"(^|/)tests?\.rs$|_tests?\.rs$|(^|/)tests/|fakecloud|(^|/)check_"
    r"|(^|/)props[a-z_]*\.rs$|^shared/benches/|^cdk/test"
)
INLINE_TESTS = re.compile(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod\s+\w+\s*\{")
# An attribute that compiles what follows only for tests (and the `test-support` feature).
TEST_ONLY = r'#\[cfg\((?:all\()?any\(test, feature = "test-support"\)[^\]]*\)\]'
TEST_ONLY_MOD = re.compile(TEST_ONLY + r"\s*(?:pub(?:\(crate\))?\s+)?mod\s+(\w+)\s*;")
TEST_ONLY_ITEM = re.compile(TEST_ONLY + r"(?:\s*(?:#\[[^\]]*\]|///[^\n]*))*\s*[^;{]*[;{]")


def production(path):
    return bool(re.search(r"\.(rs|py|ts|sh)$", path)) and not path.endswith(".d.ts") \
        and not TEST_PATH.search(path)


def without_inline_tests(text):
    """`text` without its `#[cfg(test)] mod x { ... }` blocks and its test-only items (braces
    matched)."""
    for pattern in (INLINE_TESTS, TEST_ONLY_ITEM):
        while True:
            m = pattern.search(text)
            if not m:
                break
            i, depth = m.end(), 1 if text[m.end() - 1] == "{" else 0
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            text = text[: m.start()] + text[i:]
    return text


def test_only_modules(repo, files):
    """The files and folders of the modules declared behind a test-only attribute."""
    out = []
    for path in files:
        if not path.endswith(".rs") or not os.path.isfile(os.path.join(repo, path)):
            continue
        with open(os.path.join(repo, path), errors="replace") as f:
            names = TEST_ONLY_MOD.findall(f.read())
        base = os.path.dirname(path) if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs") \
            else path[: -len(".rs")]
        out += [os.path.join(base, n) for n in names]
    return out


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
        test_only = test_only_modules(repo, files)
        for path in filter(production, files):
            if any(path == m + ".rs" or path.startswith(m + "/") for m in test_only):
                continue
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
