# shellcheck shell=bash
# Scenario 3: change parallelism 2 -> 4 -> 1 with upgradeMode savepoint. Each change is a
# stop-with-savepoint and a restore at the new parallelism (keyed state redistributed by key
# group); the counts stay exact. 4 is set through the scale subresource (kubectl scale), 1 by
# patching spec.parallelism.
J=wc-rescale

rescale_cycle() { # TARGET_PARALLELISM HOW
  local before_id before_gen events_before
  before_id="$(job_id "$J")"
  before_gen="$(deploy_generation "$J")"
  events_before="$(event_count "$J" Normal)"
  if [[ "$2" == scale ]]; then
    log "kubectl scale streamjob $J --replicas $1"
    kubectl -n "$NS" scale streamjob "$J" --replicas "$1" >/dev/null
  else
    log "patch spec.parallelism=$1"
    kubectl -n "$NS" patch streamjob "$J" --type merge -p "{\"spec\":{\"parallelism\":$1}}" >/dev/null
  fi
  WAIT_HOOK="at_most_one_generation" wait_until "$J running at parallelism $1" "$TIMEOUT" is_running_at "$J" "$1"
  assert_healthy "$J"
  assert_ne "$(job_id "$J")" "$before_id" "job id after rescale (a new run)"
  (($(deploy_generation "$J") > before_gen)) || fail "status.deployGeneration did not increase"
  assert_deployed_from_upgrade_savepoint "$J"
  # ceil(parallelism / slotsPerWorker) worker replicas, slotsPerWorker = 1
  local sts
  sts="$(owned statefulsets "$J")"
  assert_eq "$(kubectl -n "$NS" get statefulset "$sts" -o jsonpath='{.spec.replicas}')" "$1" "worker replicas"
  (($(event_count "$J" Normal) > events_before)) || fail "no Normal event recorded for the rescale of $J"
  assert_no_warning_events "$J"
}
at_most_one_generation() { (($(job_pod_generations "$J") <= 1)); }

apply_wordcount "$J" 2 savepoint
wait_running "$J"
wait_first_checkpoint "$J"
rescale_cycle 4 scale
wait_first_checkpoint "$J"
rescale_cycle 1 patch
wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
