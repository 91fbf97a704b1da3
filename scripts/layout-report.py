#!/usr/bin/env python3
"""layout-report.py: the figures of the source's shape, from the source.

    python3 scripts/layout-report.py            # the report
    python3 scripts/layout-report.py --check    # ... and exit 1 on a hub
    python3 scripts/layout-report.py --cycles   # file-level cycles only;
                                                # exit 1 when there is one
    python3 scripts/layout-report.py --imports src/pipeline/mod.rs
                                                # the files one file imports

Reads every crate of the workspace (src/ and crates/*/src/) and prints:
  - files over 600 lines (tests included, as the file is read);
  - the 10 longest functions outside `#[cfg(test)]` modules (inline, or
    a `tests.rs` file);
  - the 10 files with the largest fan-out: distinct files of the workspace
    they import (`crate::`, `super::`, `self::` and the workspace's crate
    names, in `use` trees and inline paths);
  - file-level import cycles: strongly connected sets of files. A module
    using its own submodules (a parent naming its children: `mod`, `pub
    use`, calls) is structure, not a layer edge, so edges from a file to
    its own descendants are left out; every other edge counts;
  - upward imports between crates (a crate naming one that depends on it
    cannot compile, so this is 0 by construction and is not printed).

--check exits 1 when a file imports more than MAX_FANOUT files, when any
cycle exists, or when a file outside src/formats-like writers is over
MAX_LINES lines (the writers of one format each are allowed: WRITERS).
Plain Python 3, no toolchain needed.
"""
import os
import re
import sys

MAX_LINES = 600
MAX_FANOUT = 15
# Format writers: the files that each write one on-disk format, allowed to
# be long (no file over ~600 lines outside them). Named one by one, never by
# a pattern: a dispatcher (formats/mod.rs) or a reader (the vSphere OVA
# reader) is no writer. A name here that is no file fails the report.
WRITERS = {
    "crates/bootimage-core/src/formats/gcp.rs",
    "crates/bootimage-core/src/formats/oci.rs",
    "crates/bootimage-core/src/formats/ova.rs",
    "crates/bootimage-core/src/formats/powervs.rs",
    "crates/bootimage-core/src/formats/qcow2.rs",
    "crates/bootimage-core/src/formats/vhd.rs",
    "crates/bootimage-core/src/formats/vhdx.rs",
    "crates/bootimage-core/src/formats/vmdk.rs",
    "crates/bootimage-core/src/fs/cpio.rs",
    "crates/bootimage-core/src/fs/fat.rs",
    "src/live/erofs.rs",
    "src/live/iso.rs",
    "src/live/osmet.rs",
}

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def crates():
    """(crate name as Rust spells it, its src dir) for every crate."""
    out = []
    for manifest_dir in [TOP] + sorted(
        os.path.join(TOP, "crates", d)
        for d in (os.listdir(os.path.join(TOP, "crates")) if os.path.isdir(os.path.join(TOP, "crates")) else [])
    ):
        toml = os.path.join(manifest_dir, "Cargo.toml")
        if not os.path.isfile(toml):
            continue
        name = None
        for line in open(toml):
            m = re.match(r'\s*name\s*=\s*"([^"]+)"', line)
            if m:
                name = m.group(1).replace("-", "_")
                break
        src = os.path.join(manifest_dir, "src")
        if os.path.isdir(src) and name:
            out.append((name, src))
    return out


def strip(text):
    """Comments and string/char literal contents blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
            continue
        m = re.match(r'b?r(#*)"', text[i:i + 10]) if c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) else None
        if m:
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
            continue
        if c == "'":
            if i + 1 < n and text[i + 1] == "\\":
                j = text.find("'", i + 2)
                out.append("' '")
                i = j + 1
                continue
            if i + 2 < n and text[i + 2] == "'":
                out.append("' '")
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out)


def block_end(s, open_at):
    """Index just past the `}` matching the `{` at open_at."""
    depth = 0
    for j in range(open_at, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def without_tests(s):
    """`#[cfg(test)] mod x { ... }` blocks blanked (newlines kept)."""
    while True:
        m = TEST_MOD.search(s)
        if not m:
            return s
        end = block_end(s, m.end() - 1)
        s = s[: m.start()] + "\n" * s.count("\n", m.start(), end) + s[end:]


def module_of(rel):
    """src-relative path -> module segments (a/b.rs and a/b/mod.rs -> [a, b])."""
    p = rel[:-3]
    if p in ("lib", "main"):
        return []
    if p.startswith("bin/"):
        return None
    parts = p.split("/")
    if parts[-1] == "mod":
        parts = parts[:-1]
    return parts


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        depth, start, items = 0, 0, []
        for k, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(t[start:k])
                start = k + 1
        items.append(t[start:])
        for it in items:
            if not it:
                continue
            b = it.find("{")
            if b >= 0 and it.endswith("}"):
                walk(prefix + it[:b], it[b + 1 : -1])
            else:
                out.append(prefix + re.sub(r"\bas\b.*$", "", it))

    walk("", tree)
    return out


def main():
    check = "--check" in sys.argv
    files = {}  # key "crate:rel" -> dict
    by_module = {}  # (crate, tuple(segments)) -> key
    cr = crates()
    names = {name for name, _ in cr}
    for name, src in cr:
        for d, _, fs in os.walk(src):
            for f in fs:
                if not f.endswith(".rs"):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, src)
                mod = module_of(rel)
                key = os.path.relpath(path, TOP)
                text = open(path, encoding="utf-8").read()
                files[key] = {"crate": name, "mod": mod, "text": text, "stripped": strip(text)}
                if mod is not None:
                    by_module[(name, tuple(mod))] = key

    # `pub use other_crate::{a, b}` and `pub use other_crate::m::x`: a path
    # through a re-export is an import of what it re-exports.
    alias = {}
    for key, f in files.items():
        if f["mod"] is None:
            continue
        for m in re.finditer(r"\bpub\s+use\s+([^;]+);", f["stripped"]):
            for p in expand_use(m.group(1)):
                segs = p.split("::")
                if segs[0] in names and segs[0] != f["crate"] and segs[-1] != "*":
                    alias[(f["crate"], tuple(f["mod"] + [segs[-1]]))] = (segs[0], segs[1:])

    def resolve(crate, segs, depth=0):
        for k in range(len(segs), -1, -1):
            a = alias.get((crate, tuple(segs[:k]))) if k and depth < 4 else None
            if a:
                return resolve(a[0], a[1] + segs[k:], depth + 1)
            key = by_module.get((crate, tuple(segs[:k])))
            if key:
                return key
        return None

    edges = {k: set() for k in files}
    for key, f in files.items():
        if f["mod"] is None:
            continue
        s = without_tests(f["stripped"])
        f["code"] = s
        paths = []
        for m in re.finditer(r"\buse\s+([^;]+);", s):
            paths += expand_use(m.group(1))
        paths += [m.group(0) for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", s)]
        paths += [m.group(0) for m in re.finditer(r"\b(?:%s)(?:::\w+)+" % "|".join(names), s)]
        me = f["mod"]
        for p in paths:
            segs = p.split("::")
            crate = f["crate"]
            if segs[0] == "crate":
                base, segs = [], segs[1:]
            elif segs[0] in ("super", "self"):
                base = list(me)
                while segs and segs[0] in ("super", "self"):
                    if segs[0] == "super":
                        base = base[:-1]
                    segs = segs[1:]
            elif segs[0] in names and segs[0] != f["crate"]:
                crate, base, segs = segs[0], [], segs[1:]
            else:
                continue
            target = resolve(crate, base + segs)
            if target and target != key:
                edges[key].add(target)

    def descends(a, b):
        fa, fb = files[a], files[b]
        return fa["crate"] == fb["crate"] and fb["mod"][: len(fa["mod"])] == fa["mod"] and len(fb["mod"]) > len(fa["mod"])

    layer = {k: {t for t in v if not descends(k, t)} for k, v in edges.items()}

    # Tarjan's strongly connected components over the layer edges.
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(layer[v]):
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
                sccs.append(sorted(comp))

    for v in sorted(layer):
        if v not in index:
            visit(v)

    # Functions outside test modules (inline ones, and the `tests.rs`
    # files a `#[cfg(test)] mod tests;` names).
    funcs = []
    for key, f in files.items():
        if key.endswith("/tests.rs"):
            continue
        s = f.get("code") or without_tests(f["stripped"])
        for m in re.finditer(r"\bfn\s+(\w+)", s):
            j, depth = m.end(), 0
            while j < len(s):
                ch = s[j]
                if ch in "([<":
                    depth += 1
                elif ch in ")]>" and depth:
                    # `->` is not a closing angle bracket
                    if not (ch == ">" and s[j - 1] == "-"):
                        depth -= 1
                elif ch == ";" and depth == 0:
                    j = -1
                    break
                elif ch == "{" and depth == 0:
                    break
                j += 1
            if j < 0 or j >= len(s):
                continue
            end = block_end(s, j)
            first = s.count("\n", 0, m.start()) + 1
            last = s.count("\n", 0, end) + 1
            funcs.append((last - first + 1, f"{key}:{first}", m.group(1)))
    funcs.sort(reverse=True)

    if "--imports" in sys.argv:
        # `--imports FILE`: the workspace files FILE imports (its fan-out).
        want = sys.argv[sys.argv.index("--imports") + 1]
        for b in sorted(edges.get(want, ())):
            print(b)
        sys.exit(0)

    if "--cycles" in sys.argv:
        print(f"file-level import cycles: {len(sccs)}")
        for c in sccs:
            print("  " + " <-> ".join(c))
            for a in c:
                for b in sorted(layer[a] & set(c)):
                    print(f"    {a} -> {b}")
        sys.exit(1 if sccs else 0)

    stale = sorted(w for w in WRITERS if w not in files)
    if stale:
        print("WRITERS names files that do not exist (stale: fix the list):")
        for w in stale:
            print(f"  {w}")
        sys.exit(1)
    lines = sorted(((f["text"].count("\n"), k) for k, f in files.items()), reverse=True)
    long_files = [(n, k) for n, k in lines if n > MAX_LINES]
    fan = sorted(((len(v), k) for k, v in edges.items()), reverse=True)

    print(f"crates: {', '.join(n for n, _ in cr)}; files: {len(files)}; lines: {sum(n for n, _ in lines)}")
    print(f"\nfiles over {MAX_LINES} lines: {len(long_files)}")
    for n, k in long_files:
        print(f"  {n:5}  {k}{'  (format writer)' if k in WRITERS else ''}")
    print("\nthe 10 longest functions (tests left out):")
    for n, where, name in funcs[:10]:
        print(f"  {n:5}  {name}  {where}")
    print("\nthe 10 largest fan-outs (workspace files imported by one file):")
    for n, k in fan[:10]:
        print(f"  {n:5}  {k}")
    print(f"\nfile-level import cycles: {len(sccs)}")
    for c in sccs:
        print("  " + " <-> ".join(c))
    hubs = [k for n, k in long_files if k not in WRITERS]
    wide = [k for n, k in fan if n > MAX_FANOUT]
    print(f"\nhubs: {len(hubs)} non-writer files over {MAX_LINES} lines, {len(wide)} files over {MAX_FANOUT} imports, {len(sccs)} cycles")
    if check and (hubs or wide or sccs):
        sys.exit(1)


if __name__ == "__main__":
    main()
