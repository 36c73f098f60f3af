#!/usr/bin/env bash
# Installs everything (idempotent; cached in ~/.cache/agora) and starts a
# node on 127.0.0.1:8080 backed by the local model, with the weather tool.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
source "${AGORA_CACHE:-$HOME/.cache/agora}/env.sh"
cargo build --locked -p agora-cli 2>&1 | tail -n 2
exec target/debug/agora node run --config node.example.toml "$@"
