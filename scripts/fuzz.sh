#!/usr/bin/env bash
# Fuzzes the parsers that take bytes from strangers (fuzz/, see fuzz/README.md) with AFL++
# through cargo-afl, on the stable toolchain. One afl-fuzz at a time, on one core.
#
# Usage: scripts/fuzz.sh --ci                  the bounded pass CI runs: the corpus replayed
#                                               without instrumentation, then a few seconds of
#                                               afl-fuzz per target (about a minute in all)
#        scripts/fuzz.sh --campaign SECONDS    afl-fuzz every target for SECONDS, in turn, then
#                                               print each target's figures
#        scripts/fuzz.sh --execs N             the same, for about N executions per target
#        scripts/fuzz.sh --replay              the corpus replay only (cargo test, no AFL)
#        scripts/fuzz.sh --stats               print the figures of the last campaign again
#        ... [TARGET ...]                      only these targets (default: all of them)
# Exits non-zero on any crash, hang or panic, naming the inputs (under the output directory).
#
# Env:   AGORA_FUZZ_TARGET_DIR   cargo's target directory (default target/fuzz: never the
#                                workspace's target/debug, which the instrumented build would
#                                clobber)
#        AGORA_FUZZ_OUT          afl-fuzz output directories (default $AGORA_FUZZ_TARGET_DIR/afl)
#        AGORA_FUZZ_CI_SECONDS   afl-fuzz seconds per target in --ci (default 4)
#        AGORA_FUZZ_TIMEOUT_MS   an execution slower than this is a hang (default 1000)
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
AGORA_LOG_TAG=agora-fuzz
cd "$SCRIPT_DIR/.."
root=$PWD

# cargo-afl and the afl crate (fuzz/Cargo.toml) are pinned to the same release: the crate links
# against the runtime that this cargo-afl builds.
CARGO_AFL_VERSION=0.18.2
ALL_TARGETS=(envelope follow_up hash data_uri front_matter negotiation db_page db_post manifest)

target_dir=${AGORA_FUZZ_TARGET_DIR:-$root/target/fuzz}
out_root=${AGORA_FUZZ_OUT:-$target_dir/afl}
ci_seconds=${AGORA_FUZZ_CI_SECONDS:-4}
timeout_ms=${AGORA_FUZZ_TIMEOUT_MS:-1000}
manifest=(--manifest-path "$root/fuzz/Cargo.toml")
export CARGO_TARGET_DIR=$target_dir

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

mode=${1:-}
shift || true
limit=()
case $mode in
    --ci) limit=(-V "$ci_seconds") ;;
    --campaign)
        [[ ${1:-} =~ ^[0-9]+$ ]] || usage
        limit=(-V "$1")
        shift
        ;;
    --execs)
        [[ ${1:-} =~ ^[0-9]+$ ]] || usage
        limit=(-E "$1")
        shift
        ;;
    --replay | --stats) ;;
    *) usage ;;
esac
targets=("$@")
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")
for target in "${targets[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $target "* ]] || die "unknown target $target (${ALL_TARGETS[*]})"
done

# cargo-afl, and the AFL++ it builds from its bundled source (both cached: ~/.cargo/bin and
# ~/.local/share/afl.rs). `config --build` refuses to rebuild what is already there.
ensure_cargo_afl() {
    if [[ $(cargo afl --version 2>/dev/null) != "cargo-afl $CARGO_AFL_VERSION "* ]]; then
        log "installing cargo-afl $CARGO_AFL_VERSION"
        cargo install cargo-afl --version "$CARGO_AFL_VERSION" --locked >&2
    fi
    local output
    if ! output=$(cargo afl config --build 2>&1); then
        grep -q "already built" <<<"$output" || {
            printf '%s\n' "$output" >&2
            die "cargo afl config --build failed"
        }
    fi
}

build() {
    log "building the instrumented targets in $target_dir ($(elapsed))"
    cargo afl build --release --locked --features afl "${manifest[@]}" --bins 2>&1 | tail -n 2 >&2
}

replay() {
    log "replaying fuzz/corpus through every target, without instrumentation ($(elapsed))"
    mkdir -p -- "$target_dir"
    local log_file=$target_dir/replay.log
    if ! cargo test --locked "${manifest[@]}" --test corpus >"$log_file" 2>&1; then
        grep -E 'panicked|error' "$log_file" | tail -n 30 >&2
        die "the corpus replay failed (log: $log_file)"
    fi
    grep '^test result' "$log_file" >&2
}

# stat_of FILE KEY: one value of afl's fuzzer_stats.
stat_of() { sed -n "s/^$2 *: *//p" "$1"; }

# Prints a table of every target's fuzzer_stats under $1; fails if any saved a crash or hang.
report() {
    local dir=$1 target stats total=0 bad=0
    printf '%-13s %12s %10s %8s %8s %6s %9s\n' target execs execs/s corpus crashes hangs seconds
    for target in "${targets[@]}"; do
        stats=$dir/$target/default/fuzzer_stats
        if [[ ! -f $stats ]]; then
            printf '%-13s (no run)\n' "$target"
            bad=1
            continue
        fi
        printf '%-13s %12s %10s %8s %8s %6s %9s\n' "$target" "$(stat_of "$stats" execs_done)" \
            "$(stat_of "$stats" execs_per_sec)" "$(stat_of "$stats" corpus_count)" \
            "$(stat_of "$stats" saved_crashes)" "$(stat_of "$stats" saved_hangs)" \
            "$(stat_of "$stats" run_time)"
        total=$((total + $(stat_of "$stats" execs_done)))
        if (($(stat_of "$stats" saved_crashes) + $(stat_of "$stats" saved_hangs) > 0)); then
            bad=1
            find "$dir/$target/default/crashes" "$dir/$target/default/hangs" -type f -name 'id:*' \
                -printf '  %p\n' >&2
        fi
    done
    printf '%-13s %12s\n' total "$total"
    return "$bad"
}

# afl-fuzz on each target in turn, from the committed corpus, into $1/<target>.
fuzz_all() {
    local dir=$1 target
    for target in "${targets[@]}"; do
        rm -rf -- "${dir:?}/$target"
        mkdir -p -- "$dir"
        log "afl-fuzz $target ${limit[*]} ($(elapsed))"
        # A container: the CPU governor and core_pattern are the host's. One core, no binding
        # (the machine is shared); a panic aborts, which afl-fuzz saves as a crash.
        AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 \
            AFL_NO_AFFINITY=1 AFL_FAST_CAL=1 \
            nice -n 10 cargo afl fuzz "${limit[@]}" -t "$timeout_ms" \
            -i "$root/fuzz/corpus/$target" -o "$dir/$target" \
            -- "$target_dir/release/$target" >"$dir/$target.log" 2>&1 ||
            {
                tail -n 20 "$dir/$target.log" >&2
                die "afl-fuzz $target failed (log: $dir/$target.log)"
            }
        # Without its UI, afl-fuzz logs a line per test case: keep the summary only.
        tail -n 40 -- "$dir/$target.log" >"$dir/$target.log.tail"
        mv -f -- "$dir/$target.log.tail" "$dir/$target.log"
    done
}

case $mode in
    --replay) replay ;;
    --stats) report "$out_root/campaign" ;;
    --ci)
        replay
        ensure_cargo_afl
        build
        fuzz_all "$out_root/ci"
        report "$out_root/ci" || die "crashes or hangs (inputs listed above)"
        log "no crash, no hang ($(elapsed))"
        ;;
    --campaign | --execs)
        ensure_cargo_afl
        build
        fuzz_all "$out_root/campaign"
        report "$out_root/campaign" || die "crashes or hangs (inputs listed above)"
        ;;
esac
