# shellcheck shell=bash disable=SC2034 # settings below are used by the scenarios sourcing this file
# Helpers shared by e2e/run.sh and the scenarios in e2e/scenarios/. Sourced, not executed.
#
# Contract with the operator that the assertions rely on (besides the CRD status fields):
#   - every pod of a job carries the label  $JOB_LABEL=<StreamJob name>   (default weir.dev/job)
#     and                                   $GEN_LABEL=<status.deployGeneration>
#   - the coordinator Deployment and worker StatefulSet are owned (ownerReferences) by the StreamJob
#   - the coordinator's control API is served on port 8081 by a Service of the job

E2E_DIR="${E2E_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
REPO_ROOT="${REPO_ROOT:-$(cd "$E2E_DIR/.." && pwd)}"

NS="${WEIR_E2E_NAMESPACE:-weir-e2e}"            # namespace of the StreamJobs
OPERATOR_NS="${WEIR_E2E_OPERATOR_NAMESPACE:-weir-system}"
RELEASE="${WEIR_E2E_RELEASE:-weir-operator}"
JOB_LABEL="${WEIR_E2E_JOB_LABEL:-weir.dev/job}"
# The operator pod's NetworkPolicy lets it reach S3 on 443 only; the e2e MinIO listens on 9000
# in namespace minio (the operator reads it for restore points and savepoint disposal).
# shellcheck disable=SC2089,SC2090 # JSON passed whole to helm --set-json, never word-split
MINIO_EGRESS='[{"ports":[{"protocol":"TCP","port":9000}],"to":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"minio"}}}]}]'
# shellcheck disable=SC2090 # as above
export MINIO_EGRESS
GEN_LABEL="${WEIR_E2E_GEN_LABEL:-weir.dev/deployment-generation}"
IMAGE_REPO="${WEIR_E2E_IMAGE_REPO:-ghcr.io/weir-dev/weir}"
IMAGE_TAG="${WEIR_E2E_IMAGE_TAG:-e2e-1}"          # the image every job starts with
UPGRADE_TAG="${WEIR_E2E_UPGRADE_TAG:-e2e-2}"      # the tag scenario 4 upgrades to
# Source rate limit (records/s per source subtask): 61,692 input lines take ~200 s at
# parallelism >= 2, long enough to rescale, upgrade, suspend and kill things mid-run.
RATE="${WEIR_E2E_RATE:-200}"
INPUT_DIR="${WEIR_E2E_INPUT_DIR:-$REPO_ROOT/../shared/data/text}"
ARTIFACTS="${WEIR_E2E_ARTIFACTS:-$E2E_DIR/artifacts}"
TIMEOUT="${WEIR_E2E_TIMEOUT:-300}"                # default wait, seconds
FINISH_TIMEOUT="${WEIR_E2E_FINISH_TIMEOUT:-900}"  # wait for a job to consume all input
MC_POD="mc"                                       # MinIO client pod in namespace minio
# S3 endpoint the StreamJobs use: the in-cluster MinIO on kind, moto on loopback on the stand-in.
S3_ENDPOINT="${S3_ENDPOINT:-http://minio.minio:9000}"

log() { printf '%s [e2e] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
step() { printf '%s [e2e] --- %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fail() {
  printf '%s [e2e] FAIL: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2
  exit 1
}

# jq-like evaluation without jq: jsonq EXPR reads JSON on stdin, binds it to `d`, prints EXPR.
jsonq() { python3 "$E2E_DIR/lib/jsonq.py" "$@"; }

# --- rendering -----------------------------------------------------------------------------------

# render FILE VAR=VALUE... : prints FILE with each ${VAR} replaced (only the variables given).
render() {
  local file="$1" script=() kv key value
  shift
  for kv in "$@"; do
    key="${kv%%=*}"
    value="${kv#*=}"
    value="${value//\\/\\\\}"
    value="${value//|/\\|}"
    value="${value//&/\\&}"
    script+=(-e "s|\${$key}|$value|g")
  done
  sed "${script[@]}" "$file"
}

# wordcount_manifest NAME PARALLELISM UPGRADE_MODE [IMAGE_TAG]: the S3 word-count StreamJob, on
# the heap backend with full checkpoints unless STATE_BACKEND (disk) and INCREMENTAL (true) are set.
wordcount_manifest() {
  render "$E2E_DIR/manifests/wordcount-s3.yaml" \
    NAME="$1" NAMESPACE="$NS" PARALLELISM="$2" UPGRADE_MODE="$3" \
    IMAGE="$IMAGE_REPO:${4:-$IMAGE_TAG}" RATE="$RATE" S3_ENDPOINT="$S3_ENDPOINT" \
    STATE_BACKEND="${STATE_BACKEND:-heap}" INCREMENTAL="${INCREMENTAL:-false}"
}

apply_wordcount() {
  log "apply StreamJob $1 (parallelism $2, upgradeMode $3)"
  wordcount_manifest "$@" | kubectl apply -f - >/dev/null
}

# --- reading state -------------------------------------------------------------------------------

sj_json() { kubectl -n "$NS" get streamjob "$1" -o json; }
# sj_get NAME EXPR: a Python expression over the StreamJob as `d` (missing keys print nothing).
sj_get() { sj_json "$1" | jsonq "$2"; }
lifecycle() { sj_get "$1" 'd["status"]["lifecycleState"]'; }
job_state() { sj_get "$1" 'd["status"]["jobStatus"]["state"]'; }
job_id() { sj_get "$1" 'd["status"]["jobStatus"]["jobId"]'; }
last_checkpoint_id() { sj_get "$1" 'd["status"]["jobStatus"]["lastCheckpoint"]["id"]'; }
deploy_generation() { sj_get "$1" 'd["status"]["deployGeneration"]'; }

job_pods() { kubectl -n "$NS" get pods -l "$JOB_LABEL=$1" -o json; }
job_pod_count() { job_pods "$1" | jsonq 'len(d["items"])'; }
# Distinct deploy generations among the job's pods, terminating ones included.
job_pod_generations() {
  job_pods "$1" | jsonq "len({p['metadata']['labels'].get('$GEN_LABEL') for p in d['items']})"
}

# upgrade_savepoints NAME: how many Savepoint objects of origin Upgrade name StreamJob NAME.
upgrade_savepoints() {
  kubectl -n "$NS" get savepoints -o json |
    jsonq "len([s for s in d['items'] if s['spec']['jobRef']['name'] == '$1' and s['spec'].get('origin') == 'Upgrade'])"
}

# owned KIND NAME: names of objects of KIND owned by StreamJob NAME.
owned() {
  local uid
  uid="$(sj_get "$2" 'd["metadata"]["uid"]')"
  kubectl -n "$NS" get "$1" -o json |
    jsonq "' '.join(o['metadata']['name'] for o in d['items'] if any(r.get('uid') == '$uid' for r in o['metadata'].get('ownerReferences', [])))"
}

# Pods of the job's worker StatefulSet(s).
worker_pods() {
  local sts
  for sts in $(owned statefulsets "$1"); do
    kubectl -n "$NS" get pods -o name | sed -n "s|^pod/\($sts-[0-9]*\)$|\1|p"
  done
}

# coordinator_api NAME PATH: GET PATH on the job's control API with the job's token (from the
# Secret `<job key>-job-secret` the operator made) as the bearer token. The API server's service
# proxy drops Authorization headers, so: on the stand-in through the pods' forward proxy
# (STANDIN_PROXY_URL), on kind through a port-forward to the Service for this one request.
coordinator_api() {
  local svc token
  svc="$(kubectl -n "$NS" get services -l "$JOB_LABEL=$1" -o json |
    jsonq "' '.join(s['metadata']['name'] for s in d['items'] if s['spec'].get('clusterIP') != 'None' and any(p['port'] == 8081 for p in s['spec']['ports']))" |
    awk '{print $1}')"
  [[ -n "$svc" ]] || return 1
  token="$(kubectl -n "$NS" get secret "${svc%-coordinator}-job-secret" -o jsonpath='{.data.job\.secret}' | base64 -d)"
  [[ -n "$token" ]] || return 1
  if [[ -n "${STANDIN_PROXY_URL:-}" ]]; then
    curl -sf -x "$STANDIN_PROXY_URL" -H "Authorization: Bearer $token" "http://$svc.$NS.svc:8081$2"
    return
  fi
  local port pf out rc=1 tries
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  kubectl -n "$NS" port-forward "service/$svc" "$port:8081" >/dev/null 2>&1 &
  pf=$!
  for tries in $(seq 1 50); do
    if out="$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port$2")"; then
      rc=0
      break
    fi
    kill -0 "$pf" 2>/dev/null || break
    sleep 0.2
  done
  kill "$pf" 2>/dev/null
  wait "$pf" 2>/dev/null || true
  ((rc == 0)) && printf '%s\n' "$out"
  return "$rc"
}

# assert_no_secrets_in_operator_outputs NAME: the job's token (its `<job>-job-secret`) and the S3
# secret key (the `minio-credentials` Secret the jobs name) appear nowhere in the operator's log,
# the events of the namespace, or the StreamJobs and Savepoints it wrote (status included), as
# written, base64 or hex (e2e/lib/secret_grep.py). The checker must first find the token in the
# job Secret's own JSON, so a checker that can no longer see a value fails the scenario too.
# operator_log_into FILE: the operator's log into FILE; fails when it is empty.
operator_log_into() { kubectl -n "$OPERATOR_NS" logs deployment/"$RELEASE" >"$1" && [[ -s "$1" ]]; }

assert_no_secrets_in_operator_outputs() {
  local dir token s3_key
  dir="$(mktemp -d)"
  token="$(kubectl -n "$NS" get secret "$1-job-secret" -o jsonpath='{.data.job\.secret}' | base64 -d)"
  s3_key="$(kubectl -n "$NS" get secret minio-credentials -o jsonpath='{.data.secretAccessKey}' | base64 -d)"
  [[ -n "$token" && -n "$s3_key" ]] || fail "could not read the job token or the S3 secret key to look for"
  kubectl -n "$NS" get secret "$1-job-secret" -o json >"$dir/job-secret.json"
  if WEIR_GREP_SECRETS="$token" python3 "$E2E_DIR/lib/secret_grep.py" "$dir/job-secret.json" >/dev/null; then
    fail "secret_grep.py does not find the token in the job Secret itself: the check below would prove nothing"
  fi
  # A restarted operator (scenario 7 kills it, in parallel with this one) starts with an empty
  # log: wait for its first lines rather than check nothing.
  WAIT_POLL=1 wait_until "the operator's log to hold lines" 60 operator_log_into "$dir/operator.log"
  kubectl -n "$NS" get events -o json >"$dir/events.json"
  kubectl -n "$NS" get events.v1.events.k8s.io -o json >"$dir/events-v1.json"
  kubectl -n "$NS" get streamjobs,savepoints -o json >"$dir/custom-resources.json"
  [[ -s "$dir/operator.log" ]] || fail "the operator's log is empty: nothing to check"
  WEIR_GREP_SECRETS="$token"$'\n'"$s3_key" python3 "$E2E_DIR/lib/secret_grep.py" \
    "$dir/operator.log" "$dir/events.json" "$dir/events-v1.json" "$dir/custom-resources.json" >&2 ||
    fail "a secret value is in the operator's outputs (files kept in $dir)"
  rm -rf "$dir"
}

# events NAME [TYPE]: the StreamJob's events (core/v1 view, which includes events.k8s.io ones)
# as "TYPE REASON MESSAGE" lines, oldest first.
events() {
  local sel="involvedObject.kind=StreamJob,involvedObject.name=$1"
  [[ -n "${2:-}" ]] && sel="$sel,type=$2"
  kubectl -n "$NS" get events --field-selector "$sel" -o json |
    jsonq "'\n'.join(f\"{e['type']} {e['reason']} {e.get('message', '')}\" for e in sorted(d['items'], key=lambda e: e.get('lastTimestamp') or e.get('eventTime') or ''))"
}
event_count() { events "$@" | grep -c . || true; }

# --- waiting -------------------------------------------------------------------------------------

# wait_until DESCRIPTION TIMEOUT COMMAND...: polls COMMAND every 2 s until it succeeds. If
# WAIT_HOOK is set, it is run every poll too and must succeed (invariants checked during waits).
wait_until() {
  local desc="$1" timeout="$2" deadline
  shift 2
  deadline=$((SECONDS + timeout))
  log "waiting for $desc (up to ${timeout}s)"
  until "$@" >/dev/null 2>&1; do
    if [[ -n "${WAIT_HOOK:-}" ]]; then
      $WAIT_HOOK || fail "invariant '$WAIT_HOOK' broken while waiting for $desc"
    fi
    ((SECONDS < deadline)) || fail "timed out after ${timeout}s waiting for $desc"
    sleep "${WAIT_POLL:-2}"
  done
}

is_lifecycle() { [[ "$(lifecycle "$1")" == "$2" ]]; }
is_job_state() { [[ "$(job_state "$1")" == "$2" ]]; }
is_running() { is_lifecycle "$1" Running && is_job_state "$1" RUNNING; }
is_running_at() { is_running "$1" && [[ "$(sj_get "$1" 'd["status"]["parallelism"]')" == "$2" ]]; }
has_checkpoint() { [[ "$(last_checkpoint_id "$1")" =~ ^[0-9]+$ ]]; }
has_checkpoint_after() { [[ "$(last_checkpoint_id "$1")" =~ ^[0-9]+$ ]] && (($(last_checkpoint_id "$1") > $2)); }
not_lifecycle() { [[ "$(lifecycle "$1")" != "$2" ]]; }
no_job_pods() { [[ "$(job_pod_count "$1")" == 0 ]]; }
sj_absent() { ! kubectl -n "$NS" get streamjob "$1" >/dev/null 2>&1; }

wait_running() { wait_until "StreamJob $1 Running (job RUNNING)" "$TIMEOUT" is_running "$1"; }
# wait_first_checkpoint NAME: waits for a checkpoint completed after this call. Called once the
# job runs, that is a checkpoint of the run deployed now: after a rescale or upgrade,
# status.jobStatus.lastCheckpoint still names the previous run's checkpoint (or the savepoint
# the new run restored from) until the new run completes one, so "any checkpoint" would return
# at once. Checkpoint ids of a restored run continue above the restored one.
wait_first_checkpoint() {
  local before
  before="$(last_checkpoint_id "$1")"
  if [[ "$before" =~ ^[0-9]+$ ]]; then
    wait_until "a checkpoint of $1 completed after checkpoint $before" "$TIMEOUT" has_checkpoint_after "$1" "$before"
  else
    wait_until "a completed checkpoint of $1" "$TIMEOUT" has_checkpoint "$1"
  fi
}
wait_finished() { wait_until "StreamJob $1 to consume all input (job FINISHED)" "$FINISH_TIMEOUT" is_job_state "$1" FINISHED; }

# --- assertions ----------------------------------------------------------------------------------

assert_eq() { [[ "$1" == "$2" ]] || fail "${3:-assertion}: expected '$2', got '$1'"; }
assert_ne() { [[ "$1" != "$2" ]] || fail "${3:-assertion}: did not expect '$2'"; }

assert_condition() { # NAME TYPE STATUS
  local got
  got="$(sj_get "$1" "next((c['status'] for c in d['status'].get('conditions', []) if c['type'] == '$2'), '')")"
  assert_eq "$got" "$3" "StreamJob $1 condition $2"
}

assert_observed_current() {
  assert_eq "$(sj_get "$1" 'd["status"]["observedGeneration"]')" "$(sj_get "$1" 'd["metadata"]["generation"]')" \
    "StreamJob $1 status.observedGeneration"
}

# A healthy running job: lifecycle and job state, Ready condition, status current, no error.
assert_healthy() {
  is_running "$1" || fail "StreamJob $1 is not running: lifecycle=$(lifecycle "$1") job=$(job_state "$1")"
  assert_condition "$1" Ready True
  assert_observed_current "$1"
  assert_eq "$(sj_get "$1" 'd["status"].get("error") or ""')" "" "StreamJob $1 status.error"
}

assert_no_warning_events() {
  local w
  w="$(events "$1" Warning)"
  [[ -z "$w" ]] || fail "StreamJob $1 has Warning events:"$'\n'"$w"
}

assert_has_events() { # NAME MIN_NORMAL
  local n
  n="$(event_count "$1" Normal)"
  ((n >= $2)) || fail "StreamJob $1 has $n Normal events, expected at least $2:"$'\n'"$(events "$1")"
  log "StreamJob $1 events:"$'\n'"$(events "$1" | tail -n 8)"
}

# --- S3 (MinIO, through the mc pod) --------------------------------------------------------------

mc() { kubectl -n minio exec -i "$MC_POD" -- mc "$@"; }
# s3://bucket/key -> local/bucket/key (the mc alias of the in-cluster MinIO)
mc_path() { printf 'local/%s' "${1#s3://}"; }
s3_exists() { mc stat "$(mc_path "$1")" >/dev/null 2>&1; }
s3_put_text() { printf '%s' "$2" | mc pipe "$(mc_path "$1")" >/dev/null; } # URL TEXT
s3_remove() { mc rm "$(mc_path "$1")" >/dev/null; }                       # URL
s3_copy() { mc cp "$(mc_path "$1")" "$(mc_path "$2")" >/dev/null; }         # URL URL
# assert_deployed_from_upgrade_savepoint NAME: the running deployment started from the newest
# upgrade savepoint (status.deployedFrom is it, and it is in S3); sets DEPLOYED_FROM to its path.
# status.restorePoint is not read: it moves on to the new run's first checkpoint as soon as that
# completes, which may already have happened. One read of the status gives both values.
assert_deployed_from_upgrade_savepoint() {
  local both
  both="$(sj_get "$1" '" ".join([d["status"].get("deployedFrom") or "-", ([s["path"] for s in d["status"].get("savepointHistory", []) if s["origin"] == "Upgrade"] or ["-"])[-1]])')"
  assert_eq "${both% *}" "${both#* }" "status.deployedFrom of $1 (the newest upgrade savepoint in savepointHistory)"
  DEPLOYED_FROM="${both% *}"
  assert_snapshot_exists "$DEPLOYED_FROM"
}

# checkpoints_in_s3 DIR: the ids N of DIR/chk-N/_metadata in S3, ascending, one per line (DIR an
# s3:// URL of a job's checkpoints); nothing when there is none. `mc ls --recursive` ends each
# line with the key.
checkpoints_in_s3() {
  mc ls --recursive "$(mc_path "${1%/}")/" 2>/dev/null | awk '{print $NF}' |
    sed -n 's|.*chk-\([0-9][0-9]*\)/_metadata$|\1|p' | sort -n
}

# assert_checkpoint_exists_or_retired URL WHAT: the checkpoint at URL (s3://.../chk-N) has its
# `_metadata` in S3, or retention removed it because newer checkpoints of the same job completed.
# The operator refreshes the status on its reconcile interval (up to a minute) while a job
# checkpoints every 2 s and retains 3, and a run that restored a checkpoint continues its lineage
# and retires it (docs/operations/retention.md): a checkpoint the status names may be gone by the
# time S3 is read (the stand-in on a loaded machine saw both). Then a newer checkpoint of the same
# job must have its `_metadata` in S3, so the path was a real one. WHAT names the path in errors.
assert_checkpoint_exists_or_retired() {
  local path="${1%/}" what="$2" id newest
  [[ "$path" == s3://*/chk-* ]] || fail "$what '$1' is not an s3:// URL of a chk-N directory"
  if s3_exists "$path/_metadata"; then
    log "snapshot $path exists in S3"
    return 0
  fi
  id="${path##*/chk-}"
  newest="$(checkpoints_in_s3 "${path%/chk-*}" | tail -n 1)"
  if ! [[ "$id" =~ ^[0-9]+$ && "$newest" =~ ^[0-9]+$ ]] || ((newest <= id)); then
    fail "$what ($path) has no _metadata in S3, and no newer checkpoint of the job has one (newest: '${newest}')"
  fi
  log "snapshot $path was removed by retention; the newer checkpoint $newest is in S3"
}

# assert_last_checkpoint_exists NAME: status.jobStatus.lastCheckpoint names a checkpoint in S3,
# or one retention removed for newer ones.
assert_last_checkpoint_exists() {
  assert_checkpoint_exists_or_retired "$(sj_get "$1" 'd["status"]["jobStatus"]["lastCheckpoint"]["path"]')" \
    "status.jobStatus.lastCheckpoint.path"
}
assert_snapshot_exists() { # URL of a checkpoint or savepoint directory
  [[ "$1" == s3://* ]] || fail "snapshot path '$1' is not an s3:// URL"
  s3_exists "${1%/}/_metadata" || fail "snapshot $1 has no _metadata in S3"
  log "snapshot $1 exists in S3"
}

# Committed output of a job: every part-*.jsonl under s3://weir/output/NAME/.
job_output() {
  kubectl -n minio exec "$MC_POD" -- sh -c \
    "mc find local/weir/output/$1 --name 'part-*.jsonl' | while read -r f; do mc cat \"\$f\"; done"
}

# has_committed_output NAME: some committed output of NAME is in S3.
has_committed_output() { [[ -n "$(job_output "$1" | head -c 1)" ]]; }

# assert_output NAME [exact|restarted]
assert_output() {
  local out rc=0
  out="$(mktemp)"
  job_output "$1" >"$out" || fail "cannot read the output of $1 from S3"
  python3 "$E2E_DIR/lib/wordcount_check.py" --input "$INPUT_DIR" --mode "${2:-exact}" <"$out" || rc=$?
  if ((rc != 0)); then
    mkdir -p "$ARTIFACTS" && cp "$out" "$ARTIFACTS/output-$1.jsonl"
    rm -f "$out"
    fail "output of $1 is not ${2:-exact} (saved in $ARTIFACTS/output-$1.jsonl)"
  fi
  rm -f "$out"
}

# --- cleanup -------------------------------------------------------------------------------------

delete_job() {
  kubectl -n "$NS" delete streamjob "$1" --ignore-not-found --wait=false >/dev/null
  wait_until "StreamJob $1 deleted" "$TIMEOUT" sj_absent "$1"
  wait_until "pods of $1 gone" "$TIMEOUT" no_job_pods "$1"
}
