#!/usr/bin/env bash
# What walking trees through held directory fds costs: two ckptfs binaries side by side, in one
# run, on the same generated room (e.g. the release build before the safe walk and now).
#
#   bench/bench_safe.sh BASE_BINARY NEW_BINARY [small|large] [TURNS]
#
# For each binary, interleaved (base, new, base, new...) so that both see the same machine:
#   capture       first capture of the room into a fresh store (page cache warm)
#   recapture     capture again after one gen_room.py turn (the walk re-lstats every file)
#   checkpoint    the median of TURNS (default 5) workspace checkpoints, each after a turn
#                 applied inside the mounted workspace (the walk covers the upper layer only)
# Prints a markdown table with the ratio new/base.
#
# Environment: CKBENCH_DIR (default /tmp/ckbench-safe; removed at the end unless CKBENCH_KEEP=1),
# GEN_ROOM (default ../shared/bench/gen_room.py beside the repo). Needs python3 and bc.
set -euo pipefail

base=${1:?usage: bench_safe.sh BASE_BINARY NEW_BINARY [small|large] [TURNS]}
new=${2:?usage: bench_safe.sh BASE_BINARY NEW_BINARY [small|large] [TURNS]}
scale=${3:-small}
turns=${4:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
gen=${GEN_ROOM:-$here/../shared/bench/gen_room.py}
[ -f "$gen" ] || gen=/work/shared/bench/gen_room.py
work=${CKBENCH_DIR:-/tmp/ckbench-safe}

cleanup() {
    for b in "$base" "$new"; do
        "$b" umount "$work/room-$(basename "$b")" >/dev/null 2>&1 || true
    done
    if [ "${CKBENCH_KEEP:-0}" != 1 ]; then rm -rf "$work"; fi
}
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work"
python3 "$gen" gen "$work/src" --scale "$scale" >/dev/null

now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A cap recap ck
for b in "$base" "$new"; do
    n=$(basename "$b")
    room=$work/room-$n
    rm -rf "$room" "$work/store-$n"
    cp -a "$work/src" "$room"
    "$b" init "$work/store-$n" --root "ws=$room" --no-default-excludes >/dev/null
done
for b in "$base" "$new"; do
    n=$(basename "$b")
    t=$(now); "$b" capture "$work/store-$n" -m first >/dev/null; cap[$n]=$(elapsed "$t")
done
for b in "$base" "$new"; do
    python3 "$gen" turn "$work/room-$(basename "$b")" --seed 1 >/dev/null
done
for b in "$base" "$new"; do
    n=$(basename "$b")
    t=$(now); "$b" capture "$work/store-$n" -m turn >/dev/null; recap[$n]=$(elapsed "$t")
done
for b in "$base" "$new"; do
    n=$(basename "$b")
    "$b" mount "$work/store-$n" --branch main >/dev/null
done
declare -A times
for i in $(seq 1 "$turns"); do
    for b in "$base" "$new"; do
        n=$(basename "$b")
        python3 "$gen" turn "$work/room-$n" --seed $((i + 1)) >/dev/null
        t=$(now); "$b" checkpoint "$work/room-$n" -m "turn $i" >/dev/null
        times[$n]+="$(elapsed "$t") "
    done
done
for b in "$base" "$new"; do
    n=$(basename "$b")
    ck[$n]=$(echo "${times[$n]}" | tr ' ' '\n' | grep . | median)
    "$b" umount "$work/room-$n" >/dev/null
done
nb=$(basename "$base"); nn=$(basename "$new")
files=$(python3 "$gen" stats "$work/src" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("files", "?"))')
echo "room: $scale ($files files), $(nproc) cores, $(uname -r)"
echo
echo "| operation | $nb | $nn | $nn / $nb |"
echo "|---|---|---|---|"
row() { printf '| %s | %.3f s | %.3f s | %.2f |\n' "$1" "$2" "$3" "$(echo "$3 / $2" | bc -l)"; }
row "first capture" "${cap[$nb]}" "${cap[$nn]}"
row "capture after a turn" "${recap[$nb]}" "${recap[$nn]}"
row "workspace checkpoint after a turn (median of $turns)" "${ck[$nb]}" "${ck[$nn]}"
