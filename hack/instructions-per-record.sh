#!/usr/bin/env bash
# Instructions per record of Weir's keyed count, counted by valgrind's callgrind (every
# instruction executed in user space, all threads; hardware counters are not available on the
# development VM). Wall-clock time on a shared machine is noise; instruction counts move by
# well under 1 % between runs.
#
# Usage: hack/instructions-per-record.sh WEIR_BINARY [int|string] [CHECKPOINT_INTERVAL]
#
# Runs `weir run` twice on the same job (generator, 100,000 keys → keyBy → count → discard,
# parallelism 1, exactly-once checkpoints to a local directory) with SMALL and LARGE records
# (env, default 200,000 and 600,000; callgrind runs ~50× slower than native) and prints (instructions(LARGE) − instructions(SMALL))
# / (LARGE − SMALL): the per-record cost without start-up and shutdown. Key `int` is
# `id % 100000` (vs_flink's keyed-count-int), `string` the generator's `key` field.
# CHECKPOINT_INTERVAL defaults to `0s` (only the final checkpoint, so the number of checkpoints
# does not depend on how fast the run was); `1s` adds the periodic checkpoints' cost.
set -euo pipefail
bin=$(realpath "$1")
kind=${2:-int}
interval=${3:-0s}
small=${SMALL:-200000}
large=${LARGE:-600000}
case $kind in
  int) key='"id % 100000"' ;;
  string) key='key' ;;
  *) echo "key kind must be int or string, not $kind" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() {
  local n=$1
  cat > "$work/job-$n.yaml" <<YAML
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: ipr-$n }
spec:
  parallelism: ${PARALLELISM:-1}
  checkpointing: { interval: $interval, mode: exactly-once, storage: "$work/chk-$n" }
  job:
    steps:
      - source: { generator: { seed: 42, count: $n, keys: 100000 } }
      - keyBy: { expression: $key, as: key }
      - count: {}
      - sink: { discard: {} }
YAML
  (cd "$work" && valgrind --tool=callgrind --callgrind-out-file="$work/callgrind-$n" \
    "$bin" run "$work/job-$n.yaml" --listen 127.0.0.1:0 >/dev/null 2>"$work/log-$n") \
    || { cat "$work/log-$n" >&2; exit 1; }
  # Keep the profile of the large run for callgrind_annotate.
  if [ -n "${KEEP_PROFILE:-}" ]; then cp "$work/callgrind-$n" "$KEEP_PROFILE-$n"; fi
  grep '^summary:' "$work/callgrind-$n" | awk '{ print $2 }'
}
a=$(count "$small")
b=$(count "$large")
echo "$kind keys, checkpoint interval $interval, p=${PARALLELISM:-1}: $a instructions at $small records, $b at $large"
awk -v a="$a" -v b="$b" -v s="$small" -v l="$large" \
  'BEGIN { printf "instructions/record: %.1f\n", (b - a) / (l - s) }'
