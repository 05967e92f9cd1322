# shellcheck shell=bash
# Scenario 4: change spec.image (upgrade to another tag) -> savepoint cycle -> the pods run the
# new image, the new run continues the same lineage (checkpoint ids go on from the savepoint,
# same checkpoint directory), counts exact.
J=wc-upgrade

apply_wordcount "$J" 2 savepoint "$IMAGE_TAG"
wait_running "$J"
wait_first_checkpoint "$J"
before_id="$(job_id "$J")"

log "upgrade $J to $IMAGE_REPO:$UPGRADE_TAG"
kubectl -n "$NS" patch streamjob "$J" --type merge -p "{\"spec\":{\"image\":\"$IMAGE_REPO:$UPGRADE_TAG\"}}" >/dev/null
upgraded() { is_running "$J" && [[ "$(job_id "$J")" != "$before_id" ]]; }
wait_until "$J running the upgraded image" "$TIMEOUT" upgraded
assert_healthy "$J"

images="$(job_pods "$J" | jsonq "' '.join(sorted({c['image'] for p in d['items'] for c in p['spec']['containers'] if c['name'] == 'weir'}))")"
assert_eq "$images" "$IMAGE_REPO:$UPGRADE_TAG" "images of the job's weir containers"
assert_deployed_from_upgrade_savepoint "$J"
# The savepoint's id, or (when the new run already completed a checkpoint) a later one: either
# way the wait below needs a checkpoint of the upgraded run after it.
sp_id="$(sj_get "$J" 'd["status"]["restorePoint"]["checkpointId"]')"
# Lineage: the new run checkpoints into the same job directory, with ids after the savepoint's.
wait_until "a checkpoint of the upgraded run after savepoint $sp_id" "$TIMEOUT" has_checkpoint_after "$J" "$sp_id"
case "$(sj_get "$J" 'd["status"]["jobStatus"]["lastCheckpoint"]["path"]')" in
  s3://weir/checkpoints/"$J"/*) ;;
  *) fail "the upgraded run does not checkpoint into s3://weir/checkpoints/$J/" ;;
esac
# The upgrade savepoint is recorded as a Savepoint object with origin Upgrade.
n="$(kubectl -n "$NS" get savepoints -o json | jsonq "len([s for s in d['items'] if s['spec']['jobRef']['name'] == '$J' and s['spec'].get('origin') == 'Upgrade'])")"
((n >= 1)) || fail "no Savepoint object with origin Upgrade recorded for $J"
assert_no_warning_events "$J"

wait_finished "$J"
assert_output "$J" exact
delete_job "$J"
