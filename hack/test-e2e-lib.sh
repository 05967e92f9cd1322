#!/usr/bin/env bash
# Self-test of the e2e suite's own machinery, without a cluster (run by hack/static-checks.sh):
#   - e2e/lib/run-scenario.sh, called as the condition of an `if` the way e2e/run.sh calls it,
#     fails a scenario at its first failing command (bash ignores `set -e` there otherwise);
#   - e2e/run.sh runs scenarios through it;
#   - wait_first_checkpoint does not return on the checkpoint id the status already shows (the
#     previous run's, after a rescale), and returns once a newer one appears.
# Prints "test-e2e-lib: N passed, M failed"; exit status 1 if any failed.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
expect() { # NAME WANT GOT
  if [[ "$2" == "$3" ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    printf 'FAIL %s: expected %s, got %s\n' "$1" "$2" "$3"
  fi
}

# --- run-scenario.sh: a failing command fails the scenario ---------------------------------------
cat >"$TMP/fails-midway.sh" <<SCENARIO
false
touch "$TMP/reached-after-failure"
SCENARIO
cat >"$TMP/passes.sh" <<SCENARIO
log "a passing scenario sees the helpers of common.sh (NS=\$NS)"
true
SCENARIO
cat >"$TMP/unset-variable.sh" <<'SCENARIO'
echo "$NO_SUCH_VARIABLE"
SCENARIO
outcome() { # SCRIPT: how e2e/run.sh would judge it
  if bash "$ROOT/e2e/lib/run-scenario.sh" "$1" 2>/dev/null; then echo pass; else echo fail; fi
}
expect "a scenario with a failing command fails" fail "$(outcome "$TMP/fails-midway.sh")"
expect "nothing runs after the failing command" absent "$([[ -e "$TMP/reached-after-failure" ]] && echo present || echo absent)"
expect "a passing scenario passes" pass "$(outcome "$TMP/passes.sh")"
expect "an unset variable fails the scenario" fail "$(outcome "$TMP/unset-variable.sh")"
# shellcheck disable=SC2016 # the literal line of e2e/run.sh
expect "e2e/run.sh runs scenarios through lib/run-scenario.sh" 1 \
  "$(grep -c 'if bash "$E2E_DIR/lib/run-scenario.sh" "$script"; then' "$ROOT/e2e/run.sh")"

# --- wait_first_checkpoint waits for a checkpoint of the run deployed now ------------------------
# The status is faked: last_checkpoint_id reads the id from a file the test rewrites.
wait_checkpoint_outcome() { # IDS...: the successive ids the status reports, one per poll
  printf '%s\n' "$@" >"$TMP/ids"
  echo 0 >"$TMP/poll"
  if bash -c '
    set -euo pipefail
    source "$1/e2e/lib/common.sh"
    FAKE="$2"
    last_checkpoint_id() {
      local n; n="$(cat "$FAKE/poll")"; echo $((n + 1)) >"$FAKE/poll"
      if ((n < $(wc -l <"$FAKE/ids"))); then sed -n "$((n + 1))p" "$FAKE/ids"; else tail -n 1 "$FAKE/ids"; fi
    }
    TIMEOUT=2 WAIT_POLL=0.2 wait_first_checkpoint wc
  ' _ "$ROOT" "$TMP" 2>/dev/null; then echo returned; else echo timed-out; fi
}
expect "the previous run's checkpoint 7 alone is not a checkpoint of the new run" timed-out "$(wait_checkpoint_outcome 7)"
expect "a checkpoint after 7 is" returned "$(wait_checkpoint_outcome 7 7 7 8)"
expect "no checkpoint at all: waits" timed-out "$(wait_checkpoint_outcome "")"
expect "the first checkpoint of a fresh job" returned "$(wait_checkpoint_outcome "" "" 1)"

echo "test-e2e-lib: $passed passed, $failed failed"
((failed == 0))
