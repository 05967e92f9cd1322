# shellcheck shell=bash
# Scenario 5: state: suspended -> every job pod gone, restore point recorded (a savepoint in S3);
# state: running -> the job resumes from exactly that restore point; counts exact.
J=wc-suspend

apply_wordcount "$J" 2 savepoint
wait_running "$J"
wait_first_checkpoint "$J"

log "suspend $J"
kubectl -n "$NS" patch streamjob "$J" --type merge -p '{"spec":{"state":"suspended"}}' >/dev/null
wait_until "$J Suspended" "$TIMEOUT" is_lifecycle "$J" Suspended
wait_until "all pods of $J gone" "$TIMEOUT" no_job_pods "$J"
assert_eq "$(owned deployments "$J")$(owned statefulsets "$J")" "" "workloads of the suspended job"
restore="$(sj_get "$J" 'd["status"]["restorePoint"]["path"]')"
[[ -n "$restore" ]] || fail "no status.restorePoint after suspend"
assert_eq "$(sj_get "$J" 'd["status"]["restorePoint"]["origin"]')" UpgradeSavepoint "restorePoint.origin after suspend"
assert_snapshot_exists "$restore"
assert_observed_current "$J"
sleep 10
assert_eq "$(job_pod_count "$J")" 0 "pods of the suspended job 10 s later"

log "resume $J"
kubectl -n "$NS" patch streamjob "$J" --type merge -p '{"spec":{"state":"running"}}' >/dev/null
wait_running "$J"
assert_healthy "$J"
restored_from="$(coordinator_api "$J" /v1/job | jsonq 'd["restoredFrom"]')" ||
  fail "cannot read /v1/job from the coordinator of $J"
assert_eq "${restored_from%/}" "${restore%/}" "the resumed run's restoredFrom (control API)"
assert_no_warning_events "$J"
wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
