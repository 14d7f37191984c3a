#!/usr/bin/env bash
# Builds LLNL SCR 1.2.2, the real checkpoint library and its own
# scr_transfer, from ../shared/third_party/scr-1.2.2.tar.gz beside the
# repository, in its FLOCK and FCNTL builds, for test/scrlib and test/bench.
#
#   test/scrlib/build.sh [DIR]     (DIR defaults to $SCR_BUILD_DIR, else /var/tmp/scr-build)
#
# Installs DIR/scr-flock and DIR/scr-fcntl (include/scr.h, lib/libscr.so,
# bin/scr_transfer), both compiled with the control base DIR/cntl (SCR 1.2
# takes its control base only from the build), then prints the lines to
# export:
#
#   SCR_LIB_FLOCK=DIR/scr-flock
#   SCR_LIB_FCNTL=DIR/scr-fcntl
#
# A build that is complete (its DIR/scr-L/.complete names the same source
# archive checksum) is reused; an incomplete one is built again. Two runs at
# once take turns (flock on DIR/.lock). The source never enters the
# repository: it is unpacked under DIR.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tarball="${SCR_TARBALL:-$here/../../../shared/third_party/scr-1.2.2.tar.gz}"
dir="${1:-${SCR_BUILD_DIR:-/var/tmp/scr-build}}"
jobs="${SCR_BUILD_JOBS:-2}"

die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }

[ -f "$tarball" ] || die "$tarball: no such file (the SCR 1.2.2 source archive, ../shared/third_party beside the repository)"
for tool in cmake mpicc make; do
  command -v "$tool" >/dev/null || die "$tool not found: install cmake build-essential openmpi-bin libopenmpi-dev zlib1g-dev"
done
mkdir -p "$dir" "$dir/cntl"
chmod 1777 "$dir/cntl" # every user's jobs keep their control directories here
sum="$(sha256sum "$tarball" | cut -d' ' -f1)"

exec 9>"$dir/.lock"
flock 9

for L in flock fcntl; do
  prefix="$dir/scr-$L"
  if [ -f "$prefix/.complete" ] && [ "$(cat "$prefix/.complete")" = "$sum" ] &&
     [ -x "$prefix/bin/scr_transfer" ] && [ -f "$prefix/lib/libscr.so" ]; then
    echo "build.sh: $prefix is complete, reused" >&2
    continue
  fi
  echo "build.sh: building SCR 1.2.2 ($L locking) into $prefix" >&2
  rm -rf "$prefix" "$dir/src-$L" "$dir/build-$L"
  mkdir -p "$dir/src-$L"
  tar -xzf "$tarball" -C "$dir/src-$L"
  U="$(printf '%s' "$L" | tr '[:lower:]' '[:upper:]')"
  cmake -S "$dir/src-$L/scr-1.2.2" -B "$dir/build-$L" -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DSCR_RESOURCE_MANAGER=NONE -DSCR_FILE_LOCK="$U" -DSCR_CNTL_BASE="$dir/cntl" \
    -DENABLE_FORTRAN=OFF -DPDSH_EXE=/bin/true -DDSHBAK_EXE=/bin/true \
    -DCMAKE_C_COMPILER=mpicc -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir/build-$L.log" 2>&1 ||
    die "cmake ($L) failed: see $dir/build-$L.log"
  { cmake --build "$dir/build-$L" -j"$jobs" && cmake --install "$dir/build-$L"; } >>"$dir/build-$L.log" 2>&1 ||
    die "build ($L) failed: see $dir/build-$L.log"
  printf '%s\n' "$dir/cntl" >"$prefix/CNTL_BASE"
  printf '%s\n' "$sum" >"$prefix/.complete"
  rm -rf "$dir/src-$L" "$dir/build-$L"
done

echo "SCR_LIB_FLOCK=$dir/scr-flock"
echo "SCR_LIB_FCNTL=$dir/scr-fcntl"
