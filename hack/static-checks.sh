#!/usr/bin/env bash
# Everything about the image, chart, e2e suite and workflows that can be checked without a
# container engine or a cluster. Run by .ci/run; runnable on its own from any directory:
#
#   hack/static-checks.sh
#
# 1. tools (hack/install-tools.sh: kubectl, helm, kubernetes-validate, shellcheck into .tools/)
# 2. CRDs in sync: crds/ and the chart's crds/ equal `weir-operator crdgen` output (once they exist)
#    and one feature set: `cargo run -p` a member picks the workspace build's crate features
# 3. helm lint --strict, with the default values and with the other RBAC/leader-election shapes
# 4. helm template --include-crds validated offline: kubernetes-validate --strict -k 1.35.0
# 5. chart assertions (hack/chart-test.sh)
# 6. e2e manifests: MinIO manifests validate; the StreamJob/Savepoint manifests validate against
#    the CRDs' OpenAPI schemas
# 7. shell scripts: bash -n and shellcheck; python helpers compile
# 8. Dockerfile and workflows: builder Rust >= rust-version, both binaries exist in the workspace,
#    .dockerignore keeps the workspace, workflows are valid YAML running the right commands
# Ends with "static-checks: N passed, M failed"; exit status 1 if any check failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
K8S_VERSION="1.35.0"
CHART="charts/weir-operator"

bash hack/install-tools.sh || {
  echo "static-checks: installing the tools failed"
  echo "static-checks: 0 passed, 1 failed"
  exit 1
}
export PATH="$ROOT/.tools/bin:$PATH"
PY="$ROOT/.tools/venv/bin/python"
export HELM="$ROOT/.tools/bin/helm"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

passed=0
failed=0
failures=()
check() { # NAME COMMAND...
  local name="$1" out
  shift
  if out="$("$@" 2>&1)"; then
    passed=$((passed + 1))
    printf 'ok    %s\n' "$name"
  else
    failed=$((failed + 1))
    failures+=("$name")
    printf 'FAIL  %s\n' "$name"
    printf '%s\n' "$out" | sed 's/^/      /' | tail -n 40
  fi
}

# Value sets the chart is rendered with: default (all namespaces, one replica) and the others.
VALUE_SETS=(
  ""
  "--set watchNamespaces={team-a,team-b}"
  "--set replicas=2 --set serviceMonitor.enabled=true"
  "--set leaderElection.enabled=true --set watchNamespaces={team-a}"
  "--set networkPolicies.enabled=false"
  "--set networkPolicies.monitoringNamespaceSelector=null --set networkPolicies.apiServer.cidrs={10.0.0.1/32}"
  "--set monitoring.podMonitor.enabled=true --set monitoring.grafanaDashboard.enabled=true"
)

have_crds() { compgen -G "crds/*.yaml" >/dev/null || compgen -G "$CHART/crds/*.yaml" >/dev/null; }

# --- 2. CRDs ---------------------------------------------------------------------------------------
# crds/ arrives with the operator's crdgen; from then on both copies must equal its output.
check "chart CRDs equal crds/ (hack/gen-crds.sh --check; crds/ vs crdgen is a cargo test)" bash hack/gen-crds.sh --check
check "CRD reference docs in sync (hack/gen-crd-docs.py --check)" python3 hack/gen-crd-docs.py --check
check "one feature set: cargo run -p <member> builds what cargo build --workspace built (hack/check-feature-unification.py)" python3 hack/check-feature-unification.py
check "Markdown links: every relative link's file and #anchor exist (hack/check-doc-links.py)" python3 hack/check-doc-links.py

# --- 3. helm lint ----------------------------------------------------------------------------------
for vs in "${VALUE_SETS[@]}"; do
  # shellcheck disable=SC2086 # value sets are word-split on purpose
  check "helm lint --strict ${vs:-(default values)}" helm lint --strict "$CHART" $vs
done

# --- 4. kubernetes-validate ------------------------------------------------------------------------
validate_render() { # VALUE_SET
  local out="$TMP/render.yaml"
  # shellcheck disable=SC2086
  helm template weir-operator "$CHART" --namespace weir-system --include-crds $1 >"$out" || return 1
  kubernetes-validate --strict --quiet -k "$K8S_VERSION" "$out"
}
for vs in "${VALUE_SETS[@]}"; do
  check "helm template --include-crds ${vs:-(default values)} | kubernetes-validate --strict -k $K8S_VERSION" \
    validate_render "$vs"
done

# The per-job NetworkPolicies the operator renders (its snapshot test pins this file).
check "operator's per-job NetworkPolicies (operator/tests/snapshots/network-policies.yaml) | kubernetes-validate --strict -k $K8S_VERSION" \
  kubernetes-validate --strict --quiet -k "$K8S_VERSION" operator/tests/snapshots/network-policies.yaml
# kubernetes-validate has no schema for monitoring.coreos.com kinds: it warns "Couldn't find
# schema" and passes them. Validate the PodMonitor and ServiceMonitor against the Prometheus
# Operator CRD schemas instead (hack/validate-monitoring.mjs).
validate_monitoring() {
  local out="$TMP/monitoring.yaml"
  helm template weir-operator "$CHART" --namespace weir-system \
    --set serviceMonitor.enabled=true --set monitoring.podMonitor.enabled=true \
    --set "watchNamespaces={team-a}" >"$out" || return 1
  "$PY" -c 'import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("apiVersion", "").startswith("monitoring.coreos.com/")]
assert sorted(d["kind"] for d in docs) == ["PodMonitor", "ServiceMonitor"], [d["kind"] for d in docs]
json.dump(docs, sys.stdout)' "$out" | node hack/validate-monitoring.mjs
}
check "PodMonitor and ServiceMonitor validate against the Prometheus Operator CRD schemas" validate_monitoring

# --- 5. chart assertions ---------------------------------------------------------------------------
check "chart assertions (hack/chart-test.sh)" bash hack/chart-test.sh

# --- 6. e2e manifests ------------------------------------------------------------------------------
validate_minio() {
  # shellcheck source=../e2e/lib/common.sh
  (source e2e/lib/common.sh &&
    cat e2e/manifests/minio.yaml &&
    echo "---" &&
    render e2e/manifests/s3-credentials.yaml NAMESPACE=weir-e2e) >"$TMP/minio.yaml" || return 1
  ! grep -n '[$]{' "$TMP/minio.yaml" || return 1
  kubernetes-validate --strict --quiet -k "$K8S_VERSION" "$TMP/minio.yaml"
}
check "e2e MinIO manifests | kubernetes-validate --strict" validate_minio

validate_custom_resources() {
  (
    source e2e/lib/common.sh
    for mode in savepoint last-state stateless; do
      wordcount_manifest "wc-$mode" 2 "$mode"
      echo "---"
    done
    STATE_BACKEND=disk INCREMENTAL=true wordcount_manifest wc-disk 2 last-state
    echo "---"
    render e2e/manifests/savepoint.yaml NAME=sp NAMESPACE=weir-e2e JOB=wc-savepoint
  ) >"$TMP/cr.yaml" || return 1
  local crd_dir=crds
  compgen -G "crds/*.yaml" >/dev/null || crd_dir="$CHART/crds"
  "$PY" hack/validate_cr.py "$crd_dir" "$TMP/cr.yaml"
}
if have_crds; then
  check "e2e StreamJob/Savepoint manifests validate against the CRD schemas" validate_custom_resources
else
  echo "skip  e2e custom resources vs CRD schemas: no CRDs yet"
fi

# --- 7. scripts ------------------------------------------------------------------------------------
mapfile -t SCRIPTS < <(find hack e2e -name '*.sh' -type f | sort)
for s in "${SCRIPTS[@]}"; do
  check "bash -n $s" bash -n "$s"
done
check "shellcheck (${#SCRIPTS[@]} scripts)" shellcheck -x -P SCRIPTDIR -s bash "${SCRIPTS[@]}"
mapfile -t PYS < <(find hack e2e -name '*.py' -type f | sort)
check "python helpers compile (${#PYS[@]} files)" "$PY" -m py_compile "${PYS[@]}"
check "e2e word-count check rejects a duplicate and a gap" "$PY" hack/test_wordcount_check.py
check "e2e secret grep finds a value as written, base64 and hex, and names none" "$PY" hack/test_secret_grep.py
check "e2e machinery: scenarios fail on a failing command; wait_first_checkpoint waits for the new run" \
  bash hack/test-e2e-lib.sh

# --- 8. Dockerfile, workflows ----------------------------------------------------------------------
check_dockerfile() {
  local want have
  want="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)"
  have="$(sed -n 's/^ARG RUST_VERSION=\([0-9.]*\).*/\1/p' Dockerfile)"
  [[ -n "$want" && -n "$have" ]] || { echo "rust-version or ARG RUST_VERSION not found"; return 1; }
  [[ "$(printf '%s\n%s\n' "$want" "$have" | sort -V | head -n 1)" == "$want" ]] ||
    { echo "Dockerfile builds with Rust $have < workspace rust-version $want"; return 1; }
  grep -q 'name = "weir"' runtime/Cargo.toml || { echo "runtime/Cargo.toml has no [[bin]] weir"; return 1; }
  grep -q 'name = "weir-operator"' operator/Cargo.toml || { echo "operator/Cargo.toml has no [[bin]] weir-operator"; return 1; }
  grep -q -- '--bin weir --bin weir-operator' Dockerfile || { echo "Dockerfile does not build both binaries"; return 1; }
  grep -q '^USER 65532:65532' Dockerfile || { echo "final stage is not USER 65532"; return 1; }
  # Builder and final stage on the same Debian release (a binary built against Debian 13's glibc
  # does not start on cc-debian12), both from the one pair of ARGs.
  local codename version
  codename="$(sed -n 's/^ARG DEBIAN_CODENAME=\([a-z]*\)$/\1/p' Dockerfile)"
  version="$(sed -n 's/^ARG DEBIAN_VERSION=\([0-9]*\)$/\1/p' Dockerfile)"
  case "$codename/$version" in
    bookworm/12 | trixie/13) ;;
    *) echo "ARG DEBIAN_CODENAME=$codename and ARG DEBIAN_VERSION=$version do not name the same Debian release"; return 1 ;;
  esac
  # shellcheck disable=SC2016 # the Dockerfile's literal ${...}
  grep -q '^FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_CODENAME} AS builder$' Dockerfile ||
    { echo "builder stage is not rust:\${RUST_VERSION}-\${DEBIAN_CODENAME}"; return 1; }
  # shellcheck disable=SC2016 # the Dockerfile's literal ${...}
  grep -q '^FROM gcr.io/distroless/cc-debian${DEBIAN_VERSION}:nonroot$' Dockerfile ||
    { echo "final stage is not distroless cc-debian\${DEBIAN_VERSION}"; return 1; }
  [[ "$(grep -c '^FROM ' Dockerfile)" == 2 ]] || { echo "expected exactly two stages (builder, final)"; return 1; }
  local p
  for p in Cargo.toml Cargo.lock runtime operator; do
    if grep -qx "$p" .dockerignore; then echo ".dockerignore excludes $p"; return 1; fi
  done
}
check "Dockerfile: Rust version, both binaries, non-root, context keeps the workspace" check_dockerfile

check_workflows() {
  "$PY" - <<'EOF'
import sys, yaml
ci = yaml.safe_load(open(".github/workflows/ci.yml"))
e2e = yaml.safe_load(open(".github/workflows/e2e.yml"))
runs = lambda wf: [s.get("run", "") for j in wf["jobs"].values() for s in j["steps"]]
assert any("bash .ci/run" in r for r in runs(ci)), "ci.yml does not run bash .ci/run"
assert any("e2e/run.sh" in r for r in runs(e2e)), "e2e.yml does not run e2e/run.sh"
assert any("kind-action" in s.get("uses", "") for j in e2e["jobs"].values() for s in j["steps"]), "e2e.yml does not install kind"
# A buildx builder (setup-buildx-action, docker-container driver) keeps built images in its own
# cache: e2e/run.sh must --load the image into Docker before `docker tag` and `kind load`.
if any("setup-buildx-action" in s.get("uses", "") for j in e2e["jobs"].values() for s in j["steps"]):
    run_sh = open("e2e/run.sh").read()
    assert "docker buildx build --load" in run_sh, "e2e.yml sets up a buildx builder but e2e/run.sh does not build with --load"
    assert "docker build " not in run_sh, "e2e/run.sh builds with plain docker build (image stays in the buildx cache)"
EOF
}
check "workflows: ci.yml runs .ci/run, e2e.yml installs kind and runs e2e/run.sh" check_workflows

echo
if ((failed > 0)); then
  printf 'failed: %s\n' "${failures[@]}"
fi
echo "static-checks: $passed passed, $failed failed"
((failed == 0))
