#!/usr/bin/env bash
# Instructions per record (callgrind) of one generator-shaped batch of 1,024 records
# (`id` i64, `key` "key-<k>" string, `value` i64) plus the `id % 100000` kernel and a drop,
# built with Arrow's builders (`arrow`) and with plain typed vectors (`own`): the difference
# of a 300- and a 100-batch run over 200 × 1,024 records.
set -euo pipefail
cd "$(dirname "$0")"
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/tmp/arrow-vs-vectors-target} cargo build --release -q
bin=${CARGO_TARGET_DIR:-/tmp/arrow-vs-vectors-target}/release/arrow-vs-vectors
for kind in arrow own; do
  a=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$kind" 100 2>&1 | grep -o 'Collected : [0-9]*' | awk '{print $3}')
  b=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$kind" 300 2>&1 | grep -o 'Collected : [0-9]*' | awk '{print $3}')
  awk -v k="$kind" -v a="$a" -v b="$b" 'BEGIN { printf "%s: %.1f instructions/record\n", k, (b - a) / (200 * 1024) }'
done
