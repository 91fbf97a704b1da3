# shellcheck shell=bash
# Sourced by the set-up scripts (`make demo`, `make test` and the targets
# that share their steps): a command that fails names the step, where it
# stopped and why, so a failure never ends in make's bare "Error 2".
#
#   . scripts/step.sh; step_trap target-cache
#
# prints, on the failing command, one line such as
#   target-cache: failed (exit 2) at target-cache.sh:71: ls -1dt /x/*/
# and the shell then stops as `set -e` has it.
step_trap() {
  STEP_NAME=$1
  set -E
  trap 'step_failed $? $LINENO "$BASH_COMMAND"' ERR
}
step_failed() {
  echo "${STEP_NAME}: failed (exit $1) at ${BASH_SOURCE[1]##*/}:$2: $3" >&2
}
