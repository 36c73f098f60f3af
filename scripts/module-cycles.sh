#!/usr/bin/env bash
# Lists circular `use` dependencies between the modules of a crate (default: agora-node), as
# cargo-modules (https://crates.io/crates/cargo-modules) reads them with rust-analyzer: module
# nodes, "uses" edges, items left out. Exits 1 when there is a cycle.
#
#   cargo install cargo-modules@0.27.0 --locked   # once; the last release for rustc 1.95
#   scripts/module-cycles.sh [CRATE]
set -euo pipefail
crate=${1:-agora-node}
command -v cargo-modules >/dev/null || { echo "cargo-modules is not installed (see the header)" >&2; exit 2; }
cargo modules dependencies -p "$crate" --lib --no-externs --no-sysroot --no-fns --no-types \
  --no-traits --no-owns 2>/dev/null | python3 -c '
import re, sys
from collections import defaultdict
edges = defaultdict(set)
for line in sys.stdin:
    m = re.match(r"\s*\"([^\"]+)\" -> \"([^\"]+)\" \[label=\"uses\"", line)
    if m:
        edges[m.group(1)].add(m.group(2))
nodes = set(edges) | {b for targets in edges.values() for b in targets}
index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1; stack.append(v); on.add(v)
    for w in edges.get(v, ()):
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop(); on.discard(w); component.append(w)
            if w == v:
                break
        if len(component) > 1:
            cycles.append(sorted(component))
for v in sorted(nodes):
    if v not in index:
        visit(v)
print(f"{len(nodes)} modules, {sum(map(len, edges.values()))} use edges, {len(cycles)} cycles")
for cycle in cycles:
    print("cycle:", " <-> ".join(cycle))
sys.exit(1 if cycles else 0)
'
