#!/usr/bin/env bash
# The figures at the top of docs/benchmarks.md, measured on one commit in one
# go: every surface's benchmark, askloop beside Mastra where a ratio is
# claimed (`compare`). Writes one JSON line per benchmark to
# bench/results/<commit>-<UTC time>.jsonl (and `--detail` lines to
# ….detail.jsonl) and prints them. Run it on a quiet machine; it takes about 15 minutes on
# the 2-core machine, plus about 10 with ASKLOOP_BENCH_POSTGRES set.
#
#   bench/current.sh                       # SQLite, in-process and over HTTP
#   ASKLOOP_BENCH_POSTGRES=postgres://postgres@127.0.0.1:5432/test bench/current.sh
#                                          # also 100,000 runs waiting on PostgreSQL
#
# Needs: `npm ci` in bench/mastra (compare) and tests/web, and chromium (inbox).
set -euo pipefail
cd "$(dirname "$0")/.."

commit=$(git rev-parse --short HEAD)
if ! git diff --quiet HEAD; then commit="$commit-dirty"; fi
mkdir -p bench/results
at=$(date -u +%Y%m%dT%H%M)
out="bench/results/$commit-$at.jsonl"
detail="bench/results/$commit-$at.detail.jsonl"
: >"$out"
: >"$detail"

cargo build --release --locked -p askloop-cli -p askloop-bench
B=target/release/askloop-bench

note() {
  printf '{"impl":"machine","commit":"%s","at":"%s","cores":%s,"load":"%s","what":"%s"}\n' \
    "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$1" >>"$out"
}

run() {
  echo "== $*" >&2
  "$B" "$@" >>"$out" 2>>"$detail.stderr"
}

note start
run compare 200
run roundtrip 500
run --runtime current roundtrip 500
run concurrent 1000
run waiting 5000
run http 500
run http-concurrent 1000
run --detail long 1000
run thread 10000
run scale 10000
run inbox 10000
if [ -n "${ASKLOOP_BENCH_POSTGRES:-}" ]; then
  # `scale` alternates its round trips with M runs waiting with those on an
  # empty twin schema (bench_current_empty).
  psql "$ASKLOOP_BENCH_POSTGRES" -q -c 'DROP SCHEMA IF EXISTS bench_current CASCADE' \
    -c 'DROP SCHEMA IF EXISTS bench_current_empty CASCADE'
  run --db "$ASKLOOP_BENCH_POSTGRES?schema=bench_current" scale 100000
  psql "$ASKLOOP_BENCH_POSTGRES" -q -c 'DROP SCHEMA bench_current CASCADE' -c 'DROP SCHEMA bench_current_empty CASCADE'
fi
note end
grep '"detail"' "$detail.stderr" >"$detail" || true
rm -f "$detail.stderr"
cat "$out"
