#!/usr/bin/env bash
# Builds the JavaScript engine of agora routines, engine.core.wasm: QuickJS-NG (the C sources that
# the rquickjs-sys crate vendors) plus engine.c, compiled with Debian clang for wasm32-wasi.
#
# The engine is built once per (QuickJS version, engine.c, this script) and cached under
#   ${AGORA_CACHE:-$HOME/.cache/agora}/quickjs-engine-<rquickjs-sys version>-<sha>/engine.core.wasm
# where <sha> hashes engine.c and this script. A cached engine is reused without building.
# Prints the path of engine.core.wasm on stdout; progress goes to stderr.
#
# Needs: clang, lld, wasi-libc, libclang-rt-14-dev-wasm32 (Debian) and cargo (to fetch the crate).
set -euo pipefail

RQUICKJS_SYS_VERSION=0.14.0

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[quickjs-engine] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

cache=${AGORA_CACHE:-$HOME/.cache/agora}
key=$(cat -- "$here/engine.c" "$here/build.sh" | sha256sum | cut -c1-16)
out_dir="$cache/quickjs-engine-$RQUICKJS_SYS_VERSION-$key"
out="$out_dir/engine.core.wasm"
if [[ -s $out ]]; then
    log "cached: $out"
    echo "$out"
    exit 0
fi

command -v clang >/dev/null || die "clang not found (apt-get install clang lld wasi-libc libclang-rt-14-dev-wasm32)"
command -v cargo >/dev/null || die "cargo not found"
mkdir -p -- "$cache/tmp"
tmp=$(mktemp -d "$cache/tmp/quickjs-engine.XXXXXX") # same filesystem as the cache: mv is atomic
trap 'rm -rf -- "$tmp"' EXIT

# 1. The sources: cargo downloads and unpacks the crate into its registry; a throwaway manifest
#    makes it do so without building anything.
log "fetching rquickjs-sys $RQUICKJS_SYS_VERSION sources"
mkdir -p -- "$tmp/fetch/src"
: >"$tmp/fetch/src/lib.rs"
cat >"$tmp/fetch/Cargo.toml" <<EOF
[package]
name = "agora-quickjs-sources"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
rquickjs-sys = "=$RQUICKJS_SYS_VERSION"

[workspace]
EOF
cargo fetch --quiet --manifest-path "$tmp/fetch/Cargo.toml" >&2
manifest=$(cargo metadata --offline --format-version 1 --manifest-path "$tmp/fetch/Cargo.toml" |
    grep -o "\"manifest_path\":\"[^\"]*/rquickjs-sys-$RQUICKJS_SYS_VERSION/Cargo.toml\"" |
    head -n 1 | cut -d'"' -f4)
[[ -n $manifest ]] || die "cargo did not report where rquickjs-sys $RQUICKJS_SYS_VERSION is"
q="$(dirname -- "$manifest")/quickjs"
[[ -f $q/quickjs.c && -f $q/quickjs.h ]] || die "no QuickJS sources in $q"
qjs_version=$(sed -n 's/^#define QJS_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$q/quickjs.h" | paste -sd.)
log "QuickJS-NG ${qjs_version:-(unknown version)} from $q"

# 2. Compile. The QuickJS core only: no quickjs-libc, so routines get no std/os modules.
cflags=(--target=wasm32-wasi --sysroot=/usr -O2 -D_GNU_SOURCE -D_WASI_EMULATED_SIGNAL)
objects=()
pids=()
for name in quickjs libregexp libunicode dtoa; do
    clang "${cflags[@]}" -w -c "$q/$name.c" -o "$tmp/$name.o" &
    pids+=($!)
    objects+=("$tmp/$name.o")
done
for pid in "${pids[@]}"; do wait "$pid" || die "compiling QuickJS failed"; done
log "compiled ${#objects[@]} QuickJS objects; linking"

# 3. Link a library-style module (no _start): the exports are named in engine.c. The C stack comes
#    first in memory so that overflowing it traps instead of overwriting the heap.
clang "${cflags[@]}" -Wall -Wextra -I"$q" \
    -nostartfiles -Wl,--no-entry -Wl,--stack-first -Wl,-z,stack-size=1048576 -Wl,--strip-all \
    "$here/engine.c" "${objects[@]}" -o "$tmp/engine.core.wasm"

mkdir -p -- "$out_dir"
printf 'rquickjs-sys %s (QuickJS-NG %s)\nengine sha %s\nbuilt %s with %s\n' "$RQUICKJS_SYS_VERSION" "$qjs_version" "$key" \
    "$(date -u +%FT%TZ)" "$(clang --version | head -n 1)" >"$out_dir/BUILD_INFO"
cp -- "$tmp/engine.core.wasm" "$out.tmp.$$"
mv -f -- "$out.tmp.$$" "$out"
log "built $out ($(stat -c %s -- "$out") bytes)"
echo "$out"
