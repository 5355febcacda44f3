#!/usr/bin/env python3
"""The layering check of nodecycle-shared (python3 standard library only).

The layers are the lines of shared/src/lib.rs's doc comment written as

    //! - L<n> <name>: <comma-separated modules>

lowest first. A module is a top-level module of the crate (`state`, `aws`, ...) or a nested one
written with `::` (`handlers::ops`): a file belongs to the longest listed module its path names.
Every `crate::x` reference in code (comments are not code) is an edge from the file's module to
module x (or `x::y` when that is listed). The check fails, naming the file and line, when

  * a module refers to a module of a higher layer,
  * modules refer to each other in a circle (strongly connected modules),
  * grouped by top-level module (the first path segment: `port::uses` and `port` are one), the
    references form a circle (a nested module listed on a layer of its own must not hide one), or
  * a module of the crate is in no layer (so a new module gets a place, not a free pass), or
  * code outside `wiring.rs` reads the process environment (`std::env::var`, `var_os`,
    `vars`): configuration is read in one place, and everything else is given it.

Unit tests (`#[cfg(test)] mod ... {` blocks, `tests.rs` files and `tests/` folders) may use any
module, and are not scanned.

`--allow FILE` names known edges, one `from -> to` a line (`#` comments): they neither fail as
upward nor make circles. Keep it empty; an allowed edge that is gone is reported so the list
shrinks with the code.

Usage: scripts/layers.py [--src shared/src] [--allow scripts/layers-allow.txt]
"""

import argparse
import os
import re
import sys

LAYER = re.compile(r"^//!\s*-\s*L(\d+)\s+([^:]+?)\s*:\s+(.+?)\s*$")
REF = re.compile(r"\bcrate((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_GROUP = re.compile(r"\buse\s+crate::\{")
GROUP_ITEM = re.compile(r"(?:^|[{,\s])([a-z_][a-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)")
TEST_MOD = re.compile(r"^\s*#\[cfg\((?:any\()?test\b")


def read_layers(lib):
    """Module -> (layer number, layer name), from lib.rs's doc comment."""
    layers = {}
    with open(lib, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = LAYER.match(line.strip())
            if not m:
                continue
            level, name = int(m.group(1)), m.group(2)
            for module in (x.strip() for x in m.group(3).split(",")):
                if not module:
                    continue
                if module in layers:
                    sys.exit(f"{lib}:{n}: module {module} is in two layers")
                layers[module] = (level, name)
    if not layers:
        sys.exit(f"{lib}: no layer lines (`//! - L<n> <name>: <modules>`) in the doc comment")
    return layers


def top_modules(src):
    """The crate's top-level modules as lib.rs declares them."""
    out = []
    with open(os.path.join(src, "lib.rs"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*pub(?:\(crate\))?\s+mod\s+([a-z_0-9]+)\s*;", line)
            if m:
                out.append(m.group(1))
    return out


def module_of(path, src, listed):
    """The listed module a source file belongs to (longest match), or None."""
    rel = os.path.relpath(path, src)
    parts = rel[:-3].split(os.sep) if rel.endswith(".rs") else rel.split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    for i in range(len(parts), 0, -1):
        name = "::".join(parts[:i])
        if name in listed:
            return name
    return None


def target_of(path_tail, listed):
    """The listed module a `crate::a::b::c` reference names (longest match), or None."""
    parts = [p for p in path_tail.split("::") if p]
    for i in range(len(parts), 0, -1):
        name = "::".join(parts[:i])
        if name in listed:
            return name
    return None


def code_lines(path):
    """(line number, code) of a file, without comments, string contents and test modules."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    depth_skip = None  # brace depth at which a test module ends
    depth = 0
    pending_test = False
    in_block = False
    for n, raw in enumerate(lines, 1):
        line = raw
        if in_block:
            end = line.find("*/")
            if end < 0:
                continue
            line = line[end + 2 :]
            in_block = False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line = line[: line.index("/*")]
            in_block = True
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        if "//" in line:
            line = line[: line.index("//")]
        if depth_skip is None and TEST_MOD.match(line):
            pending_test = True
        opens, closes = line.count("{"), line.count("}")
        if pending_test and re.search(r"\bmod\s+\w+\s*\{", line):
            depth_skip = depth
            pending_test = False
        elif pending_test and re.search(r"\bmod\s+\w+\s*;", line):
            pending_test = False
        elif pending_test and line.strip() and not line.strip().startswith("#"):
            # cfg(test) on something other than a module: that item only.
            pending_test = False
        depth += opens - closes
        if depth_skip is not None:
            if depth <= depth_skip and closes:
                depth_skip = None
            continue
        out.append((n, line))
    return out


def references(path, listed):
    """(line, target module) for every crate reference in the file's code."""
    refs = []
    group = None  # inside `use crate::{ ... };`
    for n, line in code_lines(path):
        start = USE_GROUP.search(line) if group is None else None
        if group is not None or start:
            group = (group or "") + (line[start.end() :] if start else line)
            if ";" in line:
                for name in GROUP_ITEM.findall(group):
                    t = target_of(name, listed)
                    if t:
                        refs.append((n, t))
                group = None
            continue
        for m in REF.finditer(line):
            t = target_of(m.group(1), listed)
            if t:
                refs.append((n, t))
    return refs


def is_test_file(rel):
    parts = rel.split(os.sep)
    return parts[-1] == "tests.rs" or parts[-1].endswith("_tests.rs") or "tests" in parts[:-1]


def circles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default="shared/src")
    ap.add_argument("--allow", default=None, help="file of known edges `from -> to`")
    args = ap.parse_args()
    src = args.src
    layers = read_layers(os.path.join(src, "lib.rs"))
    listed = set(layers)
    problems = []
    for m in top_modules(src):
        if m not in listed:
            problems.append(f"{src}/lib.rs: module {m} is in no layer; add it to a `//! - L<n>` line")
    allowed = set()
    if args.allow and os.path.exists(args.allow):
        with open(args.allow, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                if "->" not in line:
                    sys.exit(f"{args.allow}:{n}: expected `from -> to`, got {line!r}")
                a, b = (x.strip() for x in line.split("->", 1))
                allowed.add((a, b))
    edges = {}  # (from, to) -> every (file, line), in order
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            if rel == "lib.rs" or is_test_file(rel):
                continue
            here = module_of(path, src, listed)
            if here is None:
                continue
            for n, there in references(path, listed):
                if there == here or there.startswith(here + "::") or here.startswith(there + "::"):
                    continue
                edges.setdefault((here, there), []).append((os.path.join(src, rel), n))
    env_read = re.compile(r"\benv::(?:var|var_os|vars|vars_os)\s*\(")
    for root, _, files in os.walk(src):
        for name in sorted(files):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            if not name.endswith(".rs") or rel == "wiring.rs" or is_test_file(rel):
                continue
            for n, line in code_lines(path):
                if env_read.search(line):
                    problems.append(f"{os.path.join(src, rel)}:{n}: reads the environment; only wiring.rs does")
    used_allow = set()
    for (a, b), places in sorted(edges.items(), key=lambda e: e[1][0]):
        if (a, b) in allowed:
            used_allow.add((a, b))
            continue
        la, lb = layers[a][0], layers[b][0]
        if lb > la:
            for path, n in places:
                problems.append(
                    f"{path}:{n}: {a} (L{la} {layers[a][1]}) uses {b} (L{lb} {layers[b][1]}), a higher layer"
                )
    graph_edges = [e for e in edges if e not in allowed]
    for comp in circles(graph_edges):
        inside = sorted(
            (edges[e][0], e) for e in graph_edges if e[0] in comp and e[1] in comp
        )
        where = "; ".join(f"{a} -> {b} at {p}:{n}" for (p, n), (a, b) in inside)
        problems.append(f"circle between {', '.join(comp)}: {where}")
    # Grouped by top-level module (the first path segment), the code references form no circle
    # either: a nested module listed on its own (`port::ports`) does not hide one.
    top = lambda m: m.split("::")[0]  # noqa: E731
    top_edges = {}
    for (a, b), places in edges.items():
        if top(a) != top(b):
            top_edges.setdefault((top(a), top(b)), []).extend(places)
    for comp in circles(list(top_edges)):
        inside = sorted((top_edges[e][0], e) for e in top_edges if e[0] in comp and e[1] in comp)
        where = "; ".join(f"{a} -> {b} at {p}:{n}" for (p, n), (a, b) in inside)
        problems.append(f"circle between top-level modules {', '.join(comp)}: {where}")
    for a, b in sorted(allowed - used_allow):
        print(f"note: allowed edge {a} -> {b} no longer exists; remove it from {args.allow}")
    if problems:
        for p in problems:
            print(p)
        print(f"layers: {len(problems)} problem(s)")
        return 1
    print(f"layers: {len(listed)} modules in {len(set(l for l, _ in layers.values()))} layers, "
          f"{len(edges)} edges, {len(used_allow)} allowed; no upward reference, no circle, "
          f"none among the {len({m.split('::')[0] for m in listed})} top-level modules either")
    return 0


if __name__ == "__main__":
    sys.exit(main())
