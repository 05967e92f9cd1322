# shellcheck shell=bash
# Scenario 7: kill the operator pod in the middle of an upgrade -> the new operator resumes the
# upgrade from the write-ahead log in status; the upgrade completes, never two generations of
# the job run at once, and no state is lost (counts exact).
J=wc-operator-kill

at_most_one_generation() { (($(job_pod_generations "$J") <= 1)); }
upgrade_in_flight() { [[ -n "$(sj_get "$J" 'd["status"]["pending"]["phase"]')" ]]; }
operator_ready() {
  kubectl -n "$OPERATOR_NS" rollout status deployment/"$RELEASE" --timeout=5s
}

apply_wordcount "$J" 2 savepoint
wait_running "$J"
wait_first_checkpoint "$J"
before_id="$(job_id "$J")"

log "patch spec.parallelism=3 and kill the operator as soon as the upgrade is recorded"
kubectl -n "$NS" patch streamjob "$J" --type merge -p '{"spec":{"parallelism":3}}' >/dev/null
wait_until "the upgrade recorded in status.pending" 60 upgrade_in_flight
log "pending operation: $(sj_get "$J" 'd["status"]["pending"]')"
kubectl -n "$OPERATOR_NS" delete pod -l app.kubernetes.io/component=operator,app.kubernetes.io/instance="$RELEASE" \
  --grace-period=0 --force --wait=false >/dev/null 2>&1
WAIT_HOOK=at_most_one_generation wait_until "a new operator pod ready" "$TIMEOUT" operator_ready
WAIT_HOOK=at_most_one_generation wait_until "$J running at parallelism 3" "$TIMEOUT" is_running_at "$J" 3
assert_healthy "$J"
assert_ne "$(job_id "$J")" "$before_id" "job id after the upgrade"
assert_eq "$(sj_get "$J" 'd["status"].get("pending") or ""')" "" "status.pending after the upgrade"
assert_eq "$(sj_get "$J" 'd["status"]["restorePoint"]["origin"]')" UpgradeSavepoint "restorePoint.origin"
assert_snapshot_exists "$(sj_get "$J" 'd["status"]["restorePoint"]["path"]')"
WAIT_HOOK=at_most_one_generation wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
