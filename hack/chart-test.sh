#!/usr/bin/env bash
# Renders charts/weir-operator with `helm template` under several value sets and asserts on the
# output (RBAC narrows to watchNamespaces, leader-election RBAC only when it runs, no privileged
# pod settings, every RBAC rule commented, schema rejects bad values), and has the real
# weir-operator binary parse every rendered command line and environment (`run --check-args`).
# See hack/chart_test.py.
# Needs helm and a python with PyYAML: hack/install-tools.sh provides both under .tools/.
# WEIR_OPERATOR_BIN: the operator binary to check; default: `cargo build -p weir-operator` (debug).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-$(command -v helm || echo "$ROOT/.tools/bin/helm")}"
PYTHON="${PYTHON:-$ROOT/.tools/venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
export HELM
if [[ -z "${WEIR_OPERATOR_BIN:-}" ]]; then
  (cd "$ROOT" && cargo build --quiet --locked -p weir-operator --bin weir-operator)
  WEIR_OPERATOR_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/weir-operator"
fi
export WEIR_OPERATOR_BIN
exec "$PYTHON" "$ROOT/hack/chart_test.py"
