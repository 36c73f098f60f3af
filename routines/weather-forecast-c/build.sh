#!/usr/bin/env bash
# Builds the C weather-forecast routine into a core WebAssembly module with Debian clang and
# wasi-libc. agora-routines turns the core module into a component in-process (wit-component and
# the WASI preview1 adapter), so no wasm-tools binary is needed.
#
# The module is cached under
#   ${AGORA_CACHE:-$HOME/.cache/agora}/routine-weather-forecast-c-<sha>/routine.core.wasm
# where <sha> hashes routine.c and this script. Prints the path on stdout; progress on stderr.
#
# Needs: clang, lld, wasi-libc, libclang-rt-14-dev-wasm32 (Debian).
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[weather-forecast-c] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cache=${AGORA_CACHE:-$HOME/.cache/agora}
key=$(cat -- "$here/routine.c" "$here/build.sh" | sha256sum | cut -c1-16)
out_dir="$cache/routine-weather-forecast-c-$key"
out="$out_dir/routine.core.wasm"
if [[ -s $out ]]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

command -v clang >/dev/null || die "clang not found (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"
mkdir -p -- "$out_dir"
# A library-style module (no _start): the exports are named in routine.c.
clang --target=wasm32-wasi --sysroot=/usr -O2 -Wall -Wextra -Werror \
    -nostartfiles -Wl,--no-entry -Wl,--stack-first -Wl,-z,stack-size=65536 -Wl,--strip-all \
    "$here/routine.c" -o "$out.tmp.$$"
mv -f -- "$out.tmp.$$" "$out" # atomic: a reader sees no module or a whole one
log "built $out ($(stat -c %s -- "$out") bytes)"
echo "$out"
