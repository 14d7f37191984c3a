#!/usr/bin/env bash
# Undoes test/gluster/up.sh: unmounts the clients, stops and deletes the
# volume, stops glusterd if this script's volume was its only one, and
# unmounts and removes the brick's file system. Idempotent.
set -uo pipefail

root="${SCR_GLUSTER:-/run/scr-gluster}"
vol=scrtest
img="/var/tmp/scr-gluster-brick.img"

for n in node1 node2 field; do
  mountpoint -q "$root/$n" && umount -l "$root/$n"
done
if command -v gluster >/dev/null && pgrep -x glusterd >/dev/null; then
  gluster --mode=script volume stop "$vol" force >/dev/null 2>&1
  gluster --mode=script volume delete "$vol" >/dev/null 2>&1
  gluster --mode=script volume stop scrfield force >/dev/null 2>&1
  gluster --mode=script volume delete scrfield >/dev/null 2>&1
  # glusterd stops only if up.sh started it and no other volume is left.
  if [ -f "$root/glusterd.pid" ] && ! gluster --mode=script volume list 2>/dev/null | grep -qv '^No volumes'; then
    kill "$(cat "$root/glusterd.pid")" 2>/dev/null
  fi
fi
mountpoint -q "$root/brickfs" && umount -l "$root/brickfs"
rm -f "$img" "$root/volume" "$root/glusterd.pid"
rm -rf /var/tmp/scr-gluster-field-brick
rmdir "$root/node1" "$root/node2" "$root/field" "$root/brickfs" "$root" 2>/dev/null
exit 0
