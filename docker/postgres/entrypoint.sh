#!/bin/sh
# Start PostgreSQL on $PGDATA; on first start (empty folder) make the cluster, its superuser POSTGRES_USER
# with POSTGRES_PASSWORD, and the database POSTGRES_DB. Arguments go to `postgres`.
set -eu
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD: the first start makes the superuser with it}"
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  # Local socket: trust (only this container reaches it, e.g. the healthcheck); network: passwords only.
  initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  if [ "$db" != postgres ]; then
    quoted_db=$(printf '%s' "$db" | sed 's/"/""/g')
    quoted_user=$(printf '%s' "$user" | sed 's/"/""/g')
    # Single-user mode: no server, no socket, nothing can connect before the database exists.
    echo "CREATE DATABASE \"$quoted_db\" OWNER \"$quoted_user\"" | postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "gpulab-postgres: made the cluster in $PGDATA (user $user, database $db)"
fi
exec postgres -D "$PGDATA" "$@"
