#!/usr/bin/env bash
# Brings up GlusterFS as the parallel file system of the end-to-end tests:
# glusterd, a one-brick volume whose brick lies on a small loop-mounted
# ext4 (so that a test can fill it), and two FUSE client mounts of it, each
# playing one compute node. Idempotent: what is already up is left as it
# is. Needs root. Prints the directory to export as SCR_GLUSTER:
#
#   $SCR_GLUSTER/node1, $SCR_GLUSTER/node2   the two client mounts
#   $SCR_GLUSTER/brickfs                     the loop-mounted ext4 holding the brick
#   $SCR_GLUSTER/brickfs/brick               the brick
#   $SCR_GLUSTER/volume                      the volume's name
#   $SCR_GLUSTER/field                       a client mount of a second volume, for test/field's Slurm jobs
#
# Environment: SCR_GLUSTER (default /run/scr-gluster), SCR_GLUSTER_SIZE
# (the brick file system, default 512M). test/gluster/down.sh undoes it.
set -euo pipefail

root="${SCR_GLUSTER:-/run/scr-gluster}"
size="${SCR_GLUSTER_SIZE:-512M}"
vol=scrtest
img="/var/tmp/scr-gluster-brick.img"
host="$(hostname)"

die() { echo "gluster up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root"
for c in glusterd gluster mount.glusterfs losetup mkfs.ext4 mountpoint; do
  command -v "$c" >/dev/null || die "$c is missing (apt-get install glusterfs-server glusterfs-client mount e2fsprogs)"
done
getent hosts "$host" >/dev/null || die "host name $host does not resolve (the brick is named by it)"

mkdir -p "$root/brickfs" "$root/node1" "$root/node2"

# The brick's file system: a loop-mounted ext4 of $size.
if ! mountpoint -q "$root/brickfs"; then
  [ -f "$img" ] || { truncate -s "$size" "$img"; mkfs.ext4 -q -F -m 0 "$img"; }
  mount -o loop "$img" "$root/brickfs" || die "cannot loop-mount $img on $root/brickfs"
fi
mkdir -p "$root/brickfs/brick"

if ! gluster --mode=script pool list >/dev/null 2>&1; then
  glusterd -p "$root/glusterd.pid" || die "glusterd did not start"
fi
for _ in $(seq 1 100); do
  gluster --mode=script pool list >/dev/null 2>&1 && break
  sleep 0.1
done
gluster --mode=script pool list >/dev/null || die "glusterd does not answer"

# volume NAME BRICK creates (once) and starts the volume NAME of one brick.
# Every node must see the others' writes at once, as on a PFS with
# coherent clients: no client-side caching of data or metadata.
volume() {
  local name=$1 brick=$2 opt
  if ! gluster --mode=script volume info "$name" >/dev/null 2>&1; then
    gluster --mode=script volume create "$name" "$host:$brick" force >/dev/null \
      || die "cannot create volume $name"
    for opt in performance.quick-read performance.io-cache performance.stat-prefetch \
               performance.read-ahead performance.readdir-ahead performance.open-behind; do
      gluster --mode=script volume set "$name" "$opt" off >/dev/null || die "cannot set $opt off on $name"
    done
  fi
  if ! gluster --mode=script volume info "$name" | grep -q '^Status: Started'; then
    gluster --mode=script volume start "$name" >/dev/null || die "cannot start volume $name"
  fi
}

volume "$vol" "$root/brickfs/brick"
# A brick killed by a test and not restarted comes back with force.
if gluster --mode=script volume status "$vol" 2>/dev/null | grep '^Brick ' | grep -q ' N '; then
  gluster --mode=script volume start "$vol" force >/dev/null || die "cannot restart the brick of $vol"
fi

# The kernel's and the client's caches of names and attributes off, and
# plain readdir: with them, a client was seen to leave a file it had just
# renamed into a directory out of that directory's listing for minutes.
mountopts=use-readdirp=no,attribute-timeout=0,entry-timeout=0,negative-timeout=0
# client VOLUME DIR mounts (once) a FUSE client of VOLUME at DIR.
client() {
  local name=$1 dir=$2 ok=0
  mountpoint -q "$dir" && return 0
  for _ in $(seq 1 50); do
    if mount -t glusterfs -o "$mountopts" "$host:/$name" "$dir" 2>/dev/null && mountpoint -q "$dir"; then ok=1; break; fi
    sleep 0.2
  done
  [ "$ok" -eq 1 ] || die "cannot mount $host:/$name on $dir"
}

for n in node1 node2; do
  client "$vol" "$root/$n"
done
echo "$vol" >"$root/volume"

# A second volume for test/field's Slurm jobs, apart from the one the
# end-to-end tests fill and whose brick they kill: its brick a plain
# directory, its one client mount $root/field.
fvol=scrfield
fbrick=/var/tmp/scr-gluster-field-brick
mkdir -p "$fbrick" "$root/field"
volume "$fvol" "$fbrick"
client "$fvol" "$root/field"
chmod 1777 "$root/field"
echo "$root"
