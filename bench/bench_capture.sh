#!/usr/bin/env bash
# Capture benchmark: ckptfs beside restic and git on generated agent rooms.
#
#   bench/bench_capture.sh [small] [large]      (default: both)
#
# For each scale: generate a room with gen_room.py under $CKBENCH_DIR (default /tmp/ckbench),
# first-capture it with the release ckptfs and `restic backup` (and commit it to git), apply
# one `gen_room.py turn`, then capture again with all three. Prints a markdown table:
# first-capture time and MB/s, incremental time, and store bytes added by the turn.
#
# Environment:
#   CKBENCH_DIR      work directory (default /tmp/ckbench); everything made here is removed
#                    at the end unless CKBENCH_KEEP=1
#   CKBENCH_REUSE=1  reuse an existing room DIR/<scale> instead of generating it
#   TURN_SEED        seed of the turn (default 1)
#   GEN_ROOM         path of gen_room.py (default ../shared/bench/gen_room.py beside the repo)
#
# The page cache is warm for every tool alike (the room was just written or read). Needs
# restic and git on PATH; builds target/release/ckptfs if missing.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
work=${CKBENCH_DIR:-/tmp/ckbench}
gen=${GEN_ROOM:-$here/../shared/bench/gen_room.py}
[ -f "$gen" ] || gen=/work/shared/bench/gen_room.py
seed=${TURN_SEED:-1}
scales=("$@")
[ ${#scales[@]} -gt 0 ] || scales=(small large)
export RESTIC_PASSWORD=${RESTIC_PASSWORD:-ckbench}
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost

ck=$here/target/release/ckptfs
if [ ! -x "$ck" ]; then
    (cd "$here" && cargo build --release --quiet)
fi
mkdir -p "$work"

cleanup() {
    if [ "${CKBENCH_KEEP:-0}" != 1 ]; then
        for s in "${scales[@]}"; do
            rm -rf "$work/$s" "$work/$s.ckptfs" "$work/$s.ckptfs-zstd" "$work/$s.restic" "$work/$s.git"
        done
        rmdir "$work" 2>/dev/null || true
    fi
}
trap cleanup EXIT

now() { date +%s.%N; }
# secs START END -> seconds with 2 decimals
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
mbps() { awk -v bytes="$1" -v t="$2" 'BEGIN { printf "%.0f", bytes / 1e6 / t }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
# Bytes on disk of a store, without ckptfs's rebuildable cache/.
store_bytes() { du -sb --exclude=cache "$1" | cut -f1; }
# Runs "$@" and prints its wall time in seconds on stdout; the command's output goes to a log.
timed() {
    local t0 t1
    t0=$(now)
    "$@" >>"$work/bench.log" 2>&1
    t1=$(now)
    secs "$t0" "$t1"
}

rows=()
for scale in "${scales[@]}"; do
    room=$work/$scale
    if [ "${CKBENCH_REUSE:-0}" = 1 ] && [ -f "$room/.ckbench_room.json" ]; then
        echo "== $scale: reusing $room" >&2
    else
        rm -rf "$room"
        echo "== $scale: generating $room" >&2
        python3 "$gen" gen "$room" --scale "$scale" >/dev/null
    fi
    read -r files bytes < <(python3 "$gen" stats "$room" |
        python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["files"], s["bytes"])')
    ckstore=$work/$scale.ckptfs
    zstore=$work/$scale.ckptfs-zstd
    repo=$work/$scale.restic
    rm -rf "$ckstore" "$zstore" "$repo" "$work/$scale.git"
    "$ck" init "$ckstore" --root "room=$room" >/dev/null
    # restic 0.14 compresses (repository v2); a zstd ckptfs store is the like-for-like size.
    "$ck" init "$zstore" --root "room=$room" --compression zstd >/dev/null
    restic init --quiet --repo "$repo" >/dev/null

    echo "== $scale: first capture ($files files, $(mib "$bytes") MiB)" >&2
    ck_first=$(timed "$ck" capture "$ckstore" -m first)
    z_first=$(timed "$ck" capture "$zstore" -m first)
    restic_first=$(timed restic --repo "$repo" backup --quiet "$room")
    # git keeps its repository outside the room, so no tool sees another's files.
    git=(git --git-dir="$work/$scale.git" --work-tree="$room")
    git init -q --bare "$work/$scale.git"
    # No background auto-gc: it would repack during the other tools' measurements.
    "${git[@]}" config gc.auto 0
    "${git[@]}" config maintenance.auto false
    git_first=$(timed sh -c '"$@" add -A && "$@" commit -qm first' git "${git[@]}")
    ck_size0=$(store_bytes "$ckstore")
    z_size0=$(store_bytes "$zstore")
    restic_size0=$(store_bytes "$repo")
    git_size0=$(du -sb "$work/$scale.git" | cut -f1)

    echo "== $scale: turn --seed $seed" >&2
    python3 "$gen" turn "$room" --seed "$seed" >>"$work/bench.log"
    echo "== $scale: incremental capture" >&2
    ck_inc=$(timed "$ck" capture "$ckstore" -m turn)
    z_inc=$(timed "$ck" capture "$zstore" -m turn)
    restic_inc=$(timed restic --repo "$repo" backup --quiet "$room")
    git_inc=$(timed sh -c '"$@" add -A && "$@" commit -qm turn' git "${git[@]}")
    ck_added=$(($(store_bytes "$ckstore") - ck_size0))
    z_added=$(($(store_bytes "$zstore") - z_size0))
    restic_added=$(($(store_bytes "$repo") - restic_size0))
    git_added=$(($(du -sb "$work/$scale.git" | cut -f1) - git_size0))
    files_read=$("$ck" show "$ckstore" main --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["checkpoint"]["stats"]["files_read"])')

    rows+=("| $scale ($files files, $(mib "$bytes") MiB) | first capture | $ck_first s ($(mbps "$bytes" "$ck_first") MB/s) | $z_first s ($(mbps "$bytes" "$z_first") MB/s) | $restic_first s ($(mbps "$bytes" "$restic_first") MB/s) | $git_first s |")
    rows+=("| | capture after one turn | $ck_inc s ($files_read files read) | $z_inc s | $restic_inc s | $git_inc s |")
    rows+=("| | store growth from the turn | $(mib "$ck_added") MiB | $(mib "$z_added") MiB | $(mib "$restic_added") MiB | $(mib "$git_added") MiB |")
done

echo
echo "| room | measure | ckptfs | ckptfs (zstd) | restic backup | git add -A && git commit |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "ckptfs $("$ck" --version | cut -d' ' -f2), $(restic version | cut -d' ' -f1-2), $(git --version); $(nproc) cores; page cache warm"
