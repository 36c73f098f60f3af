# shellcheck shell=bash
# Shared helpers for scripts/*.sh. Source it; it defines functions only.

# Progress line on stderr: "[agora-install] message".
log() { printf '[%s] %s\n' "${AGORA_LOG_TAG:-agora-install}" "$*" >&2; }

die() { log "ERROR: $*"; exit 1; }

# sha256 of a file, hex only.
sha256_of() { sha256sum -- "$1" | cut -d' ' -f1; }

# verify_sha256 FILE HEX: die unless FILE hashes to HEX.
verify_sha256() {
    local file=$1 want=$2 got
    got=$(sha256_of "$file")
    [[ $got == "$want" ]] || die "sha256 mismatch for $file: got $got, want $want"
}

# Seconds since the script started, for progress lines.
elapsed() { printf '%ds' "$SECONDS"; }

# "size mtime" of a file (cheap identity used by verification stamps).
file_ident() { stat -c '%s %Y' -- "$1"; }

# A verified-file stamp lets warm runs skip re-hashing big files: FILE.verified holds
# "<sha256> <size> <mtime>". It is only trusted while size and mtime still match.
stamp_ok() {
    local file=$1 want=$2 stamp="$1.verified"
    [[ -f $file && -f $stamp ]] || return 1
    [[ $(cat -- "$stamp") == "$want $(file_ident "$file")" ]]
}

write_stamp() {
    local file=$1 hash=$2
    printf '%s %s\n' "$hash" "$(file_ident "$file")" >"$file.verified.tmp"
    mv -f -- "$file.verified.tmp" "$file.verified"
}

# ensure_verified FILE HEX: 0 if FILE is present with hash HEX (stamp or full hash), else 1.
# A present file with the wrong hash is removed.
ensure_verified() {
    local file=$1 want=$2
    [[ -f $file ]] || return 1
    if [[ ${AGORA_VERIFY:-0} != 1 ]] && stamp_ok "$file" "$want"; then
        return 0
    fi
    log "hashing $(basename -- "$file") ..."
    if [[ $(sha256_of "$file") == "$want" ]]; then
        write_stamp "$file" "$want"
        return 0
    fi
    log "removing $file: sha256 mismatch"
    rm -f -- "$file" "$file.verified"
    return 1
}

# Debian packages: install the ones from "$@" that dpkg does not report as installed.
apt_ensure() {
    local missing=() p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]} == 0)); then
        return 0
    fi
    log "apt: installing ${missing[*]}"
    local sudo=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${missing[*]}"
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >&2
}
