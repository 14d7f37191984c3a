// Package deploy holds scr-transferd's deployment files, which are not Go:
// systemd units (systemd/) and Slurm job scripts, prolog and epilog
// (slurm/). Its tests check them with the tools that will read them:
// systemd-analyze verify and security for the units, bash -n for the
// scripts, and the daemon's own flag parser for the command lines.
package deploy
