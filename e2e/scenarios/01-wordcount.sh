# shellcheck shell=bash
# Scenario 1: apply the word-count StreamJob on the real text -> Running -> output complete and
# exact. Sourced by e2e/run.sh (lib/common.sh loaded, errexit on).
J=wc-basic

apply_wordcount "$J" 2 savepoint
wait_running "$J"
assert_healthy "$J"
assert_eq "$(sj_get "$J" 'd["status"]["parallelism"]')" 2 "status.parallelism"
[[ -n "$(sj_get "$J" 'd["status"]["selector"]')" ]] || fail "status.selector (scale subresource) is empty"
[[ -n "$(owned deployments "$J")" ]] || fail "no coordinator Deployment owned by $J"
[[ -n "$(owned statefulsets "$J")" ]] || fail "no worker StatefulSet owned by $J"
assert_eq "$(job_pod_generations "$J")" 1 "deploy generations among pods"
coordinator_api "$J" /v1/job | jsonq 'd["state"]' | grep -qx RUNNING ||
  fail "coordinator control API (/v1/job through the Service) does not report RUNNING"
assert_has_events "$J" 1

wait_first_checkpoint "$J"
assert_last_checkpoint_exists "$J"

wait_finished "$J"
assert_no_warning_events "$J"
assert_output "$J" exact
delete_job "$J"
