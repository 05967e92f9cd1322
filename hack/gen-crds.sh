#!/usr/bin/env bash
# Generates the CustomResourceDefinitions from the operator's Rust types (`weir-operator crdgen`)
# into crds/ and copies the same files into the Helm chart's crds/ folder.
#
#   hack/gen-crds.sh           regenerate crds/ and charts/weir-operator/crds/
#   hack/gen-crds.sh --check   regenerate into a temp dir and fail if either folder differs
#
# Both folders are committed: crds/ for `kubectl apply -f crds/`, the chart's copy because Helm
# installs CRDs only from the chart's own crds/ folder.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CHART_CRDS="charts/weir-operator/crds"

mode="write"
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help)
    sed -n '2,9p' "$0"
    exit 0
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac

if [[ "$mode" == check ]]; then
  # crds/ against the operator's types is checked by `cargo test` (operator/tests/crds.rs);
  # here the chart's copy must equal crds/ (no extra build of the operator).
  if ! diff -ru crds "$CHART_CRDS"; then
    echo "gen-crds: $CHART_CRDS/ differs from crds/: run 'hack/gen-crds.sh' and commit both" >&2
    exit 1
  fi
  echo "gen-crds: $CHART_CRDS/ matches crds/"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

cargo run -q -p weir-operator -- crdgen --out-dir "$tmp/crds" >/dev/null
shopt -s nullglob
generated=("$tmp"/crds/*.yaml)
if ((${#generated[@]} == 0)); then
  echo "gen-crds: weir-operator crdgen wrote no *.yaml files" >&2
  exit 1
fi

if [[ "$mode" == write ]]; then
  mkdir -p crds "$CHART_CRDS"
  rm -f crds/*.yaml "$CHART_CRDS"/*.yaml
  cp "$tmp"/crds/*.yaml crds/
  cp "$tmp"/crds/*.yaml "$CHART_CRDS"/
  echo "gen-crds: wrote $(cd "$tmp/crds" && echo *.yaml) into crds/ and $CHART_CRDS/"
  python3 hack/gen-crd-docs.py
  exit 0
fi
