#!/usr/bin/env bash
# Live-workspace benchmark, side by side in one run (needs root, fuse3, fuse-overlayfs, restic,
# git, sqlite3, python3). Usage: bench/bench_workspace.sh [small] [large]
#
# For each scale: generate a room (../shared/bench/gen_room.py), capture it, mount it as a
# workspace, then measure
#   1. checkpoint time after one agent turn (ckptfs; median of five turns) vs restic backup and
#      git commit of the same change; then once more with the turn run in a cgroup that the checkpoint freezes
#      (--freeze-cgroup), reporting how long the writers were held,
#   2. switch time to another checkpoint vs `restic restore` and `cp -a` of the same state,
#   3. a workload (3 turns, `git add -A && git commit`, 5000 SQLite inserts) on the workspace vs
#      native ext4 vs kernel overlayfs vs fuse-overlayfs. Each starts from the same state, with
#      a git index written for the tree it sees (the copies' indexes are refreshed natively,
#      as an agent's own repository would be; the overlays sit on the source tree itself),
#      and one `git status` first, timed apart ("first git status"): it re-reads a file only
#      where the tree shows other stat data (inode number, ctime, mtime, size) than the index
#      holds.
#   4. `git status` in the workspace after checkpointing the workload, unmounting and mounting
#      the branch again (every file then comes from the store).
# With BENCH_FS=xfs (or btrfs), everything (rooms, stores, peers) is on a filesystem of that
# type made on an image file (BENCH_IMG, default /var/tmp/ckptfs-bench-FS.img, sparse, 64 GiB)
# on a loop device: checkpoints then read big changed files through reflink snapshots.
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=${GEN_ROOM:-$(cd .. && pwd)/shared/bench/gen_room.py}
[ -f "$GEN" ] || GEN=/work/shared/bench/gen_room.py
cargo build --release -q
B=$PWD/target/release/ckptfs
export RESTIC_PASSWORD=bench
BASE=${BENCH_DIR:-/tmp/ckptfs-wsbench}
if [ -n "${BENCH_FS:-}" ]; then
    IMG=${BENCH_IMG:-/var/tmp/ckptfs-bench-$BENCH_FS.img}
    umount "$BASE" 2>/dev/null || true
    rm -f "$IMG"
    mkdir -p "$BASE"
    truncate -s 64G "$IMG"
    "mkfs.$BENCH_FS" -q -f "$IMG"
    mount -o loop "$IMG" "$BASE"
    trap 'umount -l "$BASE" 2>/dev/null; rm -f "$IMG"' EXIT
fi
mkdir -p "$BASE"
FS_TYPE=$(findmnt -n -o FSTYPE -T "$BASE" 2>/dev/null || echo "?")

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.3f}')"; }
timeit() { local t0; t0=$(now); "$@" >/dev/null 2>&1; secs "$t0" "$(now)"; }
dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

workload() { # dir seed: 3 turns, git add+commit, 5000 sqlite inserts
    local d=$1 s=$2
    for i in 1 2 3; do python3 "$GEN" turn "$d" --seed $((s + i)) >/dev/null; done
    (cd "$d" && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm turn) >/dev/null
    python3 - "$d/state/agent.sqlite" <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
con.execute("CREATE TABLE IF NOT EXISTS bench(i INTEGER PRIMARY KEY, v TEXT)")
for i in range(5000):
    con.execute("INSERT INTO bench(v) VALUES (?)", ("x" * 100,))
    con.commit()
PY
}

for scale in "${@:-small large}"; do
    T=$BASE/$scale
    for m in "$T/room" "$T/kov" "$T/fov"; do umount -l "$m" 2>/dev/null || true; done
    "$B" umount "$T/room" >/dev/null 2>&1 || true
    rm -rf "$T"; mkdir -p "$T"
    echo "== $scale: generating room"
    python3 "$GEN" gen "$T/src" --scale "$scale" --seed 1 >/dev/null
    (cd "$T/src" && git init -q && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm base) >/dev/null
    files=$(find "$T/src" -type f | wc -l); size=$(du -sm "$T/src" | cut -f1)
    cp -a "$T/src" "$T/room"
    # The copy has new inode numbers: refresh its index, as the agent's repository would be.
    (cd "$T/room" && git status --porcelain) >/dev/null

    # -- ckptfs: capture, mount, one turn, checkpoint
    "$B" init "$T/store" --root "room=$T/room" >/dev/null
    "$B" capture "$T/store" -m base --label base >/dev/null
    t_mount=$(timeit "$B" mount "$T/store" --branch main)
    # The room's copy and capture above leave gigabytes being written back: let the disk
    # settle, so the checkpoints below compete only with their own turn's writes.
    sync
    # Five turns, each checkpointed: the median, the range and the first (this machine's
    # timings move by 2x from run to run, so one sample says little).
    ckpts=()
    for s in 100 101 102 103 104; do
        python3 "$GEN" turn "$T/room" --seed "$s" >/dev/null
        t0=$(now)
        "$B" checkpoint "$T/room" -m "turn $s" --json >"$T/ckpt.json"
        ckpts+=("$(secs "$t0" "$(now)")")
    done
    # Of the last turn's changed files: MiB not known unchanged (read) of MiB in all.
    unread=$(python3 -c "import json; d=json.load(open('$T/ckpt.json')); print(f\"{(d['bytes_read']-d['bytes_unread'])/1048576:.1f} of {d['bytes_read']/1048576:.1f} MiB\")")
    sorted=$(printf '%s\n' "${ckpts[@]}" | sort -n)
    t_ckpt=$(echo "$sorted" | sed -n 3p)
    t_ckpt_range="$(echo "$sorted" | head -1)-$(echo "$sorted" | tail -1)"
    store_turn=$("$B" show "$T/store" main --json | python3 -c "import json,sys; print(json.load(sys.stdin)['checkpoint']['stats']['new_bytes'])")

    # -- the same with the writers held: the turn runs in an agent cgroup, which the
    #    checkpoint freezes (--freeze-cgroup) for its second pass
    t_ckpt3=n/a; held=n/a
    cgbase=$(findmnt -n -t cgroup2 -o TARGET | head -1)
    [ -n "$cgbase" ] || cgbase=$(findmnt -n -t cgroup -o TARGET,OPTIONS | awk '/freezer/ {print $1; exit}')
    if [ -n "$cgbase" ] && mkdir "$cgbase/ckptfs-bench-$$"; then
        CG=$cgbase/ckptfs-bench-$$
        sleep 3600 & sleeper=$!
        echo "$sleeper" >"$CG/cgroup.procs"
        sh -c "echo \$\$ >'$CG/cgroup.procs'; exec python3 '$GEN' turn '$T/room' --seed 105" >/dev/null
        t0=$(now)
        out=$("$B" checkpoint "$T/room" -m turn3 --freeze-cgroup "$CG" --json)
        t_ckpt3=$(secs "$t0" "$(now)")
        held=$(echo "$out" | python3 -c "import json,sys; h=json.load(sys.stdin)['held']; print(f\"{h['micros']/1000:.1f} ms ({h['files_read']} files read while held)\")")
        kill "$sleeper"; wait "$sleeper" 2>/dev/null || true
        rmdir "$CG"
    fi

    # -- peers for the checkpoint: restic and git on a plain copy with the same turn
    cp -a "$T/src" "$T/plain"
    (cd "$T/plain" && git status --porcelain) >/dev/null
    restic init -q -r "$T/restic" >/dev/null
    restic backup -q -r "$T/restic" "$T/plain" >/dev/null
    python3 "$GEN" turn "$T/plain" --seed 100 >/dev/null
    r0=$(du -sb "$T/restic" | cut -f1)
    t_restic=$(timeit restic backup -q -r "$T/restic" "$T/plain")
    r1=$(du -sb "$T/restic" | cut -f1)
    t_git=$(timeit sh -c "cd '$T/plain' && git add -A && git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false commit -qm turn")

    # -- switch: to the base checkpoint (a fork) and back; peers restore the same state
    "$B" fork "$T/store" base --name at-base >/dev/null
    sync # the peers above leave gigabytes being written back; a switch fsyncs its state
    t_sw1=$(timeit "$B" switch "$T/room" --to at-base)
    t_sw2=$(timeit "$B" switch "$T/room" --to main)
    snap=$(restic snapshots -q -r "$T/restic" --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['short_id'])")
    t_rrest=$(timeit restic restore -q -r "$T/restic" "$snap" --target "$T/rrestore")
    t_cp=$(timeit cp -a "$T/src" "$T/cpcopy")
    rm -rf "$T/rrestore" "$T/cpcopy"

    # -- workload: native, kernel overlayfs, fuse-overlayfs, ckptfs workspace
    t_native0=$(timeit sh -c "cd '$T/plain' && git status --porcelain")
    t_native=$(timeit workload "$T/plain" 200)
    mkdir -p "$T"/{ku,kw,kov,fu,fw,fov}
    mount -t overlay overlay -o "lowerdir=$T/src,upperdir=$T/ku,workdir=$T/kw" "$T/kov"
    t_kov0=$(timeit sh -c "cd '$T/kov' && git status --porcelain")
    t_kov=$(timeit workload "$T/kov" 200)
    umount "$T/kov"
    fuse-overlayfs -o "lowerdir=$T/src,upperdir=$T/fu,workdir=$T/fw" "$T/fov"
    t_fov0=$(timeit sh -c "cd '$T/fov' && git status --porcelain")
    t_fov=$(timeit workload "$T/fov" 200)
    umount "$T/fov"
    t_ws0=$(timeit sh -c "cd '$T/room' && git status --porcelain")
    t_ws=$(timeit workload "$T/room" 200)
    "$B" checkpoint "$T/room" -m workload >/dev/null
    "$B" umount "$T/room" >/dev/null
    "$B" mount "$T/store" --branch main >/dev/null
    t_ws1=$(timeit sh -c "cd '$T/room' && git status --porcelain")
    "$B" umount "$T/room" >/dev/null

    echo
    echo "### $scale room: $files files, $size MiB, on $FS_TYPE"
    echo "| measure | ckptfs | peers |"
    echo "|---|---|---|"
    echo "| checkpoint after one turn (median of 5) | ${t_ckpt} s (range ${t_ckpt_range} s; first ${ckpts[0]} s) | restic backup ${t_restic} s; git add+commit ${t_git} s |"
    echo "| changed files of the last turn not known unchanged (read) | ${unread} | |"
    echo "| checkpoint after one turn, writers held (--freeze-cgroup) | ${t_ckpt3} s; writers held ${held} | |"
    echo "| store growth for the turn | $((store_turn / 1024)) KiB | restic $(((r1 - r0) / 1024)) KiB |"
    echo "| switch to another checkpoint | ${t_sw1} s (back: ${t_sw2} s) | restic restore ${t_rrest} s; cp -a ${t_cp} s |"
    echo "| mount a workspace | ${t_mount} s | |"
    echo "| first git status (index valid for the tree) | ${t_ws0} s | native ${t_native0} s; kernel overlayfs ${t_kov0} s; fuse-overlayfs ${t_fov0} s |"
    echo "| workload (3 turns + git commit + 5000 SQLite inserts) | ${t_ws} s | native ${t_native} s; kernel overlayfs ${t_kov} s; fuse-overlayfs ${t_fov} s |"
    echo "| git status after checkpoint, umount, mount | ${t_ws1} s | |"
    rm -rf "$T"
done
