#!/usr/bin/env bash
# Start a two-node Slurm cluster on this host, on loopback, for the tests of
# package test/field: munged, slurmctld and two slurmd ("n1", "n2"), each
# slurmd in a mount namespace of its own with a private /dev/shm, so that
# each "node" has its own node-local storage (SCR's control directory and
# cache) while the rest of the file system (the "parallel file system")
# is shared. Needs root and Debian's slurm-wlm and munge (installed here
# when missing, through apt). Stop it with slurm-down.sh.
#
# Usage: slurm-up.sh [DIR]   (default /run/scr-field/slurm)
# The tests find the cluster through SCR_FIELD_SLURM=DIR.
set -euo pipefail

dir=${1:-/run/scr-field/slurm}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "slurm-up.sh: needs root" >&2; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

"$here/slurm-down.sh" "$dir" >/dev/null 2>&1 || true
mkdir -p "$dir/state" "$dir/spool/n1" "$dir/spool/n2" "$dir/log"
host=$(hostname)
cat > "$dir/slurm.conf" <<CONF
# Written by test/field/slurm-up.sh: two nodes on one host, on loopback.
ClusterName=scrfield
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# No cgroups: linuxproc tracks the processes of each step.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Finished jobs stay visible to scontrol show job for an hour.
MinJobAge=3600
KillWait=30
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=$(nproc) RealMemory=500 State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=17002 CPUs=$(nproc) RealMemory=500 State=UNKNOWN
PartitionName=field Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$dir/slurm.conf

install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
fi
munge -n | unmunge >/dev/null

slurmctld -i
for n in n1 n2; do
  # Each node's slurmd (and so every job step on it) sees its own /dev/shm.
  unshare --mount --propagation private -- \
    sh -c "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec slurmd -N $n"
done

# Wait (bounded) until both nodes are idle.
for _ in $(seq 1 240); do
  if [ "$(sinfo -h -N -t idle -o %N | sort -u | wc -l)" = 2 ]; then
    sinfo -N
    echo "slurm-up.sh: cluster up in $dir (SCR_FIELD_SLURM=$dir)"
    exit 0
  fi
  sleep 0.5
done
echo "slurm-up.sh: nodes not idle after 120 s:" >&2
sinfo -N >&2 || true
tail -n 20 "$dir"/log/*.log >&2 || true
exit 1
