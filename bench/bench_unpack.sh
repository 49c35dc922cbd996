#!/bin/sh
# Unpacking and deleting a node_modules (9.4k small files in 940 packages) right after a
# checkpoint: native, kernel overlayfs over a plain copy (the workspace's overlay options), and a
# ckptfs workspace mounted with --fold-budget, alternating round by round, in one run
# (docs/benchmarks.md, "Unpack and `rm -rf`").
#
#   sh bench/bench_unpack.sh [ROUNDS]
#        (as root; default 9 rounds; uses target/release/ckptfs unless CKPTFS is set;
#        JOURNALED=1 runs all three places in a fresh ext4 image with a journal, on a loop
#        device, instead of in /var/tmp's filesystem; OVL_OPTS=... replaces the kernel overlay's
#        options after its layers, by default the workspace's)
#
# Each round, in each place (the order rotates every round, so no place always runs right
# after another's deletions): `rm -rf node_modules` (the last round's), then `tar -xf` a new
# one; in the workspace, then a checkpoint. Prints a Markdown table of medians and worst (ms)
# and the ratios to native; per-round lines go to stderr.
set -eu
ROUNDS=${1:-9}
B=${CKPTFS:-$(dirname "$0")/../target/release/ckptfs}
TOP=$(mktemp -d /var/tmp/bench-unpack.XXXXXX)
T=$TOP
cleanup() {
  umount "$T/ovl/room" 2>/dev/null || true
  "$B" umount "$T/ws/room" >/dev/null 2>&1 || true
  [ "$T" = "$TOP" ] || umount "$T" 2>/dev/null || true
  # Never remove through a mount left behind.
  if grep -q " $TOP[/ ]" /proc/mounts; then
    echo "left $TOP in place: something is still mounted below it" >&2
  else
    rm -rf "$TOP"
  fi
}
trap cleanup EXIT
if [ "${JOURNALED:-0}" = 1 ]; then
  # A journaled ext4, as most hosts have: without a journal ext4 skips recently deleted
  # inodes when it allocates one (the scan that dominates an unpack here after deletions).
  truncate -s 8G "$TOP/fs.img"
  mkfs.ext4 -q -F "$TOP/fs.img"
  T=$TOP/fs
  mkdir "$T"
  mount -o loop "$TOP/fs.img" "$T"
fi
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
worst() { tr ' ' '\n' | grep . | sort -n | tail -1; }

# node_modules as an agent unpacks it: 9.4k small files in 940 packages.
python3 "$(dirname "$0")/gen_node_modules.py" "$T/nm.tar"

mkdir -p "$T/native/room" "$T/ovl/lower" "$T/ovl/upper" "$T/ovl/work" "$T/ovl/room" "$T/ws/room"
for d in "$T/native/room" "$T/ovl/lower" "$T/ws/room"; do tar -xf "$T/nm.tar" -C "$d"; done
mount -t overlay ovl -o "lowerdir=$T/ovl/lower,upperdir=$T/ovl/upper,workdir=$T/ovl/work${OVL_OPTS-,redirect_dir=on,metacopy=on,index=on,xino=on}" "$T/ovl/room"
"$B" init "$T/ws/store" --root "room=$T/ws/room" >/dev/null
"$B" capture "$T/ws/store" -q -m initial >/dev/null
"$B" mount "$T/ws/store" --branch main --fold-budget 2G >/dev/null
"$B" checkpoint "$T/ws/room" --allow-empty -m warm >/dev/null

for p in n o w; do eval "L_${p}_r= L_${p}_u="; done
step() { # PLACE DIR
  sync
  t0=$(date +%s%N); rm -rf "$2/node_modules"; r=$(ms "$t0")
  t0=$(date +%s%N); tar -xf "$T/nm.tar" -C "$2"; u=$(ms "$t0")
  [ "$1" = w ] && "$B" checkpoint "$T/ws/room" -m "round $i" >/dev/null
  eval "L_$1_r=\"\$L_$1_r $r\"; L_$1_u=\"\$L_$1_u $u\""
  echo "round $i $1: rm -rf $r ms, unpack $u ms" >&2
}
i=0
while [ $i -lt "$ROUNDS" ]; do
  i=$((i + 1))
  case $((i % 3)) in
    1) order="n o w" ;;
    2) order="o w n" ;;
    *) order="w n o" ;;
  esac
  for p in $order; do
    case $p in
      n) step n "$T/native/room" ;;
      o) step o "$T/ovl/room" ;;
      w) step w "$T/ws/room" ;;
    esac
  done
done
cell() { eval "v=\$L_$1_$2"; echo "$(echo $v | median) ($(echo $v | worst))"; }
ratio() { # PLACE STEP
  eval "a=\$L_$1_$2; n=\$L_n_$2"
  python3 -c "import sys; print(f'{$(echo $a | median) / max($(echo $n | median), 1):.2f}x')"
}
printf '| median (worst) of %s rounds, ms | native | kernel overlayfs | ckptfs, --fold-budget 2G | overlayfs / native | ckptfs / native |\n' "$ROUNDS"
printf '|---|---|---|---|---|---|\n'
printf '| rm -rf node_modules | %s | %s | %s | %s | %s |\n' "$(cell n r)" "$(cell o r)" "$(cell w r)" "$(ratio o r)" "$(ratio w r)"
printf '| unpack node_modules | %s | %s | %s | %s | %s |\n' "$(cell n u)" "$(cell o u)" "$(cell w u)" "$(ratio o u)" "$(ratio w u)"
