# shellcheck shell=bash
# Scenario 9: invalid StreamJobs are rejected at admission by the CRD's CEL rules with a message
# naming the field: parallelism 0, parallelism above maxParallelism, a changed maxParallelism.
# A StreamJob whose checkpoint directory another StreamJob of its name owns (another namespace
# with the same storage: `<storage>/<name>/_owner`) fails before it deploys, naming the owner;
# the way out its message gives (delete `_owner`, change spec.restartNonce) deploys it.
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
