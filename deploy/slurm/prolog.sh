#!/bin/bash
# Slurm prolog (runs as root on each node before the job): start the system
# unit scr-transferd@.service for the job's transfer file, as the job's user.
# Pair it with epilog.sh. slurm.conf: Prolog=/etc/slurm/prolog.d/*  (or
# the path of this script), PrologFlags=Alloc so that it runs at allocation.
#
# A failure here never fails the prolog: Slurm would drain the node and
# requeue the job held ("launch failed requeued held"). It logs one line
# (syslog tag scr-transferd-prolog, and stderr) and exits 0; the job then
# runs without a daemon, and its SCR_Init waits for one (flush-job.sbatch
# checks with scr-ctl stop --wait before starting the application).
#
# Site settings, optional, in /etc/scr-transferd/slurm.env (sourced):
#   SCR_TRANSFERD_UNIT_DIR=/run/systemd/system   where the per-job drop-in goes
#   SCR_CNTL_BASE=/dev/shm            SCR's control base, as SCR was built
#   SCR_TRANSFERD_RW_PATHS="/p/lustre/%u"   paths the daemon may write
#                                     (space-separated, %u: the job's user)
#   SCR_TRANSFERD_START_TIMEOUT=60    seconds to wait for the daemon's READY
set -uo pipefail

log() {
    logger -t scr-transferd-prolog -- "$*" 2>/dev/null || true
    echo "scr-transferd-prolog: $*" >&2
}

fail() {
    log "job ${SLURM_JOB_ID:-?}: scr-transferd not started: $*"
    exit 0
}

if [ -r /etc/scr-transferd/slurm.env ]; then
    # shellcheck source=/dev/null
    . /etc/scr-transferd/slurm.env || fail "cannot read /etc/scr-transferd/slurm.env"
fi

user=${SLURM_JOB_USER:-}
job=${SLURM_JOB_ID:-}
if [ -z "$user" ] || [ -z "$job" ]; then
    fail "SLURM_JOB_USER or SLURM_JOB_ID is not set"
fi
group=$(id -gn "$user") || fail "no such user $user"
cntl=${SCR_CNTL_BASE:-/dev/shm}/$user/scr.$job
transfer=$cntl/transfer.scrinfo
instance=$(systemd-escape --path "$transfer") || fail "systemd-escape failed for $transfer"
unit=scr-transferd@$instance.service
dropin=${SCR_TRANSFERD_UNIT_DIR:-/run/systemd/system}/$unit.d

# The control directory belongs to the user, as SCR would create it; made
# as the user, so that a symbolic link planted in the base leads nowhere
# the user could not write anyway.
runuser -u "$user" -- mkdir -p -m 0700 "$(dirname "$cntl")" "$cntl" ||
    fail "cannot create the control directory $cntl as $user"

# The job's user and the destinations it may write.
rw=""
for p in ${SCR_TRANSFERD_RW_PATHS:-/p/lustre/%u}; do
    rw="$rw -${p//%u/$user}"
done
mkdir -p "$dropin" || fail "cannot create $dropin"
{
    printf '[Service]\nUser=%s\nGroup=%s\n' "$user" "$group"
    # An empty ReadWritePaths= would reset the unit's own list (/dev/shm).
    if [ -n "$rw" ]; then
        printf 'ReadWritePaths=%s\n' "${rw# }"
    fi
} > "$dropin/job.conf" || fail "cannot write $dropin/job.conf"
systemctl daemon-reload || fail "systemctl daemon-reload failed"
# Type=notify: this returns once the daemon has recorded its first STATE.
if ! timeout "${SCR_TRANSFERD_START_TIMEOUT:-60}" systemctl start "$unit"; then
    fail "systemctl start $unit failed (journalctl -u '$unit')"
fi
log "job $job: started $unit for $user"
exit 0
