# shellcheck shell=bash
# One line per phase of CI, so a log shows where the time went without a re-run:
#   phase NAME: start HH:MM:SS end HH:MM:SS NNN s [FAILED exit N]
# `phase NAME CMD...` runs CMD in the foreground; a failure prints its line with FAILED and exits
# with CMD's status (set -e would end the script before the line is printed).
phase() {
  local name=$1 t0 start rc=0
  shift
  t0=$(date +%s); start=$(date -u +%T)
  echo "phase $name: start $start" >&2
  "$@" || rc=$?
  phase_line "$name" "$t0" "$start" "$rc"
  [ "$rc" -eq 0 ] || exit "$rc"
}

phase_line() {  # phase_line NAME T0 START RC
  local status=""
  [ "$4" -eq 0 ] || status=" FAILED exit $4"
  echo "phase $1: start $3 end $(date -u +%T) $(( $(date +%s) - $2 )) s$status"
}
