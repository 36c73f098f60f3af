#!/usr/bin/env bash
# Sustained load, the long run (issue 18 part 5): one node under a mixed load (routine requests,
# natural-language requests and new protocols answered by a scripted LLM, conversations, and
# documents published to a protocol database that a peer database pulls) for SECONDS (default
# 600), with the node's RSS sampled every 10 s. Prints p50/p99 per kind of request and the RSS
# samples. The suite runs the same test for 20 s (crates/agora-cli/tests/it/load.rs).
#
# Usage: scripts/load-run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --no-llm --no-mcp --no-browser >&2
# shellcheck disable=SC1091
source "${AGORA_CACHE:-$HOME/.cache/agora}/env.sh"
export AGORA_LOAD_SECS=${1:-600}
# The whole output is kept in .agora/load-run.log; the report and any failure are printed.
mkdir -p .agora
set +e
cargo test -p agora-cli --locked --test it load:: -- --ignored --nocapture >.agora/load-run.log 2>&1
status=$?
set -e
grep -E '^LOAD|^  [A-Za-z -]+:|^test result' .agora/load-run.log || true
grep -E -A2 'panicked' .agora/load-run.log || true
exit "$status"
