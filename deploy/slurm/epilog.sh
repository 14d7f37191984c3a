#!/bin/bash
# Slurm epilog (runs as root on each node after the job): stop the job's
# scr-transferd@.service instance started by prolog.sh, remove its drop-in
# and its metrics file, and reap the node-local caches of the job and of
# the user's earlier jobs (scr-transferd-reap, reap-caches.sh) once nothing
# in them is left to flush. SIGTERM makes the daemon stop its copy at a consistent
# point (WRITTEN covers only durable bytes) and record STATE EXITING.
#
# Like the prolog it never fails (Slurm would drain the node): problems are
# logged (syslog tag scr-transferd-epilog, and stderr).
#
# Site settings, optional, in /etc/scr-transferd/slurm.env (sourced):
#   SCR_TRANSFERD_UNIT_DIR=/run/systemd/system   where the per-job drop-in goes
#   SCR_CNTL_BASE=/dev/shm, SCR_CACHE_BASE=/dev/shm   as SCR was built
#   SCR_TRANSFERD_METRICS_DIR=/var/lib/prometheus/node-exporter
#   SCR_KEEP_CACHE=1          never remove caches
# scr-transferd-reap comes from PATH or /usr/local/bin.
set -uo pipefail

log() {
    logger -t scr-transferd-epilog -- "$*" 2>/dev/null || true
    echo "scr-transferd-epilog: $*" >&2
}

if [ -r /etc/scr-transferd/slurm.env ]; then
    # shellcheck source=/dev/null
    . /etc/scr-transferd/slurm.env || log "cannot read /etc/scr-transferd/slurm.env"
fi

user=${SLURM_JOB_USER:-}
job=${SLURM_JOB_ID:-}
if [ -z "$user" ] || [ -z "$job" ]; then
    log "SLURM_JOB_USER or SLURM_JOB_ID is not set"
    exit 0
fi
cntl=${SCR_CNTL_BASE:-/dev/shm}/$user/scr.$job
transfer=$cntl/transfer.scrinfo
instance=$(systemd-escape --path "$transfer")
unit=scr-transferd@$instance.service

# No daemon-reload before or after: the unit is stopped, and its drop-in
# goes with the instance, which the next job never names again.
if systemctl cat "$unit" >/dev/null 2>&1; then
    systemctl stop "$unit" || log "job $job: systemctl stop $unit failed"
    systemctl reset-failed "$unit" 2>/dev/null
fi
rm -rf "${SCR_TRANSFERD_UNIT_DIR:-/run/systemd/system}/$unit.d"
# The daemon removes its metrics file when it ends; this covers a daemon
# that was killed.
rm -f "${SCR_TRANSFERD_METRICS_DIR:-/var/lib/prometheus/node-exporter}/$unit.prom" \
    "${SCR_TRANSFERD_METRICS_DIR:-/var/lib/prometheus/node-exporter}/scr-transferd@$instance.prom"

# The node-local caches live in RAM under /dev/shm and outlive the job:
# scr-transferd-reap removes this job's (and the user's earlier jobs') once
# nothing in them is left to flush, keeps them otherwise, and logs either.
reap=$(command -v scr-transferd-reap || echo /usr/local/bin/scr-transferd-reap)
"$reap" --ended "$job" --user "$user" || log "job $job: $reap failed"
exit 0
