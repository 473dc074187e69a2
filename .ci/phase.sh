# shellcheck shell=bash
# One line per phase of CI, so a log shows where the time went without a re-run:
#   phase NAME: start HH:MM:SS end HH:MM:SS NNN s[, cpu B of C] [FAILED exit N]
# `cpu B of C`: how many of the machine's C cores were busy on average meanwhile (whatever ran
# beside the phase included); near C, the phase waited on CPU. tools/ci/e2e.py prints the same form.
# `phase NAME CMD...` runs CMD in the foreground; a failure prints its line with FAILED and exits
# with CMD's status (set -e would end the script before the line is printed).
phase() {
  local name=$1 t0 start cpu0 rc=0
  shift
  t0=$(date +%s); start=$(date -u +%T); cpu0=$(cpu_jiffies)
  echo "phase $name: start $start" >&2
  "$@" || rc=$?
  phase_line "$name" "$t0" "$start" "$rc" "$cpu0"
  [ "$rc" -eq 0 ] || exit "$rc"
}

cpu_jiffies() {  # "BUSY TOTAL": clock ticks of all CPUs since boot; idle and iowait are the idle part
  local _cpu user nice system idle iowait irq softirq steal _rest
  read -r _cpu user nice system idle iowait irq softirq steal _rest < /proc/stat
  echo "$((user + nice + system + irq + softirq + steal)) $((user + nice + system + idle + iowait + irq + softirq + steal))"
}

phase_line() {  # phase_line NAME T0 START RC [CPU0, cpu_jiffies at the start]
  local status="" busy=""
  [ "$4" -eq 0 ] || status=" FAILED exit $4"
  if [ -n "${5:-}" ]; then
    # /proc/stat's first line counts every core: `nproc --all`, since plain nproc follows
    # OMP_NUM_THREADS (which `kubetrain run` sets for its steps) and this process's CPU affinity.
    # shellcheck disable=SC2046  # two numbers each
    busy=$(awk -v cores="$(nproc --all)" 'BEGIN { b = ARGV[3] - ARGV[1]; t = ARGV[4] - ARGV[2]
      printf ", cpu %.2f of %d", (t > 0 ? b / t * cores : 0), cores }' $5 $(cpu_jiffies))
  fi
  echo "phase $1: start $3 end $(date -u +%T) $(( $(date +%s) - $2 )) s$busy$status"
}
