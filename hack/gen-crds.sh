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

status=0
for dir in crds "$CHART_CRDS"; do
  if ! diff -ru --label "generated" --label "$dir" "$tmp/crds" "$dir" >"$tmp/diff" 2>&1; then
    echo "gen-crds: $dir/ is out of date with the operator's CRD types:" >&2
    sed 's/^/    /' "$tmp/diff" | head -n 60 >&2
    status=1
  fi
done
if ((status != 0)); then
  echo "gen-crds: run 'hack/gen-crds.sh' and commit crds/ and $CHART_CRDS/" >&2
  exit 1
fi
echo "gen-crds: crds/ and $CHART_CRDS/ match the generated CRDs"
