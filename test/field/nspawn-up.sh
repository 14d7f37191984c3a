#!/usr/bin/env bash
# Boot a minimal Debian 12 system in a container for the systemd tests of
# package test/field: debootstrap (from the Debian mirror apt uses, packages
# cached in apt's own cache, /var/cache/apt/archives) and systemd-nspawn -b.
# Needs root, debootstrap and systemd-container (installed here when
# missing). Stop it, and remove the root file system, with nspawn-down.sh.
#
# The host need not run systemd: the container is started with
# --register=no --keep-unit (no machined, no scope unit from the host's
# service manager), so machinectl cannot reach it; commands run in it with
#   nsenter -t "$(cat DIR/leader.pid)" -a COMMAND...
#
# Usage: nspawn-up.sh [DIR]   (default /var/tmp/scr-field/nspawn)
# The tests find the container through SCR_FIELD_NSPAWN=DIR.
set -euo pipefail

dir=${1:-/var/tmp/scr-field/nspawn}
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "nspawn-up.sh: needs root" >&2; exit 1; }

if ! command -v debootstrap >/dev/null || ! command -v systemd-nspawn >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends debootstrap systemd-container >/dev/null
fi

# The mirror apt uses for Debian itself (deb822 or one-line sources).
mirror=$(
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
  } | grep -v -e security -e '^$' | grep -i debian | head -n1 || true
)
mirror=${mirror:-http://deb.debian.org/debian}

"$here/nspawn-down.sh" --keep-rootfs "$dir" >/dev/null 2>&1 || true
mkdir -p "$dir"
rootfs=$dir/rootfs
if [ ! -x "$rootfs/lib/systemd/systemd" ] || [ ! -f "$rootfs/.complete" ]; then
  rm -rf "$rootfs"
  mkdir -p /var/cache/apt/archives
  t0=$SECONDS
  ok=
  for attempt in 1 2; do
    # systemd and D-Bus for the units and the user manager (logind);
    # Slurm and munge for the systemd job script under a real slurmd.
    if debootstrap --variant=minbase \
         --include=systemd,systemd-sysv,dbus,libpam-systemd,slurm-wlm,munge \
         --cache-dir=/var/cache/apt/archives bookworm "$rootfs" "$mirror" \
         > "$dir/debootstrap.log" 2>&1; then
      ok=1
      break
    fi
    echo "nspawn-up.sh: debootstrap attempt $attempt failed:" >&2
    tail -n 20 "$dir/debootstrap.log" >&2
    rm -rf "$rootfs"
  done
  [ -n "$ok" ] || exit 1
  echo scrfield > "$rootfs/etc/hostname"
  touch "$rootfs/.complete"
  echo "nspawn-up.sh: debootstrap took $((SECONDS - t0)) s"
fi
t0=$SECONDS

# Boot it. --console=passive: no getty on our terminal.
setsid systemd-nspawn --quiet -D "$rootfs" --boot --machine=scrfield \
  --register=no --keep-unit --console=passive \
  > "$dir/console.log" 2>&1 < /dev/null &
echo $! > "$dir/nspawn.pid"

alive() { local s; s=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$s" != Z ]; }

# The container's PID 1 is nspawn's child running systemd.
leader=
for _ in $(seq 1 600); do
  leader=$(pgrep -P "$(cat "$dir/nspawn.pid")" -x systemd || true)
  [ -n "$leader" ] && break
  kill -0 "$(cat "$dir/nspawn.pid")" 2>/dev/null || break
  sleep 0.2
done
if [ -z "$leader" ]; then
  echo "nspawn-up.sh: the container did not start:" >&2
  cat "$dir/console.log" >&2
  exit 1
fi
echo "$leader" > "$dir/leader.pid"

# Until its systemd has finished booting (its bus socket comes up first).
state=
for _ in $(seq 1 600); do
  state=$(nsenter -t "$leader" -a -- systemctl is-system-running 2>/dev/null || true)
  case $state in
  running|degraded|maintenance|stopping) break ;;
  esac
  alive "$leader" || break
  sleep 0.5
done
case $state in
running) ;;
degraded)
  echo "nspawn-up.sh: the container's systemd is degraded:"
  nsenter -t "$leader" -a -- systemctl --failed --no-pager || true ;;
*)
  echo "nspawn-up.sh: the container's systemd is not running (state: ${state:-none}):" >&2
  nsenter -t "$leader" -a -- journalctl -b --no-pager 2>&1 | tail -n 30 >&2 || true
  cat "$dir/console.log" >&2
  exit 1 ;;
esac
echo "nspawn-up.sh: container up ($state) in $((SECONDS - t0)) s, PID 1 is $leader on the host (SCR_FIELD_NSPAWN=$dir)"
