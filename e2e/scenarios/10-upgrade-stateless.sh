# shellcheck shell=bash
# Scenario 10: upgradeMode stateless behaves as documented (docs/operations/upgrades.md): a spec
# change redeploys without state: the new run starts from the beginning of the input with empty
# counts (no restorePoint), so the output is one complete run plus the committed prefix of the
# replaced run. (Split from scenario 8, last-state, so that the two run in parallel.)
B=wc-stateless

step "10 stateless"
apply_wordcount "$B" 2 stateless
wait_running "$B"
wait_first_checkpoint "$B"
# The first run must have committed output, so the redeploy visibly starts over (the output
# check below then finds that run's prefix next to the complete new run). Checked directly
# rather than by waiting for a second checkpoint: the sink commits on the first one.
wait_until "committed output of the first run of $B" "$TIMEOUT" has_committed_output "$B"
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
