#!/usr/bin/env python3
"""The module graph of each Rust crate has no circles.

Modules stand on floors: each uses only modules on floors below it, so a
reader can start at the bottom and never meet a name defined above. This
reads every `crate::…`, `super::…` and `self::…` path of a crate's source
(test modules, `#[cfg(test)] mod … { … }`, left out: a test may use what it
likes), turns each into an edge between the two sibling modules it joins
(`crate::a::x` used in `crate::b::y` is an edge b → a; `super::c` used in
`crate::t::d` is an edge d → c under `t`), and fails on any circle among the
siblings of one parent. A child using its own parent's items is not an edge:
`mod.rs` is the floor its children stand on.

    scripts/check_floors.py            # every crate of the workspace
    scripts/check_floors.py --show     # and the floors, bottom first
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["filters/core", "authz-service", "mock-llm", "wire"]

PATH_START = re.compile(r"\b(crate|super|self)::")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def module_path(src: Path, file: Path) -> tuple[str, ...]:
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    if parts and parts[0] == "bin":  # a binary is a crate of its own, above the library
        return ("<bin>",)
    return tuple(parts)


def blank_literals(text: str) -> str:
    """The source with comments removed and every string, raw string and
    char literal emptied, read token by token (a `//` inside a string, or a
    quote in a char literal, is not what it seems to a regex)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (m := re.match(r'b?r(#*)"', text[i:i + 260])) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), i + m.end())
            out.append('""')
            i = n if end < 0 else end + 1 + len(m.group(1))
        elif c == '"' or (c == "b" and text.startswith('b"', i) and (i == 0 or not text[i - 1].isalnum())):
            i += 1 if c == '"' else 2
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and (m := re.match(r"'(?:\\.[^']{0,8}|[^\\'])'", text[i:i + 12])):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_tests(text: str) -> str:
    """The source without comments, string literals and `#[cfg(test)]` items."""
    text = blank_literals(text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        j = m.end()
        # skip the item: up to its `;` or its balanced `{ … }`
        depth = 0
        while j < len(text):
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif c == ";" and depth == 0:
                j += 1
                break
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def parse_tree(text: str, i: int) -> tuple[list[list[str]], int]:
    """Paths of a use tree starting at text[i] (after a `::`)."""
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and text[i] == "{":
        i += 1
        paths: list[list[str]] = []
        while i < len(text):
            while i < len(text) and (text[i].isspace() or text[i] == ","):
                i += 1
            if i < len(text) and text[i] == "}":
                return paths, i + 1
            sub, i = parse_tree(text, i)
            paths.extend(sub)
            if i <= 0 or i >= len(text):
                break
            # skip an `as x` or anything up to the next separator
            while i < len(text) and text[i] not in ",}":
                i += 1
        return paths, i
    m = IDENT.match(text, i)
    if not m:
        return [[]], i
    name, i = m.group(0), m.end()
    if text.startswith("::", i):
        subs, i = parse_tree(text, i + 2)
        return [[name] + s for s in subs], i
    return [[name]], i


def references(text: str, here: tuple[str, ...]) -> list[tuple[str, ...]]:
    refs = []
    for m in PATH_START.finditer(text):
        kind = m.group(1)
        for p in parse_tree(text, m.end())[0]:
            if kind == "crate":
                base: tuple[str, ...] = ()
            elif kind == "self":
                base = here
            else:
                base = here
                rest = p
                base = here[:-1]
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
                p = rest
            refs.append(base + tuple(x for x in p if x != "self"))
    return refs


def edge(src: tuple[str, ...], dst: tuple[str, ...]) -> tuple[tuple[str, ...], str, str] | None:
    k = 0
    while k < len(src) and k < len(dst) and src[k] == dst[k]:
        k += 1
    if k == len(src) or k == len(dst):
        return None  # an ancestor or a descendant: not siblings
    return src[:k], src[k], dst[k]


def crate_graph(crate: Path) -> dict[tuple[str, ...], dict[str, set[str]]]:
    src = crate / "src"
    modules = {module_path(src, f) for f in src.rglob("*.rs")}
    children: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for m in modules:
        for k in range(len(m)):
            children[m[:k]].add(m[k])
    graph: dict[tuple[str, ...], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in sorted(src.rglob("*.rs")):
        here = module_path(src, f)
        if here == ("<bin>",):
            continue
        for ref in references(strip_tests(f.read_text()), here):
            e = edge(here, ref)
            if e and e[2] in children.get(e[0], ()):  # a module, not an item of the parent
                graph[e[0]][e[1]].add(e[2])
    return graph


def cycles(nodes: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(nodes.get(v, ())):
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
            if len(comp) > 1 or v in nodes.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(set(nodes) | {w for ws in nodes.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def floors(nodes: dict[str, set[str]]) -> list[list[str]]:
    names = set(nodes) | {w for ws in nodes.values() for w in ws}
    level: dict[str, int] = {}

    def depth(v: str, seen: frozenset = frozenset()) -> int:
        if v not in level:
            if v in seen:
                return 0
            level[v] = 1 + max((depth(w, seen | {v}) for w in nodes.get(v, ())), default=-1)
        return level[v]

    for v in names:
        depth(v)
    by: dict[int, list[str]] = defaultdict(list)
    for v, lv in level.items():
        by[lv].append(v)
    return [sorted(by[k]) for k in sorted(by)]


def check(crates: list[Path], show: bool = False) -> list[str]:
    problems = []
    for crate in crates:
        for parent, nodes in sorted(crate_graph(crate).items()):
            where = f"{crate.relative_to(ROOT) if crate.is_relative_to(ROOT) else crate}: " + (
                "crate::" + "::".join(parent) if parent else "crate")
            for comp in cycles(nodes):
                arrows = "; ".join(f"{a} → {', '.join(sorted(nodes[a] & set(comp)))}" for a in comp)
                problems.append(f"{where}: a circle among {', '.join(comp)} ({arrows})")
            if show:
                print(f"{where}: " + " | ".join(", ".join(f) for f in floors(nodes)))
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--show", action="store_true", help="print each parent's floors, bottom first")
    ap.add_argument("crates", nargs="*", help="crate folders (default: the workspace's)")
    args = ap.parse_args()
    crates = [Path(c).resolve() for c in args.crates] or [ROOT / c for c in CRATES]
    problems = check(crates, args.show)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"check-floors: {len(problems)} circle(s) between modules", file=sys.stderr)
        return 1
    print(f"check-floors: no circles in {len(crates)} crate(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
