#!/usr/bin/env bash
# bench_remote_gc.sh - what forgetting old checkpoints frees on a remote: ckptfs `forget` +
# `gc --remote` (repack) vs restic `forget` + `prune`, side by side in one run, on one real
# Garage node, with the same room and the same turns.
#
# usage: bench/bench_remote_gc.sh [--scale tiny|small|large] [--turns N] [--keep K]
#                                    [--work DIR] [--clean]
#   --scale  room size (default: small), from ../shared/bench/gen_room.py
#   --turns  agent turns after the first capture, each captured and pushed / backed up
#            (default 10)
#   --keep   checkpoints / snapshots kept, the newest (default 2); the rest are forgotten
#   --work   scratch directory (default /tmp/ckbench-remote-gc)
#   --clean  delete the scratch directory at the end
# env: CKPTFS (default target/debug/ckptfs), GARAGE (default ~/.cargo/bin/garage), GEN_ROOM
#
# Reports, for each tool: remote bytes before and after, bytes freed, and what the prune
# moved (ckptfs: its plan's packs repacked, live bytes copied, new packs; restic: its
# "to repack" and "this frees" lines). Both use their default limit of unused space (5%).
# Byte counts do not depend on the build; times are left out (a debug build is the default).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=/tmp/ckbench-remote-gc
SCALE=small
TURNS=10
KEEP=2
CLEAN=0
while [ $# -gt 0 ]; do
    case $1 in
        --scale) SCALE=$2; shift 2 ;;
        --turns) TURNS=$2; shift 2 ;;
        --keep) KEEP=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --clean) CLEAN=1; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
GEN_ROOM=${GEN_ROOM:-$HERE/../shared/bench/gen_room.py}
[ -f "$GEN_ROOM" ] || GEN_ROOM=/work/shared/bench/gen_room.py
CKPTFS=${CKPTFS:-$HERE/target/debug/ckptfs}
GARAGE=${GARAGE:-$HOME/.cargo/bin/garage}
command -v restic >/dev/null || { echo "restic is not installed" >&2; exit 1; }
[ -x "$GARAGE" ] || { echo "garage not found at $GARAGE (scripts/setup-deps.sh)" >&2; exit 1; }
[ -x "$CKPTFS" ] || (cd "$HERE" && cargo build --quiet)
rm -rf "$WORK"; mkdir -p "$WORK"

# shellcheck source=bench/garage_bench.sh
source "$HERE/bench/garage_bench.sh"
cleanup() {
    if [ -n "$GPID" ]; then kill "$GPID" 2>/dev/null || true; wait "$GPID" 2>/dev/null || true; fi
    if [ "$CLEAN" = 1 ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

start_garage
for b in ck-gc rs-gc; do mkbucket "$b"; done
for _ in $(seq 100); do curl -s -o /dev/null "$ENDPOINT" && break; sleep 0.1; done

echo "ckptfs $("$CKPTFS" --version | awk '{print $2}') ($CKPTFS), $(restic version | head -1), $("$GARAGE" --version | head -1)"
echo "room: $SCALE, 1 capture + $TURNS turns, each pushed / backed up; the $KEEP newest kept"

ROOM=$WORK/room
python3 "$GEN_ROOM" gen "$ROOM" --scale "$SCALE" >/dev/null
A=$WORK/a
"$CKPTFS" init "$A" --root "room=$ROOM" >/dev/null
"$CKPTFS" remote add "$A" origin "s3://ck-gc/room" --endpoint "$ENDPOINT" --region garage >/dev/null
RS="s3:$ENDPOINT/rs-gc/room"
restic -r "$RS" init >/dev/null 2>&1
IDS=()
for t in $(seq 0 "$TURNS"); do
    [ "$t" = 0 ] || python3 "$GEN_ROOM" turn "$ROOM" --seed "$t" >/dev/null
    IDS+=("$("$CKPTFS" capture "$A" --json -q | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')")
    "$CKPTFS" push "$A" -q >/dev/null
    restic -r "$RS" backup -q "$ROOM" >/dev/null
done
ck0=$(bucket_bytes ck-gc); rs0=$(bucket_bytes rs-gc)

# Forget all but the KEEP newest, then collect.
N=${#IDS[@]}
"$CKPTFS" forget "$A" "${IDS[@]:0:$((N - KEEP))}" -q >/dev/null
"$CKPTFS" gc "$A" --remote origin --json -q > "$WORK/ck-gc.json"
restic -r "$RS" forget --keep-last "$KEEP" -q >/dev/null
restic -r "$RS" prune > "$WORK/rs-prune.txt" 2>&1
ck1=$(bucket_bytes ck-gc); rs1=$(bucket_bytes rs-gc)
"$CKPTFS" verify "$A" --remote origin -q > /dev/null && echo "ckptfs verify --remote: clean"
restic -r "$RS" check -q >/dev/null 2>&1 && echo "restic check: clean"

python3 - "$WORK/ck-gc.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
print(f"ckptfs plan: {len(p['records'])} records, {len(p['packs'])} packs removed whole, "
      f"{len(p['repacked'])} packs repacked ({p['repacked_pack_bytes'] / 1048576:.1f} MiB, "
      f"{p['repacked_live_bytes'] / 1048576:.1f} MiB live copied into {p['new_packs']} new), "
      f"unused {p['unused_bytes_before'] / 1048576:.1f} -> {p['unused_bytes_after'] / 1048576:.1f} MiB")
PY
echo "restic prune: $(grep -E 'to repack|this removes|this frees|remaining:' "$WORK/rs-prune.txt" | sed 's/^ *//' | paste -sd';' -)"
printf '| | ckptfs | restic |\n|---|---|---|\n'
printf '| remote bytes before | %s | %s |\n' "$(mib "$ck0")" "$(mib "$rs0")"
printf '| remote bytes after forget + gc/prune | %s | %s |\n' "$(mib "$ck1")" "$(mib "$rs1")"
printf '| freed | %s | %s |\n' "$(mib $((ck0 - ck1)))" "$(mib $((rs0 - rs1)))"
