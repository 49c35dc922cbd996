#!/usr/bin/env bash
# A 10 GiB sparse file (a few bytes of data at its start, and at its end): `status` and
# `checkpoint` with it new in a workspace, `capture` of a root holding it, `restore` of that.
# Needs root and fuse3. Usage: bench/bench_sparse.sh [BINARY] [DIR]
# BINARY defaults to target/release/ckptfs (built first); DIR to a fresh temp dir, removed after.
set -euo pipefail
B=${1:-}
if [ -z "$B" ]; then
    cargo build --release --quiet
    B=target/release/ckptfs
fi
B=$(realpath "$B")
D=${2:-$(mktemp -d)}
mkdir -p "$D"
t() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$(echo "$e - $s" | bc)"; }
big() { truncate -s 10G "$1"; printf head | dd of="$1" conv=notrunc status=none
        printf tail | dd of="$1" bs=1 seek=$((10 * 1024 * 1024 * 1024 - 4)) conv=notrunc status=none; }

# Workspace: status and checkpoint with the new sparse file.
mkdir -p "$D/ws/room"; echo hi > "$D/ws/room/a.txt"
"$B" init "$D/ws/store" --root "ws=$D/ws/room" >/dev/null
"$B" capture "$D/ws/store" >/dev/null
"$B" mount "$D/ws/store" --branch main >/dev/null
trap '"$B" umount "$D/ws/room" >/dev/null 2>&1 || true' EXIT
big "$D/ws/room/big.img"
echo "status     $(t "$B" status "$D/ws/room") s"
echo "checkpoint $(t "$B" checkpoint "$D/ws/room" -m sparse) s"
"$B" umount "$D/ws/room" >/dev/null

# Capture and restore.
mkdir -p "$D/cap/room"; big "$D/cap/room/big.img"
"$B" init "$D/cap/store" --root "r=$D/cap/room" >/dev/null
echo "capture    $(t "$B" capture "$D/cap/store") s"
echo "restore    $(t "$B" restore "$D/cap/store" main --to "$D/cap/out") s"
echo "restored: $(du -k "$D/cap/out/big.img" | cut -f1) KiB allocated of $(stat -c %s "$D/cap/out/big.img") bytes"
[ -n "${2:-}" ] || rm -rf "$D"
