#!/usr/bin/env bash
# bench_remote.sh - remotes on one real Garage node: ckptfs push/clone/lazy mount vs restic's
# S3 backend on the same server, side by side in one run, on generated agent rooms.
#
# usage: bench/bench_remote.sh [--scale small|large]... [--work DIR] [--big-mib N] [--clean]
#   --scale    room sizes (default: small), from ../shared/bench/gen_room.py
#   --work     scratch directory (default /tmp/ckbench-remote); rooms are reused
#   --big-mib  size of the extra random file added to the room for the first-byte and
#              sequential-read figures (default 1024)
#   --clean    delete the scratch directory at the end
# env: CKPTFS (default target/release/ckptfs, built if missing), GARAGE (default
#      ~/.cargo/bin/garage), GEN_ROOM, PACK_SIZES (pack targets to compare with one PUT per
#      object on the small room, default "1 1048576 8388608 33554432"; empty: none),
#      FIND_RUNS (rounds of the repeated cold find, default 3), BEFORE (another build of
#      ckptfs: its cold find over a fresh clone is timed in the same rounds)
#
# Measures: first push of the room and push after one `turn` (ckptfs) vs `restic backup` to
# s3:http://... (both encrypted, same node); remote bytes added by the turn; clone time;
# cold lazy mount time; first byte and sequential MB/s of a cold big file (and, as the
# ceiling, plain ranged GETs of the same bytes from the same node); cold `find` over
# the lazy mount vs a cold `find` over a local mount of the same checkpoint, vs `restic
# mount` on the same remote. "Cold": the clone holds no object (fresh clone), the local
# store's page cache is evicted with posix_fadvise(DONTNEED). Root and /dev/fuse required.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=/tmp/ckbench-remote
SCALES=()
BIG_MIB=1024
CLEAN=0
while [ $# -gt 0 ]; do
    case $1 in
        --scale) SCALES+=("$2"); shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --big-mib) BIG_MIB=$2; shift 2 ;;
        --clean) CLEAN=1; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
[ ${#SCALES[@]} -gt 0 ] || SCALES=(small)
GEN_ROOM=${GEN_ROOM:-$HERE/../shared/bench/gen_room.py}
[ -f "$GEN_ROOM" ] || GEN_ROOM=/work/shared/bench/gen_room.py
CKPTFS=${CKPTFS:-$HERE/target/release/ckptfs}
GARAGE=${GARAGE:-$HOME/.cargo/bin/garage}
PACK_SIZES=${PACK_SIZES-"1 1048576 8388608 33554432"}
FIND_RUNS=${FIND_RUNS:-3}
BEFORE=${BEFORE:-}
command -v restic >/dev/null || { echo "restic is not installed" >&2; exit 1; }
[ -x "$GARAGE" ] || { echo "garage not found at $GARAGE (scripts/setup-deps.sh)" >&2; exit 1; }
[ -x "$CKPTFS" ] || (cd "$HERE" && cargo build --release --quiet)
mkdir -p "$WORK"

# shellcheck source=bench/garage_bench.sh
source "$HERE/bench/garage_bench.sh"
RPID=""; MOUNTS=()
cleanup() {
    for m in "${MOUNTS[@]}"; do
        if grep -q " $m " /proc/self/mountinfo; then
            "$CKPTFS" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true
        fi
    done
    if [ -n "$RPID" ]; then kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; fi
    if [ -n "$GPID" ]; then kill "$GPID" 2>/dev/null || true; wait "$GPID" 2>/dev/null || true; fi
    if [ "$CLEAN" = 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

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
# secs CMD...: wall seconds of CMD (its output discarded).
secs() {
    local t0 t1; t0=$(date +%s.%N)
    if ! "$@" >/dev/null; then echo "FAILED: $*" >&2; echo fail; return; fi
    t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}'
}
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f", b / s / 1e6; else print "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
# raw_get BUCKET/KEY BYTES: GETs the object in 8 MiB ranges, 4 at a time.
raw_get() {
    local cfg=$WORK/raw-get.cfg step=$((8 << 20)) off=0
    : > "$cfg"
    while [ "$off" -lt "$2" ]; do
        printf 'url = "%s/%s"\nrange = "%d-%d"\noutput = "/dev/null"\n' \
            "$ENDPOINT" "$1" "$off" "$((off + step - 1))" >> "$cfg"
        off=$((off + step))
    done
    curl_s3 --parallel --parallel-max 4 -K "$cfg"
}

# One Garage node per room (start_garage/stop_garage: its data removed after the room's table,
# since the large room's run needs about 16 GB of disk by itself).

echo "ckptfs $("$CKPTFS" --version | awk '{print $2}'), $(restic version | head -1), $("$GARAGE" --version | head -1)"
echo "machine: $(nproc) cores, $(uname -r); garage: 1 node on loopback"
echo "commit $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')"
# The machine may be shared: every table says what else was running (load average).
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

for SCALE in "${SCALES[@]}"; do
    start_garage
    ROOM=$WORK/room-$SCALE
    if [ ! -f "$ROOM/.ckbench_room.json" ]; then
        rm -rf "$ROOM"; python3 "$GEN_ROOM" gen "$ROOM" --scale "$SCALE" >/dev/null
        head -c "$((BIG_MIB << 20))" /dev/urandom > "$ROOM/artifacts/big-cold.bin"
    fi
    ST=$WORK/$SCALE; rm -rf "$ST"; mkdir -p "$ST"
    A=$ST/a; B=$ST/b
    mkbucket "ck-$SCALE"; mkbucket "rs-$SCALE"
    "$CKPTFS" init "$A" --root "room=$ROOM" >/dev/null
    "$CKPTFS" capture "$A" >/dev/null
    "$CKPTFS" remote add "$A" origin "s3://ck-$SCALE/room" --endpoint "$ENDPOINT" --region garage >/dev/null
    RS="s3:$ENDPOINT/rs-$SCALE/room"
    restic -r "$RS" init >/dev/null 2>&1
    declare -A R=()
    R[load_start]=$(loadavg)
    R[ck_push1]=$(secs "$CKPTFS" push "$A")
    R[rs_backup1]=$(secs restic -r "$RS" backup -q "$ROOM")
    ck0=$(bucket_bytes "ck-$SCALE"); rs0=$(bucket_bytes "rs-$SCALE")
    python3 "$GEN_ROOM" turn "$ROOM" --seed 1 >/dev/null
    R[ck_capture_turn]=$(secs "$CKPTFS" capture "$A")
    R[ck_push_turn]=$(secs "$CKPTFS" push "$A")
    R[rs_backup_turn]=$(secs restic -r "$RS" backup -q "$ROOM")
    ck1=$(bucket_bytes "ck-$SCALE"); rs1=$(bucket_bytes "rs-$SCALE")
    R[ck_turn_bytes]=$((ck1 - ck0)); R[rs_turn_bytes]=$((rs1 - rs0))
    R[ck_total_bytes]=$ck1; R[rs_total_bytes]=$rs1

    # Lazy side: a fresh clone holds no object.
    R[ck_clone]=$(secs "$CKPTFS" clone "s3://ck-$SCALE/room" "$B" --endpoint "$ENDPOINT" --region garage)
    MNT=$ST/mnt; mkdir -p "$MNT"; MOUNTS+=("$MNT")
    R[ck_mount]=$(secs "$CKPTFS" mount "$B" main:room --at "$MNT")
    R[ck_find_cold]=$(secs find "$MNT" -printf '%s\n')
    R[ck_find_warm]=$(secs find "$MNT" -printf '%s\n')
    # The cold find again (before the big read, whose fetched objects' writeback would slow
    # it), FIND_RUNS rounds of: a fresh clone mounted and walked (and the same
    # with the BEFORE build), then the local store evicted, mounted and walked; medians.
    # Each clone and mount point has a path of its own. On the 2-core bench machine the
    # cold finds of both builds grew round by round (0.9 to 2.5 s) while the local one did
    # not: Garage, on the same cores and disk, got slower to answer (see benchmarks.md).
    lazy_find() { # BINARY K: seconds of a cold find over a fresh clone's lazy mount
        local bin=$1 c=$ST/fc$2 m=$ST/fmnt$2 t
        mkdir -p "$m"
        "$bin" clone "s3://ck-$SCALE/room" "$c" --endpoint "$ENDPOINT" --region garage >/dev/null
        "$bin" mount "$c" main:room --at "$m" >/dev/null
        t=$(secs find "$m" -printf '%s\n')
        "$bin" umount "$m" >/dev/null
        rm -rf "$c"; echo "$t"
    }
    median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
    FL=(); FB=(); FN=(); mkdir -p "$ST/fl"; MOUNTS+=("$ST/fl")
    for k in $(seq "$FIND_RUNS"); do
        MOUNTS+=("$ST/fmnta$k" "$ST/fmntb$k")
        FL+=("$(lazy_find "$CKPTFS" "a$k")")
        if [ -n "$BEFORE" ]; then FB+=("$(lazy_find "$BEFORE" "b$k")"); fi
        evict "$A"
        "$CKPTFS" mount "$A" main:room --at "$ST/fl" >/dev/null
        FN+=("$(secs find "$ST/fl" -printf '%s\n')")
        "$CKPTFS" umount "$ST/fl" >/dev/null
    done
    R[find_lazy_med]=$(median "${FL[@]}"); R[find_local_med]=$(median "${FN[@]}")
    R[find_runs]="lazy ${FL[*]}; local ${FN[*]}"
    if [ -n "$BEFORE" ]; then
        R[find_before_med]=$(median "${FB[@]}"); R[find_runs]+="; before ${FB[*]}"
    fi
    BIG=artifacts/big-cold.bin
    BIGB=$(stat -c %s "$ROOM/$BIG")
    R[ck_first_byte]=$(secs head -c 1 "$MNT/$BIG")
    R[load_seq]=$(loadavg)
    R[ck_seq_s]=$(secs cat "$MNT/$BIG")
    "$CKPTFS" umount "$MNT" >/dev/null
    # The ceiling: the same bytes as one plain object, read back with ranged GETs of 8 MiB,
    # 4 in flight, by one curl process (no decryption, no checks, no disk writes).
    mkbucket "raw-$SCALE"
    curl_s3 -T "$ROOM/$BIG" "$ENDPOINT/raw-$SCALE/big" -o /dev/null
    R[raw_get_s]=$(secs raw_get "raw-$SCALE/big" "$BIGB")
    # The same checkpoint from the local store, cold.
    LMNT=$ST/lmnt; mkdir -p "$LMNT"; MOUNTS+=("$LMNT")
    evict "$A"
    "$CKPTFS" mount "$A" main:room --at "$LMNT" >/dev/null
    R[local_find_cold]=$(secs find "$LMNT" -printf '%s\n')
    "$CKPTFS" umount "$LMNT" >/dev/null
    # restic mount on the same remote.
    RMNT=$ST/rmnt; mkdir -p "$RMNT"; MOUNTS+=("$RMNT")
    t0=$(date +%s.%N)
    restic -r "$RS" mount "$RMNT" >/dev/null 2>&1 &
    RPID=$!
    for _ in $(seq 600); do [ -e "$RMNT/snapshots/latest" ] && break; sleep 0.05; done
    t1=$(date +%s.%N)
    R[rs_mount]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
    RL=$RMNT/snapshots/latest$ROOM
    R[rs_find_cold]=$(secs find "$RL" -printf '%s\n')
    R[rs_first_byte]=$(secs head -c 1 "$RL/$BIG")
    R[rs_seq_s]=$(secs timeout 600 cat "$RL/$BIG" || echo 600)
    umount "$RMNT" 2>/dev/null || true; kill "$RPID" 2>/dev/null || true; wait "$RPID" 2>/dev/null || true; RPID=""

    echo
    echo "## $SCALE room ($(du -sh --apparent-size "$ROOM" | cut -f1), $(find "$ROOM" | wc -l) entries; big file $BIG_MIB MiB)"
    echo "load average: ${R[load_start]} at the first push, ${R[load_seq]} before the sequential read, $(loadavg) at the end"
    echo "| what | ckptfs | restic | ckptfs/restic |"
    echo "|---|---|---|---|"
    echo "| first push / backup (s) | ${R[ck_push1]} | ${R[rs_backup1]} | $(ratio "${R[ck_push1]}" "${R[rs_backup1]}") |"
    echo "| push / backup after one turn (s) | ${R[ck_push_turn]} (capture ${R[ck_capture_turn]}) | ${R[rs_backup_turn]} | $(ratio "${R[ck_push_turn]}" "${R[rs_backup_turn]}") |"
    echo "| remote bytes added by the turn | ${R[ck_turn_bytes]} | ${R[rs_turn_bytes]} | $(ratio "${R[ck_turn_bytes]}" "${R[rs_turn_bytes]}") |"
    echo "| remote bytes total | ${R[ck_total_bytes]} | ${R[rs_total_bytes]} | $(ratio "${R[ck_total_bytes]}" "${R[rs_total_bytes]}") |"
    echo "| clone (refs + records + index) (s) | ${R[ck_clone]} | - | |"
    echo "| cold mount (s) | ${R[ck_mount]} | ${R[rs_mount]} | $(ratio "${R[ck_mount]}" "${R[rs_mount]}") |"
    echo "| cold find (s) | ${R[ck_find_cold]} (local cold ${R[local_find_cold]}, x$(ratio "${R[ck_find_cold]}" "${R[local_find_cold]}"); warm ${R[ck_find_warm]}) | ${R[rs_find_cold]} | $(ratio "${R[ck_find_cold]}" "${R[rs_find_cold]}") |"
    echo "| cold find, median of $FIND_RUNS fresh clones (s) | ${R[find_lazy_med]} (local cold ${R[find_local_med]}, x$(ratio "${R[find_lazy_med]}" "${R[find_local_med]}")) | | |"
    if [ -n "$BEFORE" ]; then
        echo "| the same, BEFORE build (s) | ${R[find_before_med]} (x$(ratio "${R[find_before_med]}" "${R[find_local_med]}") the local cold find) | | |"
    fi
    echo "| first byte of the cold big file (s) | ${R[ck_first_byte]} | ${R[rs_first_byte]} | $(ratio "${R[ck_first_byte]}" "${R[rs_first_byte]}") |"
    echo "| sequential cold read (MB/s) | $(mbps "$BIGB" "${R[ck_seq_s]}") | $(mbps "$BIGB" "${R[rs_seq_s]}") | |"
    echo "| raw ranged GETs of the same bytes, 8 MiB x 4 in flight, curl (MB/s) | $(mbps "$BIGB" "${R[raw_get_s]}") | | |"
    echo "cold find runs (s): ${R[find_runs]}"

    if [ "$SCALE" = small ] && [ -n "$PACK_SIZES" ]; then
        echo
        echo "Pack target vs first push of the small room (one PUT per object at 1 byte):"
        echo "| pack target (bytes) | push (s) | packs |"
        echo "|---|---|---|"
        for P in $PACK_SIZES; do
            mkbucket "pk-$P" 2>/dev/null || true
            PS=$ST/pack-$P; rm -rf "$PS"
            "$CKPTFS" init "$PS" --root "room=$ROOM" >/dev/null
            "$CKPTFS" capture "$PS" >/dev/null
            "$CKPTFS" remote add "$PS" origin "s3://pk-$P/room" --endpoint "$ENDPOINT" --region garage >/dev/null
            t0=$(date +%s.%N)
            packs=$(CKPTFS_PACK_TARGET=$P "$CKPTFS" push "$PS" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["packs"])')
            t1=$(date +%s.%N)
            echo "| $P | $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}') | $packs |"
            rm -rf "$PS"
        done
    fi
    rm -rf "$B"
    stop_garage
    rm -rf "$ST"
done
