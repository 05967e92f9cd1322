#!/usr/bin/env bash
# Instructions per record of Weir's hot path, counted by valgrind's callgrind (every
# instruction executed in user space, all threads; hardware counters are not available on the
# development VM). Wall-clock time on a shared machine is noise; instruction counts move by
# well under 1 % between runs.
#
# Usage: hack/instructions-per-record.sh WEIR_BINARY [WORKLOAD] [CHECKPOINT_INTERVAL]
#
# Runs `weir run` twice on the same job with SMALL and LARGE input records (env, default
# 200,000 and 600,000; callgrind runs ~50× slower than native) and prints
# (instructions(LARGE) − instructions(SMALL)) / (LARGE − SMALL): the per-record cost without
# start-up and shutdown. Every job ends in a discard sink, exactly-once checkpoints to a local
# directory, parallelism 1 unless PARALLELISM is set. WORKLOAD is one of vs_flink's
# (runtime/benches/vs_flink/workloads.rs):
#   int        generator (100,000 keys) → keyBy `id % 100000` → count   (keyed-count-int)
#   string     generator → keyBy `key` → count                           (keyed-count-string)
#   wordcount  the cleaned books → flatMap on ' ' → keyBy word → count   (word-count; records = words)
#   q0 q1 q2   Nexmark bids (JSON lines) → map / filter + map            (nexmark-q0..q2; records = bids)
# CHECKPOINT_INTERVAL defaults to `0s` (only the final checkpoint, so the number of checkpoints
# does not depend on how fast the run was).
#
# CHECKPOINTS=1: the cost of a checkpoint instead. Runs LARGE records with CHECKPOINT_INTERVAL
# (default 1s here) and with 0s, and prints (instructions(with) − instructions(without)) /
# (checkpoints(with) − checkpoints(without)): instructions per checkpoint (every thread: the
# synchronous part, the delta writes while a snapshot is encoded, the encoder, upload and
# coordinator), and that cost in records (divided by the instructions per record of the 0s run
# over LARGE − SMALL). A 1 s interval at R records/s costs (records per checkpoint) / R.
#
# KEEP_PROFILE=PREFIX keeps each run's callgrind file as PREFIX-<records> (for callgrind_annotate).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "$1")
kind=${2:-int}
interval=${3:-}
small=${SMALL:-200000}
large=${LARGE:-600000}
text_dir=${WEIR_DATA_DIR:-$here/../../shared/data}/text
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# steps N: the job's steps for N input records; sets `records` to the exact record count.
steps() {
  local n=$1
  local generator="      - source: { generator: { seed: 42, count: $n, keys: 100000 } }"
  records=$n
  case $kind in
    int) printf '%s\n      - keyBy: { expression: "id %% 100000", as: key }\n      - count: {}\n' "$generator" ;;
    string) printf '%s\n      - keyBy: { expression: key, as: key }\n      - count: {}\n' "$generator" ;;
    wordcount)
      records=$(python3 "$here/bench_inputs.py" words "$text_dir" "$work/words-$n.txt" "$n")
      printf '      - source: { file: { path: "%s", format: text } }\n      - flatMap: { field: line, pattern: " ", as: word }\n      - keyBy: { expression: word, as: word }\n      - count: {}\n' "$work/words-$n.txt" ;;
    q0|q1|q2)
      [ -f "$work/bids-$n.jsonl" ] || python3 "$here/bench_inputs.py" bids "$work/bids-$n.jsonl" "$n" >/dev/null
      printf '      - source: { file: { path: "%s", format: jsonl } }\n' "$work/bids-$n.jsonl"
      case $kind in
        q0) echo "      - map: { expression: '{\"auction\": auction, \"bidder\": bidder, \"price\": price, \"dateTime\": dateTime, \"extra\": extra}' }" ;;
        q1) echo "      - map: { expression: '{\"auction\": auction, \"bidder\": bidder, \"price\": 0.908 * double(price), \"dateTime\": dateTime, \"extra\": extra}' }" ;;
        q2) printf '      - filter: { expression: "auction %% 123 == 0" }\n'
            echo "      - map: { expression: '{\"auction\": auction, \"price\": price}' }" ;;
      esac ;;
    *) echo "workload must be int, string, wordcount, q0, q1 or q2, not $kind" >&2; exit 2 ;;
  esac
}

# count N INTERVAL: runs the job under callgrind; sets `instructions`, `checkpoints`, `records`.
count() {
  local n=$1 every=$2 name="ipr-$1-${2//[^0-9a-z]/}"
  {
    printf 'apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: { name: %s }\nspec:\n' "$name"
    printf '  parallelism: %s\n' "${PARALLELISM:-1}"
    printf '  checkpointing: { interval: %s, mode: exactly-once, storage: "%s" }\n' "$every" "$work/chk-$name"
    printf '  job:\n    steps:\n'
    steps "$n"
    printf '      - sink: { discard: {} }\n'
  } > "$work/$name.yaml"
  (cd "$work" && valgrind --tool=callgrind --callgrind-out-file="$work/callgrind-$name" \
    "$bin" run "$work/$name.yaml" --listen 127.0.0.1:0 >"$work/out-$name" 2>"$work/log-$name") \
    || { cat "$work/log-$name" >&2; exit 1; }
  if [ -n "${KEEP_PROFILE:-}" ]; then cp "$work/callgrind-$name" "$KEEP_PROFILE-$n${every:+-$every}"; fi
  instructions=$(grep '^summary:' "$work/callgrind-$name" | awk '{ print $2 }')
  checkpoints=$(cat "$work/out-$name" "$work/log-$name" | grep -o 'checkpoints: [0-9]* completed' | tail -1 | awk '{ print $2 }')
}

label="$kind, p=${PARALLELISM:-1}"
if [ -n "${CHECKPOINTS:-}" ]; then
  interval=${interval:-1s}
  count "$small" 0s; a=$instructions; ra=$records
  count "$large" 0s; b=$instructions; rb=$records; cb=$checkpoints
  count "$large" "$interval"; c=$instructions; cc=$checkpoints
  echo "$label: $b instructions at $rb records with 0s ($cb checkpoints), $c with $interval ($cc checkpoints)"
  awk -v a="$a" -v b="$b" -v c="$c" -v s="$ra" -v l="$rb" -v cb="$cb" -v cc="$cc" 'BEGIN {
    per_record = (b - a) / (l - s); per_checkpoint = (c - b) / (cc - cb)
    printf "instructions/record: %.1f\ninstructions/checkpoint: %.0f (%.0f records)\n", per_record, per_checkpoint, per_checkpoint / per_record
  }'
  exit 0
fi
interval=${interval:-0s}
count "$small" "$interval"; a=$instructions; ra=$records
count "$large" "$interval"; b=$instructions; rb=$records
echo "$label, checkpoint interval $interval: $a instructions at $ra records, $b at $rb"
awk -v a="$a" -v b="$b" -v s="$ra" -v l="$rb" \
  'BEGIN { printf "instructions/record: %.1f\n", (b - a) / (l - s) }'
