#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster for the postgres tests, on 127.0.0.1, as an
# unprivileged user (PostgreSQL refuses to run as root), and prints the URL to export as
# ACPX_TEST_POSTGRES_URL. Installs the distribution's package when no server is found.
#
#   eval "$(bash scripts/pg-test-server.sh start DIR [PORT])"   # exports ACPX_TEST_POSTGRES_URL
#   bash scripts/pg-test-server.sh restart DIR   # pg_ctl restart: every connection is ended
#   bash scripts/pg-test-server.sh stop DIR
set -euo pipefail

cmd=${1:?usage: pg-test-server.sh start|restart|stop DIR [PORT]}
dir=${2:?usage: pg-test-server.sh start|restart|stop DIR [PORT]}
port=${3:-54329}

find_bin() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -n "$found" ] && [ -x "$found/$name" ]; then echo "$found/$name"; return; fi
  return 1
}

if ! find_bin initdb >/dev/null || ! find_bin pg_ctl >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing postgresql from the distribution's packages" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
  fi
fi
initdb=$(find_bin initdb) || { echo "no PostgreSQL server binaries (initdb) found" >&2; exit 1; }
pg_ctl=$(find_bin pg_ctl)

# As root, the cluster runs as an unprivileged user; otherwise as the caller.
as_user() {
  if [ "$(id -u)" = 0 ]; then
    if ! id acpxci >/dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin acpxci >&2 2>/dev/null || true
    fi
    local user=acpxci
    id acpxci >/dev/null 2>&1 || user=nobody
    runuser -u "$user" -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
  start)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      id acpxci >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin acpxci >&2 2>/dev/null || true
      owner=acpxci; id acpxci >/dev/null 2>&1 || owner=nobody
      chown "$owner" "$dir"
    fi
    chmod 700 "$dir"
    as_user "$initdb" -D "$dir/data" -U acpx --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_user "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=200" \
      start >&2 || { cat "$dir/server.log" >&2; exit 1; }
    echo "export ACPX_TEST_POSTGRES_URL=postgres://acpx@127.0.0.1:$port/postgres"
    ;;
  restart)
    as_user "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart >&2 \
      || { cat "$dir/server.log" >&2; exit 1; }
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      as_user "$pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
    fi
    ;;
  *)
    echo "unknown command $cmd" >&2; exit 2 ;;
esac
