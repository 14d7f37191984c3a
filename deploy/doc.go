// Package deploy holds scr-transferd's deployment files, which are not Go:
// systemd units (systemd/) and Slurm job scripts, prolog, epilog and the
// cache reaper (slurm/). Its tests check them with the tools that will read them:
// systemd-analyze verify and security for the units (with the drop-ins
// the README installs), shellcheck and bash for the scripts, and the
// daemon's own flag parser for the command lines. They also run the job
// scripts whole on one host, with the real daemon and scr-ctl and stand-ins
// for srun and systemctl (testdata/), the prolog and epilog as root, and
// the README's install line in a fresh clone. test/field runs the same
// files under a real Slurm and a booted systemd.
package deploy
