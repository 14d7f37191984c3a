#!/usr/bin/env bash
# Stop what slurm-up.sh started in DIR (default /run/scr-field/slurm):
# both slurmd, slurmctld, and munged, each by the PID it recorded, waiting
# (bounded) for each to end. Safe to run when nothing is running.
set -uo pipefail

dir=${1:-/run/scr-field/slurm}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() { local s; s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }

stop() { # PIDFILE NAME
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  [ -n "$pid" ] && alive "$pid" || return 0
  grep -qx "$2" "/proc/$pid/comm" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
}

# Jobs still running (a failed test's) end first, with their steps.
if [ -f "$dir/slurm.conf" ] && alive "$(cat "$dir/slurmctld.pid" 2>/dev/null)"; then
  export SLURM_CONF=$dir/slurm.conf
  scancel --full --signal=KILL --partition=field 2>/dev/null
  for _ in $(seq 1 100); do
    [ -z "$(squeue -h -p field 2>/dev/null)" ] && break
    sleep 0.2
  done
fi

for n in n1 n2; do stop "$dir/slurmd-$n.pid" slurmd; done
stop "$dir/slurmctld.pid" slurmctld
stop /run/munge/munged.pid munged
exit 0
