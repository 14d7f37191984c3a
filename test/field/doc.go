// Package field runs scr-transferd as sites deploy it: the project's own
// Slurm job scripts (deploy/slurm) submitted to a real Slurm cluster
// (munge, slurmctld and two slurmd on one host, started by slurm-up.sh),
// and the systemd units (deploy/systemd) in a Debian system booted with
// systemd-nspawn (nspawn-up.sh). The tests skip when the cluster or the
// container is absent, and fail under CI=true, whose .ci/run starts both.
package field
