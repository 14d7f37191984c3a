#!/bin/bash
# Slurm prolog (runs as root on each node before the job): start the system
# unit scr-transferd@.service for the job's transfer file, as the job's user,
# for the jobs that ask for one. Pair it with epilog.sh. slurm.conf:
#   Prolog=/etc/slurm/scr-transferd-prolog.sh
#   Epilog=/etc/slurm/scr-transferd-epilog.sh
#   PrologFlags=Alloc          (the prolog runs at allocation, on every node)
# The jobs of such a site run flush-job-prolog.sbatch (or their own script
# that starts no daemon): this is the "prolog" deployment model, which
# excludes the other two (deploy/systemd/README.md).
#
# Opt-in: a job gets a daemon only if it asks, as SCR_TRANSFERD_WHEN says:
#   comment           (default) the job's --comment has the word scr-transferd
#                     (sbatch --comment=scr-transferd)
#   feature:NAME      the job's --constraint names NAME (a node feature the
#                     site defines, e.g. Feature=scrflush on the nodes)
#   partition:P1,P2   the job runs in one of these partitions
#   always            every job
# Jobs of root never get one unless SCR_TRANSFERD_ALLOW_ROOT=1.
#
# No systemctl daemon-reload per job: the job's drop-in is written for an
# instance that was never loaded, and systemd reads it when it loads it.
#
# A failure here never fails the prolog: Slurm would drain the node and
# requeue the job held ("launch failed requeued held"). It logs one line
# (syslog tag scr-transferd-prolog, and stderr) and exits 0; the job then
# runs without a daemon, and flush-job-prolog.sbatch stops before the
# application with "no scr-transferd serves ..." (SCR_Init would wait for
# it until the time limit).
#
# Site settings, optional, in /etc/scr-transferd/slurm.env (sourced):
#   SCR_TRANSFERD_WHEN=comment        which jobs get a daemon (above)
#   SCR_TRANSFERD_ALLOW_ROOT=0        1: root's jobs too
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

# wanted WHEN: whether the job asks for a daemon under the site's rule WHEN,
# from what Slurm tells a prolog about the job.
wanted() {
    local rule=$1 w
    case $rule in
    always) return 0 ;;
    comment)
        for w in $(tr -c '[:alnum:]_-' ' ' <<<"${SLURM_JOB_COMMENT:-}"); do
            [ "$w" = scr-transferd ] && return 0
        done ;;
    feature:?*)
        for w in $(tr '&|,[]*:()' ' ' <<<"${SLURM_JOB_CONSTRAINTS:-}"); do
            [ "$w" = "${rule#feature:}" ] && return 0
        done ;;
    partition:?*)
        rule=${rule#partition:}
        for w in ${rule//,/ }; do
            [ "$w" = "${SLURM_JOB_PARTITION:-}" ] && return 0
        done ;;
    *)
        fail "SCR_TRANSFERD_WHEN=$rule: want comment, feature:NAME, partition:P1,P2 or always" ;;
    esac
    return 1
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
when=${SCR_TRANSFERD_WHEN:-comment}
if ! wanted "$when"; then
    exit 0 # the job did not ask: nothing to say
fi
uid=$(id -u "$user") || fail "no such user $user"
if [ "$uid" = 0 ] && [ "${SCR_TRANSFERD_ALLOW_ROOT:-0}" != 1 ]; then
    fail "a job of root (set SCR_TRANSFERD_ALLOW_ROOT=1 in /etc/scr-transferd/slurm.env to allow it)"
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

# The job's user and the destinations it may write, in 90-job.conf: after
# the site's 10-site.conf in systemd's order of drop-ins, so it wins.
rw=""
for p in ${SCR_TRANSFERD_RW_PATHS:-/p/lustre/%u}; do
    rw="$rw -${p//%u/$user}"
    # The site default (/p/lustre/%u) would otherwise show up only as
    # failing flushes. As the user: root may be squashed on the PFS.
    runuser -u "$user" -- test -e "${p//%u/$user}" ||
        log "job $job: ${p//%u/$user} (SCR_TRANSFERD_RW_PATHS) does not exist on this node: the daemon cannot write there"
done
mkdir -p "$dropin" || fail "cannot create $dropin"
{
    printf '[Service]\nUser=%s\nGroup=%s\n' "$user" "$group"
    # An empty ReadWritePaths= would reset the unit's own list (/dev/shm).
    if [ -n "$rw" ]; then
        printf 'ReadWritePaths=%s\n' "${rw# }"
    fi
} > "$dropin/90-job.conf" || fail "cannot write $dropin/90-job.conf"
# systemd reads the drop-in when it loads the instance, which no job has
# named before; should it not have seen the new directory yet, one reload
# makes it (logged: it should be rare). A User= that still differs comes
# from a drop-in that sorts after 90-job.conf: refuse to start a daemon as
# the wrong user.
runs_as=$(systemctl show --property=User --value "$unit")
if [ "$runs_as" != "$user" ]; then
    log "job $job: $unit would run as '$runs_as', not $user: reloading systemd to read $dropin/90-job.conf"
    systemctl daemon-reload || fail "systemctl daemon-reload failed"
    runs_as=$(systemctl show --property=User --value "$unit")
    if [ "$runs_as" != "$user" ]; then
        rm -rf "$dropin"
        fail "$unit would run as '$runs_as', not as the job's user $user: a drop-in named after 90-job.conf sets User= (systemctl cat $unit; name site drop-ins 10-site.conf)"
    fi
fi
# Type=notify: this returns once the daemon has recorded its first STATE.
if ! timeout "${SCR_TRANSFERD_START_TIMEOUT:-60}" systemctl start "$unit"; then
    fail "systemctl start $unit failed (journalctl -u '$unit')"
fi
log "job $job: started $unit for $user"
exit 0
