#!/usr/bin/env python3
"""Import circles between the files of each crate: strongly connected components of the graph
"file A names an item of file B" (`use crate::..`, `super::..`, `self::..` and paths written
out in code), tests at the bottom of a file left out.

Usage: python3 bench/house/import_cycles.py [crates/...]   (from the repository root)
Prints each circle with the edges that close it and exits 1 when there is any. Re-exports are
followed to the file that defines the item, so `crate::Error` is `error.rs`, not `lib.rs`.
"""
import os
import re
import sys

PATH = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)


def strip(text):
    """Code without comments, strings and the `#[cfg(test)]` module at the bottom."""
    m = re.search(r"^#\[cfg\(test\)\]\s*\n\s*(pub\s+)?mod\s+\w+\s*\{", text, re.M)
    if m:
        text = text[: m.start()]
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'r#*"(?:[^"\\]|\\.)*?"#*|"(?:[^"\\]|\\.)*"', '""', text, flags=re.S)
    return text


class Crate:
    def __init__(self, root):
        self.src = os.path.join(root, "src")
        self.files = {}  # module path tuple -> file
        self.text = {}
        lib = os.path.join(self.src, "lib.rs")
        if not os.path.exists(lib):
            lib = os.path.join(self.src, "main.rs")
        self.walk((), lib)

    def walk(self, module, path):
        self.files[module] = path
        raw = open(path, encoding="utf-8").read()
        self.text[path] = strip(raw)
        base = os.path.dirname(path) if os.path.basename(path) in ("lib.rs", "main.rs", "mod.rs") \
            else path[:-3]
        for name in MOD_DECL.findall(self.text[path]):
            for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                if os.path.exists(cand):
                    self.walk(module + (name,), cand)
                    break

    def module_of(self, path):
        return next(m for m, p in self.files.items() if p == path)

    def reexport(self, module, name, depth=0):
        """The module a `pub use` in `module` takes `name` from, if it re-exports it."""
        if depth > 8:
            return None
        text = self.text[self.files[module]]
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            for full in expand(m.group(1)):
                parts = [p.strip() for p in full.split("::")]
                last = parts[-1].split(" as ")[-1].strip()
                if last != name and not (last == "*"):
                    continue
                target = resolve_start(module, parts[:-1])
                if target is None:
                    continue
                hit = self.locate(target, [parts[-1].split(" as ")[0].strip()], depth + 1) \
                    if last != "*" else self.locate(target, [name], depth + 1)
                if hit is not None and (last != "*" or hit != target):
                    return hit
        return None

    def locate(self, module, rest, depth=0):
        """The module (file) that defines the item `rest` names from `module`."""
        while rest and module + (rest[0],) in self.files:
            module = module + (rest[0],)
            rest = rest[1:]
        if module not in self.files:
            return None
        if rest and depth <= 8:
            via = self.reexport(module, rest[0], depth)
            if via is not None:
                return via
        return module


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [tree]
    depth, j = 0, i
    for j in range(i, len(tree)):
        depth += tree[j] == "{"
        depth -= tree[j] == "}"
        if depth == 0:
            break
    prefix, inner, after = tree[:i], tree[i + 1:j], tree[j + 1:]
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:k])
            start = k + 1
    parts.append(inner[start:])
    out = []
    for p in parts:
        if not p:
            continue
        for e in expand(p):
            out.append((prefix + e).replace("::self", "") + after)
    return out


def resolve_start(module, parts):
    """The module a path starting with crate/super/self begins at, and the rest of it."""
    if not parts:
        return module
    head, rest = parts[0], parts[1:]
    if head == "crate":
        base = ()
    elif head == "super":
        base = module[:-1]
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    elif head == "self":
        base = module
    else:
        return None
    return base + tuple(rest)


def edges_of(crate):
    graph = {}
    for module, path in crate.files.items():
        text = crate.text[path]
        targets = set()
        uses = [u for m in re.finditer(r"\buse\s+([^;]+);", text) for u in expand(m.group(1))]
        for m in PATH.finditer(text):
            if m.group(2) != "::{":
                uses.append(m.group(1) + m.group(2))
        for u in uses:
            parts = [p for p in u.split("::") if p]
            if not parts or parts[0] not in ("crate", "super", "self"):
                continue
            parts[-1] = parts[-1].split(" as ")[0]
            full = resolve_start(module, parts)
            target = crate.locate((), [r for r in full if r != "*"])
            if target is not None and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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
            out.append(comp)

    for v in list(graph):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def name(crate, module):
    return os.path.relpath(crate.files[module])


def main():
    roots = sys.argv[1:] or sorted(
        os.path.join("crates", d) for d in os.listdir("crates")
        if os.path.exists(os.path.join("crates", d, "src"))
    )
    found = 0
    for root in roots:
        crate = Crate(root)
        graph = edges_of(crate)
        for comp in sccs(graph):
            found += 1
            members = set(comp)
            print(f"{root}: circle of {len(comp)} files")
            for v in sorted(comp, key=lambda m: name(crate, m)):
                inside = sorted(name(crate, w) for w in graph[v] if w in members)
                print(f"  {name(crate, v)} -> {', '.join(inside)}")
    if not found:
        print("no import circles")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
