#!/bin/bash
# Slurm prolog (runs as root on each node before the job): start the system
# unit scr-transferd@.service for the job's transfer file, as the job's user.
# Pair it with epilog.sh. slurm.conf: Prolog=/etc/slurm/prolog.d/*  (or
# the path of this script), PrologFlags=Alloc so that it runs at allocation.
set -euo pipefail

user=${SLURM_JOB_USER:?}
job=${SLURM_JOB_ID:?}
cntl=${SCR_CNTL_BASE:-/dev/shm}/$user/scr.$job
transfer=$cntl/transfer.scrinfo
instance=$(systemd-escape --path "$transfer")
dropin=/run/systemd/system/scr-transferd@$instance.service.d

# The control directory belongs to the user, as SCR would create it.
install -d -m 0700 -o "$user" -g "$(id -gn "$user")" "$(dirname "$cntl")" "$cntl"

# The job's user and the destinations it may write (adapt to the site).
mkdir -p "$dropin"
cat > "$dropin/job.conf" <<CONF
[Service]
User=$user
Group=$(id -gn "$user")
ReadWritePaths=-/p/lustre/$user
CONF
systemctl daemon-reload
systemctl start "scr-transferd@$instance.service"
