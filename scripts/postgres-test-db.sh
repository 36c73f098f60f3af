#!/usr/bin/env bash
# Prepares a local Postgres for agora-store's Postgres tests and prints its URL on stdout.
# Idempotent: installs the Debian `postgresql` package only if no cluster exists, starts the
# cluster only if it is down, creates the role and database only if they are missing.
#
# Usage: scripts/postgres-test-db.sh          # set up, print the URL
#        scripts/postgres-test-db.sh --stop   # stop the cluster again
# Then:  AGORA_TEST_POSTGRES_URL=$(scripts/postgres-test-db.sh) \
#            cargo test -p agora-store -- --include-ignored
# Env:   AGORA_PG_ROLE (default agora), AGORA_PG_PASSWORD (default agora),
#        AGORA_PG_DB (default agora_test), AGORA_PG_CLUSTER (default main)
# Runs as root, or through sudo otherwise. The role is a superuser: the tests create schemas,
# functions and triggers. Meant for throwaway CI and development machines only.
set -euo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$SCRIPT_DIR/lib.sh"
AGORA_LOG_TAG=postgres-test-db

# Only the URL goes to stdout (callers capture it); everything the tools print goes to stderr.
exec 3>&1 1>&2

ROLE=${AGORA_PG_ROLE:-agora}
PASSWORD=${AGORA_PG_PASSWORD:-agora}
DB=${AGORA_PG_DB:-agora_test}
CLUSTER=${AGORA_PG_CLUSTER:-main}

# fd 3 (our stdout) is closed for every child: a server it starts must not hold the caller's pipe open.
as_root() { if [[ $EUID -eq 0 ]]; then "$@" 3>&-; else sudo "$@" 3>&-; fi; }
as_postgres() { as_root runuser -u postgres -- "$@"; }
psql_value() { as_postgres psql -p "$PORT" -tAc "$1"; }

# The newest installed cluster's version, or nothing.
cluster_version() {
    command -v pg_lsclusters >/dev/null || return 0
    pg_lsclusters -h 2>/dev/null | awk -v c="$CLUSTER" '$2 == c { print $1 }' | sort -n | tail -1
}

VERSION=$(cluster_version)
if [[ -z $VERSION ]]; then
    log "installing postgresql"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    VERSION=$(cluster_version)
    [[ -n $VERSION ]] || die "postgresql installed but no '$CLUSTER' cluster exists"
fi
PORT=$(pg_lsclusters -h | awk -v v="$VERSION" -v c="$CLUSTER" '$1 == v && $2 == c { print $3 }')

if [[ ${1:-} == --stop ]]; then
    log "stopping cluster $VERSION/$CLUSTER"
    as_root pg_ctlcluster "$VERSION" "$CLUSTER" stop || true
    exit 0
fi

if ! as_root pg_ctlcluster "$VERSION" "$CLUSTER" status >/dev/null 2>&1; then
    log "starting cluster $VERSION/$CLUSTER on port $PORT"
    as_root pg_ctlcluster "$VERSION" "$CLUSTER" start
fi
for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p "$PORT" && break
    sleep 1
done
pg_isready -q -h 127.0.0.1 -p "$PORT" || die "postgres is not accepting connections on port $PORT"

if [[ $(psql_value "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'") != 1 ]]; then
    log "creating role $ROLE"
    psql_value "CREATE ROLE \"$ROLE\" LOGIN SUPERUSER PASSWORD '$PASSWORD'" >/dev/null
fi
if [[ $(psql_value "SELECT 1 FROM pg_database WHERE datname = '$DB'") != 1 ]]; then
    log "creating database $DB"
    as_postgres createdb -p "$PORT" -O "$ROLE" "$DB"
fi

echo "postgres://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB" >&3
