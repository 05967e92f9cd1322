# shellcheck shell=bash
# Scenario 2: create a Savepoint of a running job -> Completed with a path that exists in S3;
# the job keeps running and its output stays exact. With disposeOnDelete, deleting the Savepoint
# after its job removes its data.
J=wc-savepoint
SP=wc-savepoint-manual

svp_state() { kubectl -n "$NS" get savepoint "$SP" -o json | jsonq 'd["status"]["state"]'; }
svp_done() { [[ "$(svp_state)" == Completed ]]; }

apply_wordcount "$J" 2 savepoint
wait_running "$J"
wait_first_checkpoint "$J"

log "create Savepoint $SP"
render "$E2E_DIR/manifests/savepoint.yaml" NAME="$SP" NAMESPACE="$NS" JOB="$J" | kubectl apply -f - >/dev/null
wait_until "Savepoint $SP Completed" "$TIMEOUT" svp_done
svp="$(kubectl -n "$NS" get savepoint "$SP" -o json)"
path="$(jsonq 'd["status"]["path"]' <<<"$svp")"
assert_snapshot_exists "$path"
[[ -n "$(jsonq 'd["status"]["completedAt"]' <<<"$svp")" ]] || fail "Savepoint $SP has no status.completedAt"
[[ -n "$(jsonq 'd["status"]["triggerId"]' <<<"$svp")" ]] || fail "Savepoint $SP has no status.triggerId"
assert_eq "$(jsonq 'd["spec"]["origin"]' <<<"$svp")" Manual "Savepoint spec.origin"
n="$(kubectl -n "$NS" get events --field-selector "involvedObject.kind=Savepoint,involvedObject.name=$SP,type=Normal" -o name | grep -c . || true)"
((n >= 1)) || fail "Savepoint $SP has no Normal events"

# No secret in what the operator wrote so far: it sent the token for every control API call
# (status, savepoint trigger and status) and read the S3 credentials; none may show in its log,
# events or status (issue 15).
assert_no_secrets_in_operator_outputs "$J"

# A savepoint does not stop the job.
assert_healthy "$J"
wait_finished "$J"
assert_no_warning_events "$J"
assert_output "$J" exact
# The manual savepoint outlives the job's checkpoints and is never removed by retention.
assert_snapshot_exists "$path"

# disposeOnDelete after the job is gone: the Savepoint recorded the storage settings it was
# written with (endpoint, path style, credentials Secret), so deleting it after its StreamJob
# removes its data from S3 and releases the finalizer.
assert_eq "$(jsonq 'd["status"]["s3"]["endpoint"]' <<<"$svp")" "$S3_ENDPOINT" "Savepoint status.s3.endpoint"
kubectl -n "$NS" patch savepoint "$SP" --type merge -p '{"spec":{"disposeOnDelete":true}}' >/dev/null
svp_has_finalizer() {
  kubectl -n "$NS" get savepoint "$SP" -o json | jsonq '",".join(d["metadata"].get("finalizers", []))' |
    grep -q weir.dev/finalizer
}
wait_until "Savepoint $SP has the operator's finalizer" "$TIMEOUT" svp_has_finalizer
delete_job "$J"
kubectl -n "$NS" delete savepoint "$SP" --wait=false >/dev/null
svp_absent() { ! kubectl -n "$NS" get savepoint "$SP" >/dev/null 2>&1; }
wait_until "Savepoint $SP deleted (finalizer released)" "$TIMEOUT" svp_absent
if s3_exists "${path%/}/_metadata" 2>/dev/null; then
  fail "savepoint $path is still in S3 after its disposeOnDelete Savepoint was deleted"
fi
log "savepoint $path disposed after its job was deleted"
