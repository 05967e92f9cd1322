#!/usr/bin/env bash
# Renders charts/weir-operator with `helm template` under several value sets and asserts on the
# output (RBAC narrows to watchNamespaces, leader-election RBAC only when it runs, no privileged
# pod settings, every RBAC rule commented, schema rejects bad values). See hack/chart_test.py.
# Needs helm and a python with PyYAML: hack/install-tools.sh provides both under .tools/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HELM="${HELM:-$(command -v helm || echo "$ROOT/.tools/bin/helm")}"
PYTHON="${PYTHON:-$ROOT/.tools/venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
export HELM
exec "$PYTHON" "$ROOT/hack/chart_test.py"
