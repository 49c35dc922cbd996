#!/bin/bash
# A huge directory folded into a workspace's base (docs/benchmarks.md, "A huge folded
# directory"): nobody makes N entries in one directory, a checkpoint folds them into the lower
# view, nobody lists the directory with `ls -f` (killed after LIMIT seconds), then `umount`, and
# how long the store's view daemons outlive it.
#
#   bash bench/bench_huge_dir.sh [N] [LIMIT]      (as root; uses target/debug/ckptfs unless
#                                                     CKPTFS is set)
set -u
N=${1:-200000}
LIMIT=${2:-300}
B=${CKPTFS:-$(dirname "$0")/../target/debug/ckptfs}
T=$(mktemp -d)
chmod 755 "$T"
trap '"$B" umount "$T/room" >/dev/null 2>&1; umount -l "$T/room" 2>/dev/null; mountpoint -q "$T/room" || rm -rf "$T"' EXIT
secs() { echo "scale=2; ($(date +%s%N) - $1) / 1000000000" | bc; }
daemons() { pgrep -f "ckptfs browse $T/store " | tr '\n' ' '; }

mkdir "$T/room" && echo a >"$T/room/a" && chown -R nobody "$T/room"
"$B" init "$T/store" --root "ws=$T/room" >/dev/null
"$B" capture "$T/store" -m initial >/dev/null
"$B" mount "$T/store" --branch main >/dev/null || exit 1
setpriv --reuid=nobody --regid=nogroup --clear-groups /usr/bin/python3 -c "
import os
os.mkdir('$T/room/big')
for i in range($N): os.close(os.open('$T/room/big/f%07d' % i, os.O_CREAT | os.O_WRONLY, 0o644))"
t=$(date +%s%N)
"$B" checkpoint "$T/room" -m big >/dev/null
echo "checkpoint (fold) of $N entries: $(secs "$t") s"
t=$(date +%s%N)
n=$(timeout "$LIMIT" setpriv --reuid=nobody --regid=nogroup --clear-groups ls -f "$T/room/big" | wc -l)
echo "ls -f as nobody: $n names in $(secs "$t") s (killed after $LIMIT s)"
t=$(date +%s%N)
"$B" umount "$T/room" >/dev/null
echo "umount: $(secs "$t") s"
t=$(date +%s%N)
for _ in $(seq 60); do [ -z "$(daemons)" ] && break; sleep 0.5; done
left=$(daemons)
echo "view daemons ${left:-gone} $(secs "$t") s after umount"
