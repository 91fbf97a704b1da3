#!/usr/bin/env bash
# check-imports.sh: the module-level import graph of src/ (docs/design.md
# "Layout"): its cycles between top-level modules, its upward imports
# (a lower module naming a higher one through `crate::` or `super::`); then
# the file-level cycles (scripts/layout-report.py --cycles: a file
# importing, through others, a file that imports it).
#
#   scripts/check-imports.sh        # summary + the offending edges
#   scripts/check-imports.sh -v     # ... plus the whole edge list
#
# Exit status: 0 when there are no cycles (of modules or of files), no
# upward imports, and no citation of a document outside the repository
# (scripts/check-citations.sh); 1 otherwise. (An `unsafe` without a SAFETY comment is the
# compiler's to refuse: clippy's undocumented_unsafe_blocks, Cargo.toml
# [workspace.lints], over every target, tests included.) The suite runs it
# as its `imports` job. Plain grep/awk, no toolchain needed.
#
# A reference is any `crate::NAME` or `super::...::NAME` outside a `//`
# comment line, in a `use` or inline. `super::` is resolved from the file's
# place (src/a/b.rs is module a::b); a `super::` inside an inline `mod`
# (tests) is resolved one level too high, which only matters when it lands
# on a name that is also a top-level module. src/main.rs, src/bin/ and the
# fixture tool (crates/bootimage-fixture, a binary of its own modules) are
# the binaries above everything and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."

verbose=0
[ "${1:-}" = "-v" ] && verbose=1

# Levels, highest first: a module may import its own level (without making a
# cycle) and every lower level.
levels='
cli 5
commands 6
plan 4
pipeline 4
release 3
image 3
oscontainer 3
platforms 3
backend 3
disk 3
live 3
formats 3
publish 3
trust 3
fs 2
io 2
sys 2
util 2
'

# The modules that exist: every `mod` of the crates' roots (the tool's
# src/lib.rs and the leaf crates' lib.rs). The table must name exactly
# these: a name in it that is no module is stale and fails the check, as
# does a module without a level.
present=$(sed -n 's/^[[:space:]]*\(pub\(([a-z]*)\)\?[[:space:]]\+\)\?mod[[:space:]]\+\([a-z_0-9]*\).*/\3/p' \
    src/lib.rs $(ls crates/*/src/lib.rs | grep -v bootimage-fixture) | LC_ALL=C sort -u | tr '\n' ' ')

find src crates/*/src -name '*.rs' ! -path 'src/bin/*' ! -path 'src/main.rs' ! -path 'crates/bootimage-fixture/*' | LC_ALL=C sort |
    xargs awk -v verbose="$verbose" -v levels="$levels" -v present="$present" '
function modpath(file,    p, n, i, out) {
    # src/a/b/c.rs -> a b c ; src/a/mod.rs -> a ; src/a.rs -> a ; src/lib.rs -> (crate)
    p = file
    sub(/^crates\/[^\/]+\/src\//, "", p)   # the leaf crates: their modules by name
    sub(/^src\//, "", p)
    sub(/\.rs$/, "", p)
    sub(/\/mod$/, "", p)
    if (p == "lib") return ""
    return p
}
BEGIN {
    nl = split(levels, L, "\n")
    for (i = 1; i <= nl; i++) {
        if (L[i] == "") continue
        split(L[i], kv, " ")
        level[kv[1]] = kv[2]
        known[kv[1]] = 1
    }
    np = split(present, P, " ")
    for (i = 1; i <= np; i++) exists[P[i]] = 1
    for (k in known) if (!(k in exists)) stale = stale "  " k "\n"
    for (i = 1; i <= np; i++) if (!(P[i] in known)) { unknown = unknown "  " P[i] " (a mod of a crate root)\n"; warned[P[i]] = 1 }
}
FNR == 1 {
    mp = modpath(FILENAME)
    depth = (mp == "") ? 0 : split(mp, comp, "/")
    top = (depth == 0) ? "" : comp[1]
    if (top != "" && !(top in known) && !(top in warned)) {
        warned[top] = 1
        unknown = unknown "  " top " (" FILENAME ")\n"
    }
}
{
    raw = $0
    code = raw
    is_comment = (code ~ /^[[:space:]]*\/\//)
    if (is_comment || top == "") next
    s = code
    while (match(s, /(crate|super)(::(super))*::[A-Za-z_][A-Za-z0-9_]*/)) {
        ref = substr(s, RSTART, RLENGTH)
        s = substr(s, RSTART + RLENGTH)
        n = split(ref, part, "::")
        target = ""
        if (part[1] == "crate") {
            target = part[2]
        } else {
            ups = n - 1                        # number of super segments
            if (ups >= depth) target = part[n] # climbed to the crate root
        }
        if (target == "" || target == top || !(target in known)) continue
        e = top SUBSEP target
        if (!(e in edge)) { edge[e] = FILENAME ":" FNR; nedges++ }
        refs[e]++
        nodes[top] = 1; nodes[target] = 1
    }
}
END {
    if (unknown != "") printf "modules without a level (add them to the table):\n%s", unknown
    if (stale != "") printf "names in the table that are no module (stale: remove them):\n%s", stale
    # Transitive closure (the graph is ~25 nodes).
    for (e in edge) { split(e, p, SUBSEP); reach[p[1], p[2]] = 1 }
    for (k in nodes) for (i in nodes) if ((i, k) in reach) for (j in nodes) if ((k, j) in reach) reach[i, j] = 1
    # Strongly connected components with more than one member are the cycles.
    ncyc = 0
    for (i in nodes) {
        if (i in done) continue
        members = i; m = 1
        for (j in nodes) if (j != i && ((i, j) in reach) && ((j, i) in reach)) { members = members " " j; m++; done[j] = 1 }
        done[i] = 1
        if (m > 1) {
            ncyc++
            nm = split(members, mem, " ")
            # sort members for a stable output
            for (a = 1; a <= nm; a++) for (b = a + 1; b <= nm; b++) if (mem[b] < mem[a]) { t = mem[a]; mem[a] = mem[b]; mem[b] = t }
            line = mem[1]; for (a = 2; a <= nm; a++) line = line ", " mem[a]
            cyc[ncyc] = "  cycle " ncyc ": {" line "}\n"
            for (a = 1; a <= nm; a++) for (b = 1; b <= nm; b++)
                if ((mem[a], mem[b]) in edge)
                    cyc[ncyc] = cyc[ncyc] sprintf("    %s -> %s (%d refs, e.g. %s)\n", mem[a], mem[b], refs[mem[a], mem[b]], edge[mem[a], mem[b]])
        }
    }
    # Upward imports.
    nup = 0; nupref = 0
    for (e in edge) {
        split(e, p, SUBSEP)
        if (level[p[2]] > level[p[1]]) {
            nup++; nupref += refs[e]
            up[nup] = sprintf("  %s (%d) -> %s (%d): %d refs, e.g. %s", p[1], level[p[1]], p[2], level[p[2]], refs[e], edge[e])
        }
    }
    printf "modules: %d, edges: %d\n", length(nodes), nedges
    if (verbose) {
        printf "edges (from -> to: refs, first at):\n"
        cmd = "LC_ALL=C sort"
        for (e in edge) { split(e, p, SUBSEP); printf "  %s -> %s: %d, %s\n", p[1], p[2], refs[e], edge[e] | cmd }
        close(cmd)
    }
    printf "cycles: %d\n", ncyc
    for (c = 1; c <= ncyc; c++) printf "%s", cyc[c]
    printf "upward imports: %d edges (%d refs)\n", nup, nupref
    cmd = "LC_ALL=C sort"
    for (u = 1; u <= nup; u++) print up[u] | cmd
    close(cmd)
    exit (ncyc + nup > 0 || stale != "" || unknown != "") ? 1 : 0
}' || exit 1
python3 scripts/layout-report.py --cycles
# The repository cites only itself (scripts/check-citations.sh).
bash scripts/check-citations.sh
