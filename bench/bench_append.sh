#!/usr/bin/env bash
# Checkpoint after a small append to a big log, side by side on ext4 and XFS (needs root,
# fuse3, xfsprogs). Usage: bench/bench_append.sh [LOG_MIB]
#
# A workspace holds one LOG_MIB (default 1024) MiB JSONL transcript; five times, 20 KiB of
# lines are appended and the workspace checkpointed. On ext4 the checkpoint reads the whole
# file (the previous version's chunks are reused, after their bytes are compared); on XFS
# it clones the file and compares extent maps with the last checkpoint's clone, so it reads
# only the appended tail (see src/ingest/snapshot.rs). Prints the median and range per filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
B=$PWD/target/release/ckptfs
MIB=${1:-1024}
BASE=${BENCH_DIR:-/tmp/ckptfs-appendbench}
now() { date +%s.%N; }

run() { # label dir
    local d=$2
    mkdir -p "$d/room"
    python3 - "$d/room/session.jsonl" "$MIB" <<'PY'
import os, sys
line = b'{"role":"assistant","content":"' + os.urandom(3000).hex().encode() + b'"}\n'
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2]) * 1048576 // len(line)):
        f.write(line)
PY
    "$B" init "$d/store" --root "room=$d/room" >/dev/null
    "$B" capture "$d/store" -m base >/dev/null
    "$B" mount "$d/store" --branch main >/dev/null
    sync
    local times=() detail=""
    for i in 0 1 2 3 4 5; do
        python3 -c "
import os, sys
with open(sys.argv[1], 'ab') as f:
    for _ in range(10):
        f.write(b'{\"turn\":%d,\"text\":\"' % $i + os.urandom(1000).hex().encode() + b'\"}\n')
" "$d/room/session.jsonl"
        local t0 t
        t0=$(now)
        "$B" checkpoint "$d/room" -m "append $i" --json >"$d/out.json"
        t=$(python3 -c "print(f'{$(now) - $t0:.3f}')")
        # The first checkpoint after the mount copies the file up and has no clone to
        # compare with: shown apart.
        if [ "$i" = 0 ]; then detail="first $t s"; continue; fi
        times+=("$t")
        detail="$detail; $(python3 -c "import json; d=json.load(open('$d/out.json')); print(f\"{(d['bytes_read']-d['bytes_unread'])/1048576:.2f} of {d['bytes_read']/1048576:.0f} MiB not known unchanged\")")"
    done
    "$B" umount "$d/room" >/dev/null
    local sorted
    sorted=$(printf '%s\n' "${times[@]}" | sort -n)
    echo "| $1 | $(echo "$sorted" | sed -n 3p) s ($(echo "$sorted" | head -1)-$(echo "$sorted" | tail -1)) | ${detail} |"
}

rm -rf "$BASE"; mkdir -p "$BASE"
echo "| store on | checkpoint after a 20 KiB append to a $MIB MiB log (median of 5) | per checkpoint |"
echo "|---|---|---|"
run "$(findmnt -n -o FSTYPE -T "$BASE") (the machine's own)" "$BASE/ext4"
IMG=$BASE.xfs.img
truncate -s $((MIB * 4 + 2048))M "$IMG"
mkfs.xfs -q -f "$IMG"
mkdir -p "$BASE/xfs"
mount -o loop "$IMG" "$BASE/xfs"
trap 'umount -l "$BASE/xfs" 2>/dev/null; rm -f "$IMG"' EXIT
run "XFS (image on a loop device)" "$BASE/xfs"
rm -rf "$BASE/ext4"
