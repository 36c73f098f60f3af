#!/usr/bin/env bash
# Crash safety, the long run (issue 18 part 2): a node under routine and LLM load is killed with
# SIGKILL at random points, KILLS times (default 50) on SQLite and on PostgreSQL, and after each
# restart everything its clients saw acknowledged is checked in the store. The suite runs the
# same test with 3 kills (crates/agora-cli/tests/it/crash.rs). AGORA_CRASH_SEED picks the kill
# points (default 1).
#
# Usage: scripts/crash-runs.sh [KILLS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --no-llm --no-mcp --no-browser >&2
# shellcheck disable=SC1091
source "${AGORA_CACHE:-$HOME/.cache/agora}/env.sh"
AGORA_TEST_POSTGRES_URL=$(bash scripts/postgres-test-db.sh | tail -n 1)
export AGORA_TEST_POSTGRES_URL
export AGORA_CRASH_KILLS=${1:-50}
cargo test -p agora-cli --locked --test it crash:: -- --ignored --nocapture --test-threads=1 2>&1 |
  grep -E '^(sqlite|postgres): kill|^CRASH RUNS|panicked|^test result' 
