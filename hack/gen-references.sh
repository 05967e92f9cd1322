#!/usr/bin/env bash
# Regenerates every generated reference from the code:
#   - crds/, charts/weir-operator/crds/ (hack/gen-crds.sh) and the CRD reference docs
#     (hack/gen-crd-docs.py)
#   - docs/reference/metrics.md (the runtime's and the operator's metric registries), the
#     command reference in docs/reference/cli.md (clap's command tree) and the route table in
#     docs/reference/control-api.md (weir_runtime::control::routes::ROUTES), through the
#     operator test `references` with WEIR_BLESS=1
#
#   hack/gen-references.sh           regenerate all
#   hack/gen-references.sh --check   fail if any checked-in file differs (what CI does)
#
# CI runs the same checks: `cargo nextest run --workspace` includes the `references` test, and
# hack/static-checks.sh runs gen-crds.sh --check and gen-crd-docs.py --check.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

case "${1:-}" in
  "")
    bash hack/gen-crds.sh
    python3 hack/gen-crd-docs.py
    WEIR_BLESS=1 cargo test --quiet --locked -p weir-operator --test references
    ;;
  --check)
    bash hack/gen-crds.sh --check
    python3 hack/gen-crd-docs.py --check
    cargo test --quiet --locked -p weir-operator --test references
    ;;
  -h | --help)
    sed -n '2,14p' "$0"
    ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 2
    ;;
esac
