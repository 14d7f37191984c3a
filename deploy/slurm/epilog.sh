#!/bin/bash
# Slurm epilog (runs as root on each node after the job): stop the job's
# scr-transferd@.service instance started by prolog.sh and remove its
# drop-in. SIGTERM makes the daemon stop its copy at a consistent point
# (WRITTEN covers only durable bytes) and record STATE EXITING.
set -uo pipefail

user=${SLURM_JOB_USER:?}
job=${SLURM_JOB_ID:?}
transfer=${SCR_CNTL_BASE:-/dev/shm}/$user/scr.$job/transfer.scrinfo
instance=$(systemd-escape --path "$transfer")

systemctl stop "scr-transferd@$instance.service"
rm -rf "/run/systemd/system/scr-transferd@$instance.service.d"
systemctl daemon-reload
exit 0
