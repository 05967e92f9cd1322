# shellcheck shell=bash
# Scenario 8: the two other upgrade modes behave as documented (docs/operations/upgrades.md).
#  a) last-state: a spec change stops the job without a savepoint and restores from the newest
#     completed checkpoint (restorePoint.origin Checkpoint, no Upgrade savepoint taken); exact.
#  b) stateless: a spec change redeploys without state: the new run starts from the beginning of
#     the input with empty counts (no restorePoint), so the output is one complete run plus the
#     committed prefix of the replaced run.
A=wc-last-state
B=wc-stateless

upgrade_savepoints() {
  kubectl -n "$NS" get savepoints -o json |
    jsonq "len([s for s in d['items'] if s['spec']['jobRef']['name'] == '$1' and s['spec'].get('origin') == 'Upgrade'])"
}

step "8a last-state"
apply_wordcount "$A" 2 last-state
wait_running "$A"
wait_first_checkpoint "$A"
before_id="$(job_id "$A")"
kubectl -n "$NS" patch streamjob "$A" --type merge -p '{"spec":{"parallelism":3}}' >/dev/null
wait_until "$A running at parallelism 3" "$TIMEOUT" is_running_at "$A" 3
assert_healthy "$A"
assert_ne "$(job_id "$A")" "$before_id" "job id after the last-state upgrade"
assert_eq "$(sj_get "$A" 'd["status"]["restorePoint"]["origin"]')" Checkpoint "restorePoint.origin (last-state)"
cp_path="$(sj_get "$A" 'd["status"]["restorePoint"]["path"]')"
case "$cp_path" in
  s3://weir/checkpoints/"$A"/chk-*) ;;
  *) fail "last-state restore point '$cp_path' is not a checkpoint of $A" ;;
esac
assert_snapshot_exists "$cp_path"
assert_eq "$(upgrade_savepoints "$A")" 0 "Upgrade savepoints taken in last-state mode"
assert_no_warning_events "$A"
wait_finished "$A"
assert_output "$A" exact
delete_job "$A"

step "8b stateless"
apply_wordcount "$B" 2 stateless
wait_running "$B"
wait_first_checkpoint "$B"
# Let the first run commit some output, so the redeploy visibly starts over.
wait_until "a second checkpoint of $B" "$TIMEOUT" has_checkpoint_after "$B" "$(last_checkpoint_id "$B")"
before_id="$(job_id "$B")"
kubectl -n "$NS" patch streamjob "$B" --type merge -p '{"spec":{"parallelism":3}}' >/dev/null
wait_until "$B running at parallelism 3" "$TIMEOUT" is_running_at "$B" 3
assert_healthy "$B"
assert_ne "$(job_id "$B")" "$before_id" "job id after the stateless redeploy"
assert_eq "$(sj_get "$B" 'd["status"].get("restorePoint") or ""')" "" "status.restorePoint (stateless)"
assert_eq "$(coordinator_api "$B" /v1/job | jsonq 'd.get("restoredFrom") or ""')" "" "restoredFrom of the stateless run"
assert_eq "$(upgrade_savepoints "$B")" 0 "Upgrade savepoints taken in stateless mode"
wait_finished "$B"
assert_output "$B" restarted
delete_job "$B"
