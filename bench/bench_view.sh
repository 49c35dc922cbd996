#!/usr/bin/env bash
# bench_view.sh - read-only view benchmark: `ckptfs mount` vs the native directory vs
# `restic mount` of the same tree, side by side in one run, on generated agent rooms.
#
# usage: bench/bench_view.sh [--scale small|large]... [--work DIR] [--clean]
#   --scale   room sizes to run (default: small and large), from ../shared/bench/gen_room.py
#   --work    scratch directory (default /tmp/ckbench-view); rooms, stores and restic repos
#             are reused from an earlier run when present
#   --clean   delete the scratch directory at the end
# env: CKPTFS (binary; default target/release/ckptfs, built if missing), GEN_ROOM (generator),
#      RESTIC_TIMEOUT (seconds per restic step, default 900), WARM_RUNS (warm passes per
#      measure, the best is reported; default 3), PAIRS (interleaved native/ckptfs warm-read
#      pairs, medians reported; default 7)
#
# Measures, per scale: mount time; `find MNT -printf '%s\n' | wc -l` and `grep -r <needle>`
# cold and warm; sequential read MB/s of the big files (>= 8 MiB) cold and warm; peak RSS
# (VmHWM) of the ckptfs daemon and of restic during the walks.
# "cold": the data's page cache is evicted with posix_fadvise(DONTNEED) (no global
# drop_caches: the machine is shared) and FUSE views are freshly remounted, so neither the
# kernel nor the daemon holds anything of the mount. Root and /dev/fuse are required.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=/tmp/ckbench-view
SCALES=()
CLEAN=0
while [ $# -gt 0 ]; do
    case $1 in
        --scale) SCALES+=("$2"); shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --clean) CLEAN=1; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#SCALES[@]} -gt 0 ] || SCALES=(small large)
GEN_ROOM=${GEN_ROOM:-$HERE/../shared/bench/gen_room.py}
[ -f "$GEN_ROOM" ] || GEN_ROOM=/work/shared/bench/gen_room.py
CKPTFS=${CKPTFS:-$HERE/target/release/ckptfs}
RESTIC_TIMEOUT=${RESTIC_TIMEOUT:-900}
WARM_RUNS=${WARM_RUNS:-3}
PAIRS=${PAIRS:-7}
export RESTIC_PASSWORD=ckptfs-bench
RS_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/restic
mkdir -p "$RS_CACHE"
command -v restic >/dev/null || { echo "restic is not installed" >&2; exit 1; }
if [ ! -x "$CKPTFS" ]; then
    (cd "$HERE" && cargo build --release --quiet)
fi
mkdir -p "$WORK"

RESTIC_PID=""
CK_MNT=""
cleanup() {
    if [ -n "$CK_MNT" ] && grep -q " $CK_MNT " /proc/self/mountinfo; then
        "$CKPTFS" umount "$CK_MNT" >/dev/null 2>&1 || umount -l "$CK_MNT" || true
    fi
    stop_restic
    if [ "$CLEAN" = 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# run_timed CMD...: prints seconds; output discarded.
run_timed() {
    local s; s=$(now)
    "$@" >/dev/null 2>&1 || true
    elapsed "$s"
}
# best_of CMD...: the shortest of $WARM_RUNS timed runs (warm figures; noise only adds time).
best_of() {
    local best="" t i
    for i in $(seq 1 "$WARM_RUNS"); do
        t=$(run_timed "$@")
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t; fi
    done
    echo "$best"
}
# median COLUMN: the median of that column of stdin.
median() { awk -v c="$1" '{print $c}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", b / s / 1e6; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# Evicts the page cache of every file below the given directories.
evict() {
    python3 - "$@" <<'PY'
import os, sys
for top in sys.argv[1:]:
    for d, _, files in os.walk(top):
        for f in files:
            try:
                fd = os.open(os.path.join(d, f), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
PY
}

hwm_kb() { awk '/VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

ck_pid() {
    "$CKPTFS" status "$STORE" --json | python3 -c '
import json, sys
for m in json.load(sys.stdin):
    if m["mountpoint"] == sys.argv[1] and m["state"]:
        print(m["state"]["pid"])' "$CK_MNT"
}

CK_HWM=0
ck_mount() { # prints mount time (s)
    local s; s=$(now)
    "$CKPTFS" mount "$STORE" main:work --at "$CK_MNT" >/dev/null
    elapsed "$s"
}
ck_umount() {
    local pid h
    pid=$(ck_pid)
    h=$(hwm_kb "$pid")
    [ "$h" -gt "$CK_HWM" ] && CK_HWM=$h
    "$CKPTFS" umount "$CK_MNT" >/dev/null
}

RS_HWM=0
# Sets RS_MOUNT_TIME (seconds until the snapshot is browsable). Not to be called in $(...):
# the restic pid must stay in this shell.
start_restic() {
    local s; s=$(now)
    restic -r "$REPO" mount --no-lock "$RS_MNT" >/dev/null 2>&1 &
    RESTIC_PID=$!
    local i
    for i in $(seq 1 600); do
        if [ -d "$RS_MNT/snapshots/latest$ROOM" ]; then break; fi
        sleep 0.05
    done
    RS_MOUNT_TIME=$(elapsed "$s")
}
stop_restic() {
    if [ -n "$RESTIC_PID" ]; then
        local h; h=$(hwm_kb "$RESTIC_PID")
        [ "${h:-0}" -gt "$RS_HWM" ] && RS_HWM=$h
        kill "$RESTIC_PID" 2>/dev/null || true
        wait "$RESTIC_PID" 2>/dev/null || true
        RESTIC_PID=""
        umount "$RS_MNT" 2>/dev/null || true
    fi
}

find_cmd() { find "$1" -printf '%s\n' | wc -l; }
grep_cmd() { grep -r "$NEEDLE" "$1" | wc -l; }
read_cmd() { local p=$1; shift; for f in "$@"; do cat "$p/$f"; done >/dev/null; }

bench_scale() {
    local scale=$1
    local base=$WORK/$scale
    ROOM=$base/room
    STORE=$base/store
    REPO=$base/restic
    CK_MNT=$base/mnt-ckptfs
    RS_MNT=$base/mnt-restic
    mkdir -p "$base" "$CK_MNT" "$RS_MNT"
    if [ ! -f "$ROOM/.ckbench_room.json" ]; then
        echo "[$scale] generating room..." >&2
        rm -rf "$ROOM"
        python3 "$GEN_ROOM" gen "$ROOM" --scale "$scale" >/dev/null
    fi
    NEEDLE=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["needle"])' "$ROOM/.ckbench_room.json")
    local files bytes
    files=$(find "$ROOM" | wc -l)
    bytes=$(du -sb "$ROOM" | cut -f1)
    local t_capture="(reused)" t_backup="(reused)"
    if [ ! -f "$STORE/STORE.json" ]; then
        echo "[$scale] ckptfs capture..." >&2
        rm -rf "$STORE"
        "$CKPTFS" init "$STORE" --root "work=$ROOM" >/dev/null
        t_capture=$(run_timed "$CKPTFS" capture "$STORE" -m bench)
    fi
    if [ ! -f "$REPO/config" ]; then
        echo "[$scale] restic backup..." >&2
        rm -rf "$REPO"
        restic -r "$REPO" init >/dev/null
        t_backup=$(run_timed timeout "$RESTIC_TIMEOUT" restic -r "$REPO" backup "$ROOM")
    fi
    # Big files, largest first.
    mapfile -t BIG < <(cd "$ROOM" && find . -type f -size +8M -printf '%s %P\n' | sort -rn | cut -d' ' -f2-)
    local big_bytes=0 f
    for f in "${BIG[@]}"; do big_bytes=$((big_bytes + $(stat -c %s "$ROOM/$f"))); done

    declare -A R
    # --- native
    echo "[$scale] native..." >&2
    evict "$ROOM"; R[native_find_cold]=$(run_timed find_cmd "$ROOM")
    R[native_find_warm]=$(best_of find_cmd "$ROOM")
    evict "$ROOM"; R[native_grep_cold]=$(run_timed grep_cmd "$ROOM")
    R[native_grep_warm]=$(best_of grep_cmd "$ROOM")
    evict "$ROOM"; R[native_read_cold]=$(run_timed read_cmd "$ROOM" "${BIG[@]}")
    R[native_read_warm]=$(best_of read_cmd "$ROOM" "${BIG[@]}")
    # --- ckptfs
    echo "[$scale] ckptfs..." >&2
    CK_HWM=0
    evict "$STORE/objects"; R[ck_mount]=$(ck_mount)
    R[ck_find_cold]=$(run_timed find_cmd "$CK_MNT")
    R[ck_find_warm]=$(best_of find_cmd "$CK_MNT")
    ck_umount
    evict "$STORE/objects"; ck_mount >/dev/null
    R[ck_grep_cold]=$(run_timed grep_cmd "$CK_MNT")
    R[ck_grep_warm]=$(best_of grep_cmd "$CK_MNT")
    ck_umount
    evict "$STORE/objects"; ck_mount >/dev/null
    R[ck_read_cold]=$(run_timed read_cmd "$CK_MNT" "${BIG[@]}")
    R[ck_read_warm]=$(best_of read_cmd "$CK_MNT" "${BIG[@]}")
    # Warm reads again as interleaved pairs (native, ckptfs), medians: the two see the same
    # moment of machine load, which best-of-N runs minutes apart do not.
    local pairs="" i
    for i in $(seq 1 "$PAIRS"); do
        pairs+="$(run_timed read_cmd "$ROOM" "${BIG[@]}") $(run_timed read_cmd "$CK_MNT" "${BIG[@]}")"$'\n'
    done
    R[native_read_pairs]=$(printf '%s' "$pairs" | median 1)
    R[ck_read_pairs]=$(printf '%s' "$pairs" | median 2)
    ck_umount
    # Correctness spot check: same grep count as native.
    ck_mount >/dev/null
    local n_native n_ck
    n_native=$(grep_cmd "$ROOM"); n_ck=$(grep_cmd "$CK_MNT")
    [ "$n_native" = "$n_ck" ] || echo "WARNING: grep counts differ: native $n_native, ckptfs $n_ck" >&2
    ck_umount
    # --- restic
    echo "[$scale] restic mount..." >&2
    RS_HWM=0
    local RS
    RS=$RS_MNT/snapshots/latest$ROOM
    evict "$REPO" "$RS_CACHE"; start_restic; R[rs_mount]=$RS_MOUNT_TIME
    R[rs_find_cold]=$(run_timed timeout "$RESTIC_TIMEOUT" bash -c "find '$RS' -printf '%s\n' | wc -l")
    R[rs_find_warm]=$(best_of timeout "$RESTIC_TIMEOUT" bash -c "find '$RS' -printf '%s\n' | wc -l")
    stop_restic
    evict "$REPO" "$RS_CACHE"; start_restic
    R[rs_grep_cold]=$(run_timed timeout "$RESTIC_TIMEOUT" grep -r "$NEEDLE" "$RS")
    R[rs_grep_warm]=$(best_of timeout "$RESTIC_TIMEOUT" grep -r "$NEEDLE" "$RS")
    stop_restic
    evict "$REPO" "$RS_CACHE"; start_restic
    R[rs_read_cold]=$(run_timed timeout "$RESTIC_TIMEOUT" bash -c "cd '$RS' && cat ${BIG[*]} > /dev/null")
    R[rs_read_warm]=$(best_of timeout "$RESTIC_TIMEOUT" bash -c "cd '$RS' && cat ${BIG[*]} > /dev/null")
    stop_restic

    local out=$WORK/results-$scale.md
    {
        echo "### $scale room: $files entries, $(awk -v b="$bytes" 'BEGIN { printf "%.2f GiB", b / 2^30 }'), big files: ${#BIG[@]} totalling $(awk -v b="$big_bytes" 'BEGIN { printf "%.0f MiB", b / 2^20 }')"
        echo
        echo "| measure | native | ckptfs mount | restic mount | ckptfs/native | restic/ckptfs |"
        echo "|---|---|---|---|---|---|"
        echo "| mount time (s) | - | ${R[ck_mount]} | ${R[rs_mount]} | - | $(ratio "${R[rs_mount]}" "${R[ck_mount]}")x |"
        local m
        for m in find grep; do
            local k
            for k in cold warm; do
                echo "| \`$m\` $k (s) | ${R[native_${m}_$k]} | ${R[ck_${m}_$k]} | ${R[rs_${m}_$k]} | $(ratio "${R[ck_${m}_$k]}" "${R[native_${m}_$k]}")x | $(ratio "${R[rs_${m}_$k]}" "${R[ck_${m}_$k]}")x |"
            done
        done
        for k in cold warm; do
            local a b c
            a=$(mbps "$big_bytes" "${R[native_read_$k]}")
            b=$(mbps "$big_bytes" "${R[ck_read_$k]}")
            c=$(mbps "$big_bytes" "${R[rs_read_$k]}")
            echo "| big-file read $k (MB/s) | $a | $b | $c | $(ratio "$b" "$a")x | $(ratio "$c" "$b")x |"
        done
        a=$(mbps "$big_bytes" "${R[native_read_pairs]}")
        b=$(mbps "$big_bytes" "${R[ck_read_pairs]}")
        echo "| big-file read warm, $PAIRS interleaved pairs, median (MB/s) | $a | $b | - | $(ratio "$b" "$a")x | - |"
        echo "| peak RSS during the walks (MiB) | - | $((CK_HWM / 1024)) | $((RS_HWM / 1024)) | - | - |"
        echo
        echo "first capture: ckptfs ${t_capture} s, restic backup ${t_backup} s"
        echo
    } | tee "$out"
}

echo "# ckptfs read-only view benchmark ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
for s in "${SCALES[@]}"; do
    bench_scale "$s"
done
