#!/usr/bin/env bash
# Stop the container nspawn-up.sh booted in DIR (default
# /var/tmp/scr-field/nspawn) and remove its root file system (only apt's
# cache keeps the packages). SIGTERM to systemd-nspawn shuts the container's
# systemd down in order; SIGKILL after 60 s. Safe to run when nothing runs.
#   nspawn-down.sh [--keep-rootfs] [DIR]
set -uo pipefail

keep=
if [ "${1:-}" = --keep-rootfs ]; then keep=1; shift; fi
dir=${1:-/var/tmp/scr-field/nspawn}

alive() { local s; s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }

pid=$(cat "$dir/nspawn.pid" 2>/dev/null)
if [ -n "$pid" ] && alive "$pid" && grep -qx systemd-nspawn "/proc/$pid/comm" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 600); do alive "$pid" || break; sleep 0.1; done
  alive "$pid" && kill -KILL "$pid"
  for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
fi
rm -f "$dir/nspawn.pid" "$dir/leader.pid"
[ -n "$keep" ] || rm -rf --one-file-system "$dir/rootfs"
exit 0
