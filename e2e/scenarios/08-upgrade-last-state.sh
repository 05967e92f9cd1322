# shellcheck shell=bash
# Scenario 8: upgradeMode last-state behaves as documented (docs/operations/upgrades.md): a spec
# change stops the job without a savepoint and restores from the newest completed checkpoint
# (restorePoint.origin Checkpoint, no Upgrade savepoint taken); output exact. The change moves the
# job from the heap backend to `stateBackend: disk` with incremental checkpoints at a new
# parallelism: the heap's checkpoint restores into RocksDB stores in the new worker pods' state
# volumes. The new deployment continues the checkpoints' lineage: retention keeps 3 in all.
# (Scenario 10 checks the stateless mode; they were one scenario run one after the other, the
# longest of the suite, and share nothing but the StreamJob template.)
A=wc-last-state

step "8 last-state"
apply_wordcount "$A" 2 last-state
wait_running "$A"
wait_first_checkpoint "$A"
before_id="$(job_id "$A")"
kubectl -n "$NS" patch streamjob "$A" --type merge \
  -p '{"spec":{"parallelism":3,"stateBackend":"disk","checkpointing":{"incremental":true}}}' >/dev/null
wait_until "$A running at parallelism 3" "$TIMEOUT" is_running_at "$A" 3
assert_healthy "$A"
sts_volumes="$(kubectl -n "$NS" get statefulset "$A-worker" -o json |
  jsonq "' '.join(v['name'] for v in d['spec']['template']['spec'].get('volumes', []))")"
[[ " $sts_volumes " == *" weir-state "* ]] || fail "the worker StatefulSet of $A on disk has no weir-state volume: $sts_volumes"
assert_ne "$(job_id "$A")" "$before_id" "job id after the last-state upgrade"
assert_eq "$(sj_get "$A" 'd["status"]["restorePoint"]["origin"]')" Checkpoint "restorePoint.origin (last-state)"
cp_path="$(sj_get "$A" 'd["status"]["restorePoint"]["path"]')"
case "$cp_path" in
  s3://weir/checkpoints/"$A"/chk-*) ;;
  *) fail "last-state restore point '$cp_path' is not a checkpoint of $A" ;;
esac
# The new deployment continues the restored checkpoint's lineage, so retention may already have
# retired it for newer checkpoints (the status names it until the operator's next refresh).
assert_checkpoint_exists_or_retired "$cp_path" "last-state restore point"
assert_eq "$(upgrade_savepoints "$A")" 0 "Upgrade savepoints taken in last-state mode"
assert_no_warning_events "$A"
wait_finished "$A"
assert_output "$A" exact
# One lineage across both deployments (docs/operations/retention.md): the finished job keeps
# `retained` (3) checkpoints in all, not 3 per deployment, and none of the first deployment's
# (ids up to the restore point's). The coordinator reports FINISHED after its last retention
# pass, for which a finished job waits up to 60 s (`retention_grace_at_exit`; with 10 s, a
# loaded CI machine left 7).
kept_ids="$(checkpoints_in_s3 "s3://weir/checkpoints/$A" | tr '\n' ' ')"
read -r -a kept <<<"$kept_ids"
((${#kept[@]} <= 3)) || fail "${#kept[@]} checkpoints of $A are in S3 after it finished; retained is 3 across its deployments: $kept_ids(restore point ${cp_path##*/})"
((${#kept[@]} == 0 || kept[0] > ${cp_path##*/chk-})) ||
  fail "checkpoint ${kept[0]} of the first deployment of $A is in S3 after it finished (restore point ${cp_path##*/}): the new deployment did not continue its lineage"
delete_job "$A"
