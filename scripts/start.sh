#!/usr/bin/env bash
# Installs everything (idempotent; cached in ~/.cache/agora) and runs the main job: the paper's
# weather demo on loopback with the local model (Alice and Bob negotiate a protocol, both write
# routines, and the last queries use no LLM). Extra arguments go to `agora demo weather`
# (e.g. --queries 12). To run a node instead: target/debug/agora node run --config node.example.toml
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
source "${AGORA_CACHE:-$HOME/.cache/agora}/env.sh"
cargo build --locked -p agora-cli 2>&1 | tail -n 2
exec target/debug/agora demo weather "$@"
