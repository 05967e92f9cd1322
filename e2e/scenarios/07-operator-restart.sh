# shellcheck shell=bash
# Scenario 7: kill the operator pod in the middle of an upgrade -> the new operator resumes the
# upgrade from the write-ahead log in status; the upgrade completes, never two generations of
# the job run at once, and no state is lost (counts exact).
J=wc-operator-kill

at_most_one_generation() { (($(job_pod_generations "$J") <= 1)); }
upgrade_in_flight() { [[ -n "$(sj_get "$J" 'd["status"]["pending"]["phase"]')" ]]; }
OPERATOR_SEL="app.kubernetes.io/component=operator,app.kubernetes.io/instance=$RELEASE"
operator_pods_ready() { # names of Ready operator pods
  kubectl -n "$OPERATOR_NS" get pods -l "$OPERATOR_SEL" -o json |
    jsonq "' '.join(p['metadata']['name'] for p in d['items'] if not p['metadata'].get('deletionTimestamp') and any(c['type'] == 'Ready' and c['status'] == 'True' for c in p['status'].get('conditions', [])))"
}
new_operator_ready() { # a Ready operator pod other than the killed one
  local p
  for p in $(operator_pods_ready); do [[ "$p" != "$old_operator" ]] && return 0; done
  return 1
}

apply_wordcount "$J" 2 savepoint
wait_running "$J"
wait_first_checkpoint "$J"
before_id="$(job_id "$J")"

log "patch spec.parallelism=3 and kill the operator as soon as the upgrade is recorded"
kubectl -n "$NS" patch streamjob "$J" --type merge -p '{"spec":{"parallelism":3}}' >/dev/null
WAIT_POLL=0.5 wait_until "the upgrade recorded in status.pending" 60 upgrade_in_flight
log "pending operation: $(sj_get "$J" 'd["status"]["pending"]')"
old_operator="$(operator_pods_ready | awk '{print $1}')"
[[ -n "$old_operator" ]] || fail "no ready operator pod found"
log "force-delete operator pod $old_operator"
kubectl -n "$OPERATOR_NS" delete pod "$old_operator" --grace-period=0 --force --wait=false >/dev/null 2>&1
WAIT_HOOK=at_most_one_generation wait_until "a new operator pod ready" "$TIMEOUT" new_operator_ready
WAIT_HOOK=at_most_one_generation wait_until "$J running at parallelism 3" "$TIMEOUT" is_running_at "$J" 3
assert_healthy "$J"
assert_ne "$(job_id "$J")" "$before_id" "job id after the upgrade"
assert_eq "$(sj_get "$J" 'd["status"].get("pending") or ""')" "" "status.pending after the upgrade"
assert_deployed_from_upgrade_savepoint "$J"
WAIT_HOOK=at_most_one_generation wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
