#!/usr/bin/env bash
# Runs one scenario of e2e/scenarios/ in its own bash process, with errexit, nounset and pipefail
# in force, and exits with its status:
#
#   if bash e2e/lib/run-scenario.sh e2e/scenarios/03-rescale.sh; then ...
#
# e2e/run.sh calls it this way because `if ( set -e; source SCRIPT ); then` does not work: bash
# ignores `set -e` in everything run as the condition of an `if` (or left of `||`/`&&`), even in
# a subshell that sets it again, so a failing command would not end the scenario. A new bash
# process starts with no such context.
set -euo pipefail
[[ $# == 1 && -f "$1" ]] || {
  echo "usage: run-scenario.sh SCENARIO_SCRIPT (got: $*)" >&2
  exit 2
}
E2E_DIR="${E2E_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
export E2E_DIR
# shellcheck source=common.sh
source "$E2E_DIR/lib/common.sh"
# On the stand-in, its overrides of the kind helpers (S3 through moto instead of MinIO's mc):
# without them every S3 check of a scenario failed when scenarios ran one after another.
if [[ "${E2E_CLUSTER_MODE:-kind}" == standin ]]; then
  # shellcheck source=standin.sh
  source "$E2E_DIR/lib/standin.sh"
fi
# shellcheck source=/dev/null
source "$1"
