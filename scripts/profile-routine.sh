#!/usr/bin/env bash
# Where a routine-served request spends its CPU time: runs the routine bench (release build) on
# one side under `perf` (cpu-clock samples with DWARF call stacks), then writes a flame graph
# and prints the shares by stage (scripts/python/profile_stages.py). The in-process client's
# samples are left out of the shares; `wrk` drives the side too when it is installed.
#
# Usage: scripts/profile-routine.sh [JS|C|echo] [OUT_DIR]   (default JS, .agora/profile)
# Needs perf (apt install linux-perf) and inferno (installed here with cargo when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
side=${1:-JS}
out=${2:-.agora/profile}
mkdir -p "$out"
bash scripts/install.sh --no-llm --no-mcp --no-browser --no-a2a >&2
# shellcheck disable=SC1091
source "${AGORA_CACHE:-$HOME/.cache/agora}/env.sh"
command -v perf >/dev/null || { echo "perf is missing: apt install linux-perf" >&2; exit 1; }
command -v inferno-flamegraph >/dev/null || cargo install inferno --locked --version 0.12.8
bench=$(cargo bench -p agora-server --bench routine_http --no-run --message-format=json 2>/dev/null \
    | jq -r 'select(.executable != null and .target.name == "routine_http") | .executable')
data="$out/$side.perf.data"
AGORA_BENCH_ONLY=$side perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 \
    -o "$data" -- "$bench" --bench
perf script -i "$data" 2>/dev/null | inferno-collapse-perf >"$out/$side.folded"
inferno-flamegraph --title "agora: $side side of the routine bench" --minwidth 0.2 \
    <"$out/$side.folded" >"$out/$side.svg"
python3 scripts/python/profile_stages.py "$out/$side.folded"
echo "flame graph: $out/$side.svg" >&2
