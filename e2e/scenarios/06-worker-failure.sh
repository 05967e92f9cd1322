# shellcheck shell=bash
# Scenario 6: delete a worker pod mid-run (no grace period, like a node loss) -> the job
# recovers from its latest completed checkpoint and the output stays exact. The count runs on
# the disk backend (RocksDB in the worker pods' state volume, an emptyDir) with incremental
# checkpoints: the replacement pod starts with an empty volume, so the restore must come from
# the checkpoint's files in S3, not from what the lost pod had on its disk.
J=wc-worker-loss

never_failed() { not_lifecycle "$J" Failed; }

STATE_BACKEND=disk INCREMENTAL=true apply_wordcount "$J" 2 last-state
wait_running "$J"
sts_volumes="$(kubectl -n "$NS" get statefulset "$J-worker" -o json |
  jsonq "' '.join(v['name'] for v in d['spec']['template']['spec'].get('volumes', []))")"
[[ " $sts_volumes " == *" weir-state "* ]] || fail "the worker StatefulSet of $J has no weir-state volume: $sts_volumes"
wait_first_checkpoint "$J"
wait_until "a second checkpoint of $J" "$TIMEOUT" has_checkpoint_after "$J" "$(last_checkpoint_id "$J")"
restarts_before="$(coordinator_api "$J" /v1/job | jsonq 'd.get("restarts", 0)')" ||
  fail "cannot read /v1/job from the coordinator of $J"

pod="$(worker_pods "$J" | head -n 1)"
[[ -n "$pod" ]] || fail "no worker pod of $J found"
log "delete worker pod $pod (grace period 0)"
kubectl -n "$NS" delete pod "$pod" --grace-period=0 --force --wait=false >/dev/null 2>&1

recovered() {
  local r
  r="$(coordinator_api "$J" /v1/job | jsonq 'd.get("restarts", 0)')" || return 1
  { ((r > restarts_before)) || [[ -n "$(sj_get "$J" 'd["status"].get("restarts") or ""')" ]]; } && is_running "$J"
}
WAIT_HOOK=never_failed wait_until "$J restarted from its latest checkpoint and RUNNING" "$TIMEOUT" recovered
log "$J recovered; events:"$'\n'"$(events "$J" | tail -n 5)"
WAIT_HOOK=never_failed wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
