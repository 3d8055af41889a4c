#!/usr/bin/env bash
# Where an append's time goes: pgbench itself drives each piece of a
# command, one statement per transaction (autocommit), on the scripts'
# cluster (lib.sh), so no client library is involved. Prints tps per piece
# and client count:
#   insert       pgbench's one-row INSERT into a table with a bigserial key
#                (the peers' pgbench/insert.sql: the ceiling `append` is held to)
#   events       a one-row INSERT into `events` (its six indexes, xid default)
#   append       select append_events(...): the lock, the version checks, the insert
#   command      select run_command(...): the append, a work item and an idempotency key
#   notify       the same INSERT as `insert`, with a NOTIFY in its transaction
#
# Usage: scripts/bench/append-parts.sh [seconds=5] [clients="1 4 16"]
# Needs target/release/sless (for its migrations).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SECONDS_EACH=${1:-5}
CLIENTS=${2:-1 4 16}
cd "$ROOT"
pg_up
recreate_db append_parts
url="${DATABASE_URL%/*}/append_parts"
DATABASE_URL="$url" "$SLESS_BIN" migrate >/dev/null
psql -d append_parts -qAt -c "create table jobs_ins (id bigserial primary key, queue text not null, payload jsonb not null)"

dir=$(mktemp -d)
payload='{"kind":"email.send","user_id":123456789,"template":"welcome_v2","to":"someone@example.com","attempt":0,"trace":"0123456789abcdef0123456789abcdef","tags":["a","b","c"],"note":"xxxxxxxxxxxxxxxxxxxxxx"}'
cat >"$dir/insert.sql" <<EOF
INSERT INTO jobs_ins (queue, payload) VALUES ('default', '$payload'::jsonb);
EOF
cat >"$dir/notify.sql" <<EOF
WITH i AS (INSERT INTO jobs_ins (queue, payload) VALUES ('default', '$payload'::jsonb) RETURNING 1)
SELECT pg_notify('sless_work', '') FROM i;
EOF
cat >"$dir/events.sql" <<EOF
\set s random(1, 2000000000)
INSERT INTO events (stream, version, type, namespace, data, metadata)
VALUES ('bench/' || :client_id || '/' || :s, 1, 'BenchEvent', 'bench', '$payload', '{"actor":"bench"}');
EOF
cat >"$dir/append.sql" <<EOF
\set s random(1, 2000000000)
SELECT * FROM append_events('bench/' || :client_id || '/' || :s, :s::bigint * 7919 + :client_id, 0,
  array['BenchEvent'], array['bench'], array['$payload'::jsonb], array['{"actor":"bench"}'::jsonb]);
EOF
cat >"$dir/command.sql" <<EOF
\set s random(1, 2000000000)
SELECT * FROM run_command('bench/' || :client_id || '/' || :s, :s::bigint * 7919 + :client_id, 0,
  array['BenchEvent'], array['bench'], array['$payload'::jsonb], array['{"actor":"bench"}'::jsonb],
  'Noop', 'bench/' || :client_id || '/' || :s, '{}'::jsonb, null, '\$[0 to 15]'::jsonpath,
  'bench', 'k/' || :client_id || '/' || :s, 'h', 201::smallint, '{"position": 0}'::jsonb, '{}'::jsonb, true);
EOF

printf '| piece | %s |\n|---|%s\n' "$(echo $CLIENTS | sed 's/ / clients | /g') clients" "$(for _ in $CLIENTS; do printf -- '---:|'; done)"
for piece in insert events append command notify; do
  row="| $piece |"
  for c in $CLIENTS; do
    j=$(( c < 2 ? c : 2 ))
    tps=$(pgbench -n -M prepared -c "$c" -j "$j" -T "$SECONDS_EACH" -f "$dir/$piece.sql" append_parts 2>&1 \
      | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    row="$row ${tps%.*} |"
  done
  echo "$row"
done
rm -rf "$dir"
