# shellcheck shell=bash disable=SC2034
# The cluster stand-in tier of e2e/run.sh (`--cluster standin`). Sourced after lib/common.sh.
#
# Instead of kind + Docker + MinIO: the stand-in API server (e2e/standin/) on loopback with its
# process kubelet, the real target/debug/weir-operator started from the chart's rendered
# Deployment (exact args and env) and target/debug/weir as the coordinator and worker pods, and
# moto as S3. See docs/operator/standin.md for what this covers and what it cannot show.

STANDIN_DIR="${WEIR_STANDIN_DIR:-$ARTIFACTS/standin}"
STANDIN_VENV="$REPO_ROOT/.tools/standin-venv"
STANDIN_PY="$STANDIN_VENV/bin/python"
STANDIN_PIP_PACKAGES=(pyyaml==6.0.3 cel-python==0.5.0 "moto[server]==5.2.5" boto3==1.43.11 pytest==9.2.0)
STANDIN_PID=""
MOTO_PID=""

standin_install() {
  step "installing the stand-in's tools (helm, kubectl, Python packages) and building the binaries"
  "$REPO_ROOT/hack/install-tools.sh" >&2
  export PATH="$REPO_ROOT/.tools/bin:$PATH"
  local stamp
  stamp="$STANDIN_VENV/.packages-$(printf '%s' "${STANDIN_PIP_PACKAGES[*]}" | cksum | cut -d' ' -f1)"
  if [[ ! -f "$stamp" ]]; then
    python3 -m venv "$STANDIN_VENV"
    "$STANDIN_VENV/bin/pip" install --quiet --disable-pip-version-check "${STANDIN_PIP_PACKAGES[@]}"
    touch "$stamp"
  fi
  step "the stand-in's own fidelity tests"
  "$STANDIN_PY" -m pytest -q -p no:cacheprovider "$E2E_DIR/standin/tests" >&2 ||
    fail "the stand-in's fidelity tests failed: it would not refuse what the API server refuses"
  if ((BUILD)); then
    (cd "$REPO_ROOT" && cargo build --locked -p weir-operator -p weir-runtime)
  fi
  local b
  for b in weir weir-operator; do
    [[ -x "$REPO_ROOT/target/debug/$b" ]] || fail "missing target/debug/$b (run without --skip-build)"
  done
  compgen -G "$INPUT_DIR/*.txt" >/dev/null || fail "no input texts in $INPUT_DIR (set WEIR_E2E_INPUT_DIR)"
}

free_port() { "$STANDIN_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

standin_up() {
  step "starting the cluster stand-in and moto (S3)"
  rm -rf "$STANDIN_DIR"
  mkdir -p "$STANDIN_DIR"
  "$STANDIN_PY" "$E2E_DIR/standin/main.py" --dir "$STANDIN_DIR" \
    --binary "weir=$REPO_ROOT/target/debug/weir" \
    --binary "weir-operator=$REPO_ROOT/target/debug/weir-operator" >"$STANDIN_DIR/standin.log" 2>&1 &
  STANDIN_PID=$!
  local port
  port="$(free_port)"
  "$STANDIN_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$STANDIN_DIR/moto.log" 2>&1 &
  MOTO_PID=$!
  S3_ENDPOINT="http://127.0.0.1:$port"
  export S3_ENDPOINT
  local deadline=$((SECONDS + 60))
  until [[ -f "$STANDIN_DIR/ready" ]]; do
    ((SECONDS < deadline)) || fail "the stand-in did not start; see $STANDIN_DIR/standin.log"
    kill -0 "$STANDIN_PID" 2>/dev/null || fail "the stand-in exited; see $STANDIN_DIR/standin.log"
    sleep 0.2
  done
  cp "$STANDIN_DIR/kubeconfig" "$KUBECONFIG"
  # coordinator_api reaches the control API through the pods' forward proxy (it needs the job
  # secret as a bearer token, which the API server's service proxy drops).
  STANDIN_PROXY_URL="$(cat "$STANDIN_DIR/proxy-url")"
  export STANDIN_PROXY_URL
  until s3cmd mb weir 2>/dev/null; do
    ((SECONDS < deadline)) || fail "moto did not start; see $STANDIN_DIR/moto.log"
    sleep 0.5
  done
  CLUSTER_UP=1
  local f
  for f in "$INPUT_DIR"/*.txt; do
    s3cmd put "$f" "s3://weir/input/$(basename "$f")"
  done
  log "inputs uploaded to s3://weir/input/ on moto ($S3_ENDPOINT)"
}

standin_down() {
  [[ -n "$STANDIN_PID" ]] && kill "$STANDIN_PID" 2>/dev/null && wait "$STANDIN_PID" 2>/dev/null
  [[ -n "$MOTO_PID" ]] && kill "$MOTO_PID" 2>/dev/null && wait "$MOTO_PID" 2>/dev/null
  STANDIN_PID=""
  MOTO_PID=""
}

# The chart rendered with the same values as the kind install; applied with kubectl, so the
# operator runs with exactly the rendered command, args, env and RBAC.
standin_install_operator() {
  step "rendering the operator chart with helm and applying it"
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl create namespace "$OPERATOR_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  render "$E2E_DIR/manifests/s3-credentials.yaml" NAMESPACE="$NS" | kubectl apply -f - >/dev/null
  helm template "$RELEASE" "$REPO_ROOT/charts/weir-operator" --namespace "$OPERATOR_NS" --include-crds \
    --set image.repository="$IMAGE_REPO" \
    --set image.tag="$IMAGE_TAG" \
    --set image.pullPolicy=Never \
    --set runtime.image.pullPolicy=Never \
    --set "watchNamespaces={$NS}" \
    --set-json "networkPolicies.extraOperatorEgress=$MINIO_EGRESS" \
    "${STANDIN_HELM_ARGS[@]}" >"$STANDIN_DIR/chart.yaml"
  kubectl apply -f "$STANDIN_DIR/chart.yaml" >&2
  # For working on the stand-in while a known chart defect blocks every scenario: extra
  # manifests (space-separated files) applied after the chart. Never set in CI: the run must
  # show the chart as it is.
  local extra
  for extra in ${WEIR_STANDIN_EXTRA_MANIFESTS:-}; do
    log "applying extra manifest $extra (WEIR_STANDIN_EXTRA_MANIFESTS; not the chart as shipped)"
    kubectl apply -f "$extra" >&2
  done
  kubectl wait --for condition=established --timeout=60s crd/streamjobs.weir.dev crd/savepoints.weir.dev >/dev/null
  kubectl -n "$OPERATOR_NS" rollout status deployment/"$RELEASE" --timeout=120s >&2 ||
    fail "the operator did not become ready; its log: $(kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" --tail=20 2>&1)"
  kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" | head -n 5 >&2 || true
}

# Checks every API request of the operator's ServiceAccount against the chart's rules.
# With an argument "all" (every scenario ran), a granted verb no request used fails too unless
# e2e/standin/rbac_allowlist.yaml names it with the path that needs it.
standin_rbac_check() {
  step "checking the operator's API requests against the chart's RBAC"
  local extra=()
  if [[ "${1:-}" == all ]]; then
    extra=(--fail-unused --allow-unused "$E2E_DIR/standin/rbac_allowlist.yaml")
  fi
  "$STANDIN_PY" "$E2E_DIR/standin/rbac_check.py" --log "$STANDIN_DIR/requests.jsonl" \
    --manifests "$STANDIN_DIR/chart.yaml" --user "system:serviceaccount:$OPERATOR_NS:$RELEASE" "${extra[@]}"
}

s3cmd() { "$STANDIN_PY" "$E2E_DIR/lib/s3.py" "$S3_ENDPOINT" "$@"; }

# --- overrides of the MinIO helpers of lib/common.sh ------------------------------------------------
s3_exists() { s3cmd stat "$1"; }
s3_put_text() { printf '%s' "$2" | s3cmd put - "$1"; }
s3_remove() { s3cmd rm "$1"; }
s3_copy() { s3cmd cp "$1" "$2"; }
job_output() { s3cmd cat-parts "s3://weir/output/$1/"; }
mc() {
  if [[ "${1:-} ${2:-}" == "ls --recursive" ]]; then
    s3cmd ls "s3://${3#local/}"
  else
    echo "mc $* is not available on the stand-in" >&2
    return 1
  fi
}
