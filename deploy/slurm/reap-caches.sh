#!/bin/bash
# scr-transferd-reap: remove stale SCR job caches and control directories
# from node-local storage (RAM under /dev/shm), saying what it removed and
# why it kept the rest. Install it on every node as
# /usr/local/bin/scr-transferd-reap. Every deployment model calls it:
#   prolog sites   epilog.sh, for the job that ended (--ended JOB)
#   user units     ExecStopPost= of user/scr-transferd@.service
#   srun sites     the job script's last step, on every node; and, for jobs
#                  that never got there, root's cron or a timer (below)
#
#   scr-transferd-reap [--ended JOB] [--user USER]... [--dry-run]
#
# A job's directories are $SCR_CACHE_BASE/USER/scr.JOB and
# $SCR_CNTL_BASE/USER/scr.JOB (the transfer file). They are kept while a
# daemon serves the transfer file (holds its instance lock) or Slurm says
# the job has not ended; a flush that is not complete is kept after the job
# too, for SCR's scavenge or by hand, until SCR_REAP_UNFLUSHED_DAYS (7) days
# after the last change; when Slurm cannot be asked (no scontrol, no
# network in a unit's sandbox), only complete caches older than
# SCR_REAP_UNKNOWN_DAYS (7) days go. --ended JOB: that job has ended (the
# epilog's own job, which Slurm still shows COMPLETING).
#
# As root it looks at every user's directories and acts as their owner
# (runuser), so that no link planted in /dev/shm leads root elsewhere; as a
# user, at that user's own. Settings from the environment or
# /etc/scr-transferd/slurm.env: SCR_CNTL_BASE, SCR_CACHE_BASE (/dev/shm),
# SCR_KEEP_CACHE=1 (never remove anything), SCR_REAP_UNFLUSHED_DAYS,
# SCR_REAP_UNKNOWN_DAYS. It logs to syslog (tag scr-transferd-reap) and
# stderr, one line per job directory it removes or keeps, and exits 0 unless
# its command line is wrong (2). Root's crontab, hourly:
#   17 * * * * /usr/local/bin/scr-transferd-reap
set -uo pipefail

log() {
    logger -t scr-transferd-reap -- "$*" 2>/dev/null || true
    echo "scr-transferd-reap: $*" >&2
}

# verdict STATE SERVED FLUSH AGE: whether to remove a job's directories,
# and why, as "remove REASON" or "keep REASON". STATE: running, ended or
# unknown (what Slurm says of the job); SERVED: yes if a daemon holds the
# instance lock; FLUSH: complete, unfinished or none (no transfer file);
# AGE: minutes since the directories last changed. Limits in days from
# SCR_REAP_UNFLUSHED_DAYS and SCR_REAP_UNKNOWN_DAYS.
verdict() {
    local state=$1 served=$2 flush=$3 age=$4
    local unflushed=$((${SCR_REAP_UNFLUSHED_DAYS:-7} * 1440)) unknown=$((${SCR_REAP_UNKNOWN_DAYS:-7} * 1440))
    if [ "$served" = yes ]; then
        echo "keep a daemon serves its transfer file"
    elif [ "$state" = running ]; then
        echo "keep the job has not ended"
    elif [ "$flush" = unfinished ] && [ "$state" = ended ] && [ "$age" -ge "$unflushed" ]; then
        echo "remove the job ended and its flush was left unfinished ${age} minutes ago (over SCR_REAP_UNFLUSHED_DAYS)"
    elif [ "$flush" = unfinished ]; then
        echo "keep files not flushed (scr-ctl status shows them; SCR's scavenge can copy them)"
    elif [ "$state" = ended ]; then
        echo "remove the job ended and nothing is left to flush"
    elif [ "$age" -ge "$unknown" ]; then
        echo "remove nothing left to flush and unchanged for ${age} minutes (job state unknown)"
    else
        echo "keep the job's state is unknown (no answer from scontrol)"
    fi
}

# job_state JOB: running, ended or unknown, from scontrol.
job_state() {
    local out
    if [ "$1" = "$ended" ]; then
        echo ended
    elif out=$(scontrol -o show job "$1" 2>&1); then
        case $out in
        *JobState=PENDING* | *JobState=RUNNING* | *JobState=SUSPENDED* | *JobState=CONFIGURING* | \
            *JobState=COMPLETING* | *JobState=REQUEUE* | *JobState=RESIZING* | *JobState=SIGNALING* | \
            *JobState=STAGE_OUT*) echo running ;;
        *) echo ended ;;
        esac
    elif [[ $out == *"Invalid job id"* ]]; then
        echo ended # no longer known to Slurm: long over
    else
        echo unknown
    fi
}

# as_owner USER CMD...: run CMD as USER (as root), or as ourselves.
as_owner() {
    local u=$1
    shift
    if [ "$(id -u)" = 0 ] && [ "$u" != root ]; then
        runuser -u "$u" -- "$@"
    else
        "$@"
    fi
}

# reap_job USER JOB: decide on one job's directories and act.
reap_job() {
    local u=$1 job=$2 cntl=$cntl_base/$1/scr.$2 cache=$cache_base/$1/scr.$2
    local transfer=$cntl/transfer.scrinfo served=no flush=none newest=0 t d v what=$cache
    [ "$cntl" = "$cache" ] || what="$cache $cntl"
    for d in "$cntl" "$cache"; do
        if [ -L "$d" ] || { [ -e "$d" ] && [ "$(stat -c %U "$d")" != "$u" ]; }; then
            log "job $job: not touching $d: a symbolic link or not owned by $u"
            return
        fi
    done
    local lock=$cntl/.transfer.scrinfo.lock
    if [ -f "$lock" ] && ! as_owner "$u" flock -n -s "$lock" true 2>/dev/null; then
        served=yes
    fi
    if [ -f "$transfer" ]; then
        flush=complete
        as_owner "$u" "$scr_ctl" wait --quiet --timeout=1s "$transfer" >/dev/null 2>&1 || flush=unfinished
    fi
    for d in "$transfer" "$cntl" "$cache"; do
        t=$(stat -c %Y "$d" 2>/dev/null) && [ "$t" -gt "$newest" ] && newest=$t
    done
    if [ "$newest" = 0 ]; then
        log "job $job: keeping $what: cannot tell when it last changed (gone meanwhile?)"
        return
    fi
    v=$(verdict "$(job_state "$job")" "$served" "$flush" $((($(date +%s) - newest) / 60)))
    if [ "${v%% *}" = keep ]; then
        log "job $job: keeping $what: ${v#keep }"
    elif [ "$dry" = 1 ]; then
        log "job $job: would remove $what: ${v#remove }"
    elif as_owner "$u" rm -rf --one-file-system "$cache" "$cntl"; then
        log "job $job: removed $what: ${v#remove }"
    else
        log "job $job: cannot remove $what"
    fi
}

main() {
    local users=() u d job
    ended="" dry=0
    while [ $# -gt 0 ]; do
        case $1 in
        --ended) ended=${2:-}; shift 2 || { echo "usage: scr-transferd-reap [--ended JOB] [--user USER]... [--dry-run]" >&2; exit 2; } ;;
        --user) users+=("${2:-}"); shift 2 || exit 2 ;;
        --dry-run) dry=1; shift ;;
        *) echo "usage: scr-transferd-reap [--ended JOB] [--user USER]... [--dry-run]" >&2; exit 2 ;;
        esac
    done
    if [ -r /etc/scr-transferd/slurm.env ]; then
        # shellcheck source=/dev/null
        . /etc/scr-transferd/slurm.env || log "cannot read /etc/scr-transferd/slurm.env"
    fi
    [ "${SCR_KEEP_CACHE:-0}" = 1 ] && exit 0
    cntl_base=${SCR_CNTL_BASE:-/dev/shm} cache_base=${SCR_CACHE_BASE:-/dev/shm}
    scr_ctl=$(command -v scr-ctl || echo /usr/local/bin/scr-ctl)
    if [ ${#users[@]} -eq 0 ] && [ "$(id -u)" != 0 ]; then
        users=("$(id -un)")
    elif [ ${#users[@]} -eq 0 ]; then
        for d in "$cntl_base"/*/ "$cache_base"/*/; do
            [ -d "$d" ] && [ ! -L "${d%/}" ] && users+=("$(basename "$d")")
        done
    fi
    for u in $(printf '%s\n' "${users[@]}" | sort -u); do
        id -u "$u" >/dev/null 2>&1 || continue
        for job in $(for d in "$cntl_base/$u"/scr.* "$cache_base/$u"/scr.*; do
            [ -d "$d" ] && echo "${d##*/scr.}"
        done | sort -u); do
            [[ $job =~ ^[0-9]+(_[0-9]+)?$ ]] && reap_job "$u" "$job"
        done
    done
    exit 0
}

main "$@"
