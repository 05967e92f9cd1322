# shellcheck shell=bash
# Scenario 2: create a Savepoint of a running job -> Completed with a path that exists in S3;
# the job keeps running and its output stays exact.
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

# A savepoint does not stop the job.
assert_healthy "$J"
wait_finished "$J"
assert_no_warning_events "$J"
assert_output "$J" exact
# The manual savepoint outlives the job's checkpoints and is never removed by retention.
assert_snapshot_exists "$path"
kubectl -n "$NS" delete savepoint "$SP" --wait=true >/dev/null
delete_job "$J"
