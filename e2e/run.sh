#!/usr/bin/env bash
# Weir end-to-end suite on kind (needs Docker, kind, kubectl, helm, python3) or on the cluster
# stand-in (needs cargo, python3, npm; no Docker); see e2e/README.md.
#
#   e2e/run.sh [--cluster kind|standin] [--keep] [--reuse] [--skip-build] [--only "1 3 5"]
#              [--kind-name NAME] [--parallel]
#
#   --cluster C   kind (default): a kind cluster with the Docker image. standin: the stand-in API
#                 server on loopback with the real target/debug binaries as processes
#                 (docs/operator/standin.md); installs its own tools, builds with cargo
#   --keep        keep the kind cluster at the end (default: delete it, pass or fail)
#   --reuse       use the cluster NAME if it exists instead of failing (with --skip-build: rerun
#                 scenarios against a kept cluster in seconds)
#   --skip-build  do not build the image (kind: load the existing $WEIR_E2E_IMAGE_REPO:e2e-1;
#                 standin: use the existing target/debug binaries)
#   --only LIST   run only these scenarios (numbers, e.g. "3 7"); default: all
#   --kind-name N kind cluster name (default weir-e2e)
#   --parallel    run the scenarios concurrently (one log per scenario under e2e/artifacts/);
#                 the whole stand-in run then takes about as long as its longest scenario
#
# Steps: create the cluster, build the image and `kind load` it (tagged e2e-1 and e2e-2, the
# second for the upgrade scenario), install MinIO and upload ../shared/data/text/*.txt to
# s3://weir/input/, `helm install` charts/weir-operator watching namespace weir-e2e, run the
# scenarios in e2e/scenarios/, collect logs and status of a failed scenario under e2e/artifacts/,
# and delete the cluster unless --keep. Exit status 0 only if every scenario passed.
# shellcheck source-path=SCRIPTDIR
set -euo pipefail

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$E2E_DIR/.." && pwd)"
export E2E_DIR REPO_ROOT
# shellcheck source=lib/common.sh
source "$E2E_DIR/lib/common.sh"

CLUSTER="${WEIR_E2E_CLUSTER:-weir-e2e}"
MODE=kind
MINIO_IMAGE="${WEIR_E2E_MINIO_IMAGE:-quay.io/minio/minio:RELEASE.2025-09-07T16-13-09Z}"
MC_IMAGE="${WEIR_E2E_MC_IMAGE:-quay.io/minio/mc:RELEASE.2025-08-13T08-35-41Z}"
KEEP=0
REUSE=0
BUILD=1
ONLY=""
PARALLEL=0

while (($#)); do
  case "$1" in
    --keep) KEEP=1 ;;
    --reuse) REUSE=1 ;;
    --skip-build) BUILD=0 ;;
    --parallel) PARALLEL=1 ;;
    --only)
      ONLY="${2:?--only needs a list of scenario numbers}"
      shift
      ;;
    --cluster)
      MODE="${2:?--cluster needs kind or standin}"
      [[ "$MODE" == kind || "$MODE" == standin ]] ||
        { echo "--cluster takes kind or standin, not '$MODE' (the kind cluster name is --kind-name)" >&2; exit 2; }
      shift
      ;;
    --kind-name)
      CLUSTER="${2:?--kind-name needs a name}"
      shift
      ;;
    -h | --help)
      sed -n '2,26p' "$0"
      exit 0
      ;;
    *)
      echo "unknown argument: $1 (see --help)" >&2
      exit 2
      ;;
  esac
  shift
done

KUBECONFIG="$(mktemp -t weir-e2e-kubeconfig.XXXXXX)"
export KUBECONFIG
mkdir -p "$ARTIFACTS"

preflight() {
  local missing=() t
  for t in docker kind kubectl helm python3; do
    command -v "$t" >/dev/null || missing+=("$t")
  done
  ((${#missing[@]} == 0)) || fail "missing tools: ${missing[*]} (the suite runs where Docker runs; see e2e/README.md)"
  docker info >/dev/null 2>&1 || fail "cannot talk to the Docker daemon"
  docker buildx version >/dev/null 2>&1 || fail "docker buildx is missing (the image is built with docker buildx build --load)"
  compgen -G "$INPUT_DIR/*.txt" >/dev/null || fail "no input texts in $INPUT_DIR (set WEIR_E2E_INPUT_DIR)"
}

create_cluster() {
  if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    ((REUSE)) || fail "kind cluster $CLUSTER exists; pass --reuse to use it or delete it: kind delete cluster --name $CLUSTER"
    step "reusing kind cluster $CLUSTER"
    kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
  else
    step "creating kind cluster $CLUSTER"
    kind create cluster --name "$CLUSTER" --config "$E2E_DIR/kind-config.yaml" --kubeconfig "$KUBECONFIG" --wait 180s
  fi
  kubectl cluster-info >/dev/null
  CLUSTER_UP=1
}

build_and_load_image() {
  if ((BUILD)); then
    step "building $IMAGE_REPO:$IMAGE_TAG"
    # --load: with a buildx builder of the docker-container driver (CI's setup-buildx-action)
    # the image would otherwise stay in the builder's cache, and `docker tag` below would fail.
    docker buildx build --load \
      --build-arg WEIR_VERSION="e2e-$(git -C "$REPO_ROOT" describe --tags --always --dirty 2>/dev/null || echo unknown)" \
      --build-arg WEIR_GIT_REVISION="$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
      -t "$IMAGE_REPO:$IMAGE_TAG" "$REPO_ROOT"
  fi
  # The upgrade scenario changes spec.image to a second tag of the same build.
  docker tag "$IMAGE_REPO:$IMAGE_TAG" "$IMAGE_REPO:$UPGRADE_TAG"
  step "loading the images into kind"
  kind load docker-image --name "$CLUSTER" "$IMAGE_REPO:$IMAGE_TAG" "$IMAGE_REPO:$UPGRADE_TAG"
}

install_minio() {
  step "installing MinIO"
  sed -e "s|image: quay.io/minio/minio:.*|image: $MINIO_IMAGE|" -e "s|image: quay.io/minio/mc:.*|image: $MC_IMAGE|" \
    "$E2E_DIR/manifests/minio.yaml" | kubectl apply -f - >/dev/null
  kubectl -n minio rollout status deployment/minio --timeout=300s
  kubectl -n minio wait --for=condition=Ready pod/"$MC_POD" --timeout=300s
  mc mb --ignore-existing local/weir
  local f base
  for f in "$INPUT_DIR"/*.txt; do
    base="$(basename "$f")"
    log "upload $base to s3://weir/input/"
    mc pipe "local/weir/input/$base" <"$f" >/dev/null
  done
  mc ls local/weir/input/
}

install_operator() {
  step "installing the operator chart"
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  render "$E2E_DIR/manifests/s3-credentials.yaml" NAMESPACE="$NS" | kubectl apply -f - >/dev/null
  helm upgrade --install "$RELEASE" "$REPO_ROOT/charts/weir-operator" \
    --namespace "$OPERATOR_NS" --create-namespace \
    --set image.repository="$IMAGE_REPO" \
    --set image.tag="$IMAGE_TAG" \
    --set image.pullPolicy=Never \
    --set runtime.image.pullPolicy=Never \
    --set "watchNamespaces={$NS}" \
    --set-json "networkPolicies.extraOperatorEgress=$MINIO_EGRESS" \
    --wait --timeout 5m
  kubectl wait --for condition=established --timeout=60s crd/streamjobs.weir.dev crd/savepoints.weir.dev
  kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" | head -n 5 >&2 || true
}

collect_diagnostics() {
  local dir="$ARTIFACTS/$1"
  mkdir -p "$dir"
  log "collecting diagnostics into $dir"
  {
    kubectl get streamjobs,savepoints -A -o yaml
  } >"$dir/resources.yaml" 2>&1 || true
  kubectl -n "$NS" describe streamjobs,savepoints >"$dir/describe.txt" 2>&1 || true
  kubectl get events -A --sort-by=.lastTimestamp >"$dir/events.txt" 2>&1 || true
  kubectl get pods,deployments,statefulsets,services,configmaps -A -o wide >"$dir/objects.txt" 2>&1 || true
  kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" --all-containers --tail=-1 >"$dir/operator.log" 2>&1 || true
  kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" --all-containers --previous >"$dir/operator-previous.log" 2>&1 || true
  local pod
  for pod in $(kubectl -n "$NS" get pods -o name 2>/dev/null); do
    kubectl -n "$NS" logs "$pod" --all-containers --tail=-1 >"$dir/${pod#pod/}.log" 2>&1 || true
    kubectl -n "$NS" logs "$pod" --all-containers --previous >"$dir/${pod#pod/}-previous.log" 2>/dev/null || true
  done
  mc ls --recursive local/weir >"$dir/s3-listing.txt" 2>&1 || true
}

cleanup_jobs() {
  kubectl -n "$NS" delete savepoints --all --wait=false >/dev/null 2>&1 || true
  kubectl -n "$NS" delete streamjobs --all --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 180))
  while ((SECONDS < deadline)) && [[ -n "$(kubectl -n "$NS" get streamjobs,pods -o name 2>/dev/null | grep -v '^pod/$' || true)" ]]; do
    sleep 3
  done
}

finish() {
  local rc=$?
  if ((rc != 0 && CLUSTER_UP)) && ((${#RESULTS[@]} == 0)); then
    collect_diagnostics setup
  fi
  if [[ "$MODE" == standin ]]; then
    standin_down
    rm -f "$KUBECONFIG"
    exit "$rc"
  fi
  if ((KEEP)); then
    log "keeping kind cluster $CLUSTER (kubeconfig: kind get kubeconfig --name $CLUSTER)"
  elif kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "deleting kind cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  rm -f "$KUBECONFIG"
  exit "$rc"
}

RESULTS=()
CLUSTER_UP=0
trap finish EXIT

# Scenarios run in their own bash process (lib/run-scenario.sh) unless --parallel: they need to
# know which helpers to load.
export E2E_CLUSTER_MODE="$MODE"
if [[ "$MODE" == standin ]]; then
  # shellcheck source=lib/standin.sh
  source "$E2E_DIR/lib/standin.sh"
  # Extra `helm template` arguments, e.g. WEIR_STANDIN_HELM_ARGS="--set leaderElection.enabled=true".
  read -r -a STANDIN_HELM_ARGS <<<"${WEIR_STANDIN_HELM_ARGS:-}"
  standin_install
  standin_up
  standin_install_operator
else
  preflight
  create_cluster
  build_and_load_image
  install_minio
  install_operator
fi

passed=0
failed=0
SCRIPTS=()
for script in "$E2E_DIR"/scenarios/[0-9]*.sh; do
  name="$(basename "$script" .sh)"
  num="$((10#${name%%-*}))"
  if [[ -z "$ONLY" || " $ONLY " == *" $num "* ]]; then
    SCRIPTS+=("$script")
  fi
done

if ((PARALLEL)); then
  # All scenarios at once against the one operator (each has its own StreamJob names); each
  # one's output goes to $ARTIFACTS/<scenario>.log. Scenario 7 restarts the operator while the
  # others run: they must ride through that too.
  pids=()
  start=$SECONDS
  for script in "${SCRIPTS[@]}"; do
    name="$(basename "$script" .sh)"
    step "scenario $name (in parallel; log $ARTIFACTS/$name.log)"
    rm -f "$ARTIFACTS/$name.seconds"
    (
      set -euo pipefail
      # The scenario's own duration (the waits below end in order, so the time a wait returns
      # is the longest of the scenarios before it).
      # shellcheck disable=SC2064 # expand name and start now
      trap "echo \$((SECONDS - $start)) >'$ARTIFACTS/$name.seconds'" EXIT
      # shellcheck source=/dev/null
      source "$script"
    ) >"$ARTIFACTS/$name.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!SCRIPTS[@]}"; do
    name="$(basename "${SCRIPTS[$i]}" .sh)"
    if wait "${pids[$i]}"; then
      RESULTS+=("PASS $name ($(cat "$ARTIFACTS/$name.seconds" 2>/dev/null || echo '?')s)")
      passed=$((passed + 1))
    else
      # The reason on the results line: CI shows only the end of the run's output.
      reason="$(grep -m 1 -F '[e2e] FAIL:' "$ARTIFACTS/$name.log" || tail -n 1 "$ARTIFACTS/$name.log")"
      RESULTS+=("FAIL $name ($(cat "$ARTIFACTS/$name.seconds" 2>/dev/null || echo '?')s): ${reason:0:400}; log $ARTIFACTS/$name.log, diagnostics in $ARTIFACTS/$name/")
      failed=$((failed + 1))
      log "scenario $name failed:"$'\n'"$(tail -n 5 "$ARTIFACTS/$name.log")"
      collect_diagnostics "$name"
    fi
  done
  ((failed == 0)) || cleanup_jobs
fi

for script in "${SCRIPTS[@]}"; do
  ((PARALLEL)) && break
  name="$(basename "$script" .sh)"
  step "scenario $name"
  start=$SECONDS
  # A process of its own: inside this `if`, bash would ignore a `set -e` of a subshell.
  if bash "$E2E_DIR/lib/run-scenario.sh" "$script"; then
    RESULTS+=("PASS $name ($((SECONDS - start))s)")
    passed=$((passed + 1))
  else
    RESULTS+=("FAIL $name ($((SECONDS - start))s), diagnostics in $ARTIFACTS/$name/")
    failed=$((failed + 1))
    collect_diagnostics "$name"
    cleanup_jobs
  fi
done

rbac_rc=0
if [[ "$MODE" == standin ]]; then
  # Unused grants fail only when every scenario ran (a subset uses fewer verbs).
  standin_rbac_check "$([[ -z "$ONLY" ]] && echo all)" || rbac_rc=1
fi

step "results"
printf '  %s\n' "${RESULTS[@]}" >&2
# CI shows only the end of the output: each failed scenario's Warning events of its StreamJobs
# (from its diagnostics), the operator's account of what it decided. Only a --parallel run has
# a log per scenario to find its StreamJobs in.
for result in "${RESULTS[@]}"; do
  [[ "$result" == FAIL* ]] || continue
  name="${result#FAIL }"
  name="${name%% *}"
  sed -n 's/.*apply StreamJob \([a-z0-9-]*\) .*/\1/p' "$ARTIFACTS/$name.log" 2>/dev/null | sort -u |
    while read -r job; do
      grep -F -w "$job" "$ARTIFACTS/$name/events.txt" 2>/dev/null | grep -w Warning | tail -n 6 | cut -c 1-400 |
        sed "s|^|  $name: |" >&2 || true
    done
done
echo "e2e ($MODE): $passed passed, $failed failed$( ((rbac_rc)) && echo ', RBAC check failed')"
((failed == 0 && rbac_rc == 0))
