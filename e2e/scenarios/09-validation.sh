# shellcheck shell=bash
# Scenario 9: invalid StreamJobs are rejected at admission by the CRD's CEL rules with a message
# naming the field: parallelism 0, parallelism above maxParallelism, a changed maxParallelism.
# A StreamJob whose checkpoint directory another StreamJob of its name owns (another namespace
# with the same storage: `<storage>/<name>/_owner`) fails before it deploys, naming the owner;
# the way out its message gives (delete `_owner`, change spec.restartNonce) deploys it.
# A last-state job whose newest checkpoint was deleted by hand while it was suspended is not
# resumed from an older one (which would write again the output committed after it): it fails
# with RestoreRequired naming the checkpoint; the files put back and a new spec.restartNonce
# resume it from that checkpoint, and its output is exact.
J=wc-invalid

expect_rejected() { # DESCRIPTION EXPECTED_MESSAGE (manifest on stdin)
  local out
  if out="$(kubectl apply -f - 2>&1)"; then
    fail "$1 was accepted"
  fi
  grep -qF -- "$2" <<<"$out" || fail "$1 rejected without the expected message '$2':"$'\n'"$out"
  log "$1 rejected: $(grep -F -- "$2" <<<"$out" | head -n 1)"
}

wordcount_manifest "$J" 0 savepoint |
  expect_rejected "parallelism 0" "spec.parallelism must be at least 1"
sj_absent "$J" || fail "$J exists after a rejected create"

wordcount_manifest "$J" 129 savepoint |
  expect_rejected "parallelism 129 > maxParallelism 128" "spec.parallelism must not exceed spec.maxParallelism"

apply_wordcount "$J" 1 savepoint
wordcount_manifest "$J" 1 savepoint | sed 's/maxParallelism: 128/maxParallelism: 256/' |
  expect_rejected "a maxParallelism change" "spec.maxParallelism is immutable"
assert_eq "$(sj_get "$J" 'd["spec"]["maxParallelism"]')" 128 "maxParallelism after the rejected change"
kubectl -n "$NS" patch streamjob "$J" --type merge -p '{"spec":{"parallelism":0}}' >/dev/null 2>&1 &&
  fail "patching parallelism to 0 was accepted"
delete_job "$J"

O=wc-owned
s3_put_text "s3://weir/checkpoints/$O/_owner" '{"streamJob":"other-team/wc-owned"}'
apply_wordcount "$O" 1 savepoint
wait_until "StreamJob $O Failed (another StreamJob owns its checkpoint directory)" "$TIMEOUT" is_lifecycle "$O" Failed
owned_error="$(sj_get "$O" 'd["status"]["error"]')"
grep -qF "holds the checkpoints of StreamJob other-team/wc-owned" <<<"$owned_error" ||
  fail "status.error of $O does not name the owner: $owned_error"
log "refused: $owned_error"
assert_eq "$(job_pod_count "$O")" 0 "pods of $O, refused its checkpoint directory"
s3_remove "s3://weir/checkpoints/$O/_owner"
kubectl -n "$NS" patch streamjob "$O" --type merge -p '{"spec":{"restartNonce":1}}' >/dev/null
wait_running "$O"
s3_exists "s3://weir/checkpoints/$O/_owner" || fail "$O runs without claiming its checkpoint directory"
delete_job "$O"

R=wc-refused
apply_wordcount "$R" 2 last-state
wait_running "$R"
wait_first_checkpoint "$R"
kubectl -n "$NS" patch streamjob "$R" --type merge -p '{"spec":{"state":"suspended"}}' >/dev/null
wait_until "StreamJob $R Suspended" "$TIMEOUT" is_lifecycle "$R" Suspended
wait_until "pods of $R gone" "$TIMEOUT" no_job_pods "$R"
newest="$(checkpoints_in_s3 "s3://weir/checkpoints/$R" | tail -n 1)"
[[ "$newest" =~ ^[0-9]+$ ]] || fail "no checkpoint of $R in S3 after its suspend"
chk="s3://weir/checkpoints/$R/chk-$newest"
s3_copy "$chk/_metadata" "s3://weir/e2e-kept/$R-metadata"
s3_remove "$chk/_metadata"
log "deleted $chk/_metadata by hand; resuming $R"
kubectl -n "$NS" patch streamjob "$R" --type merge -p '{"spec":{"state":"running"}}' >/dev/null
wait_until "StreamJob $R Failed (its newest checkpoint is gone)" "$TIMEOUT" is_lifecycle "$R" Failed
refused_error="$(sj_get "$R" 'd["status"]["error"]')"
if ! grep -qF "manual restore required" <<<"$refused_error" || ! grep -qE "$chk([^0-9]|\$)" <<<"$refused_error"; then
  fail "status.error of $R does not name its deleted checkpoint $chk as a manual restore: $refused_error"
fi
log "refused: $refused_error"
assert_eq "$(job_pod_count "$R")" 0 "pods of $R, refused its restore"
s3_copy "s3://weir/e2e-kept/$R-metadata" "$chk/_metadata"
s3_remove "s3://weir/e2e-kept/$R-metadata"
kubectl -n "$NS" patch streamjob "$R" --type merge -p '{"spec":{"restartNonce":1}}' >/dev/null
wait_running "$R"
assert_eq "$(sj_get "$R" 'd["status"].get("deployedFrom")')" "$chk" "status.deployedFrom of $R after the files were put back"
wait_finished "$R"
assert_output "$R" exact
delete_job "$R"
