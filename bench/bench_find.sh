#!/usr/bin/env bash
# Searching history and counting a store: ckptfs find / find --history / stats beside restic
# find / restic stats, in one run, on the same generated room and the same checkpoints.
#
#   bench/bench_find.sh CKPTFS_BINARY [small|large] [TURNS]
#
# The room is captured, then TURNS (default 20) gen_room.py turns are applied, each captured by
# both tools (ckptfs capture, restic backup). Then, page cache warm, the median of 3 runs of:
#   find '*.sqlite'   every checkpoint/snapshot holding a file matching a name pattern
#   find one path     the checkpoints in which one path changed (ckptfs find --history;
#                     restic has no history mode: restic find --long on the path lists it in
#                     every snapshot, which a script would then compare)
#   stats             ckptfs stats (logical, content, stored, unique per checkpoint) against
#                     restic stats --mode raw-data (the deduplicated size only)
# Prints a markdown table. ckptfs also prints how many trees it decoded (find's trees_read).
#
# Environment: CKBENCH_DIR (default /tmp/ckbench-find; removed at the end unless
# CKBENCH_KEEP=1), GEN_ROOM (default ../shared/bench/gen_room.py beside the repo). Needs
# python3, restic and bc.
set -euo pipefail

bin=${1:?usage: bench_find.sh CKPTFS_BINARY [small|large] [TURNS]}
scale=${2:-small}
turns=${3:-20}
here=$(cd "$(dirname "$0")/.." && pwd)
gen=${GEN_ROOM:-$here/../shared/bench/gen_room.py}
[ -f "$gen" ] || gen=/work/shared/bench/gen_room.py
work=${CKBENCH_DIR:-/tmp/ckbench-find}

cleanup() { if [ "${CKBENCH_KEEP:-0}" != 1 ]; then rm -rf "$work"; fi; }
trap cleanup EXIT
rm -rf "$work"
mkdir -p "$work"
room="$work/room"
python3 "$gen" gen "$room" --scale "$scale" >/dev/null
export RESTIC_PASSWORD=bench RESTIC_REPOSITORY="$work/restic"
restic init -q
"$bin" init "$work/store" --root "ws=$room" >/dev/null
snap() {
    "$bin" -q capture "$work/store" >/dev/null
    (cd "$room" && restic backup -q . >/dev/null)
}
snap
for i in $(seq 1 "$turns"); do
    python3 "$gen" turn "$room" --seed "$i" >/dev/null
    snap
done
# A path that changes in turns: the SQLite database; a name pattern: *.sqlite.
path=state/agent.sqlite

now() { date +%s.%N; }
median3() {
    local t a b c
    for t in 1 2 3; do
        local s; s=$(now); "$@" >/dev/null; echo "$(now) - $s" | bc
    done | sort -n | sed -n 2p
}
c_find=$(median3 "$bin" find "$work/store" '*.sqlite' --json)
r_find=$(median3 restic find -q '*.sqlite')
c_hist=$(median3 "$bin" find "$work/store" --history "ws/$path" --json)
r_hist=$(median3 restic find -q --long "/$path")
c_stats=$(median3 "$bin" stats "$work/store" --json)
r_stats=$(median3 restic stats -q --mode raw-data)
trees=$("$bin" find "$work/store" '*.sqlite' --json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["trees_read"], v["checkpoints_searched"])')
changes=$("$bin" find "$work/store" --history "ws/$path" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["changes"]))')
files=$(python3 "$gen" stats "$room" | python3 -c 'import json,sys; print(json.load(sys.stdin)["files"])')

echo "room: $scale ($files files), $((turns + 1)) checkpoints/snapshots; ckptfs find decoded" \
     "$(echo "$trees" | cut -d' ' -f1) trees over $(echo "$trees" | cut -d' ' -f2) checkpoints;" \
     "--history found $changes changes of $path"
echo
echo "| operation | ckptfs | restic | ckptfs / restic |"
echo "|---|---|---|---|"
ratio() { printf '%.2f' "$(echo "scale=4; $1 / $2" | bc)"; }
printf '| find '"'"'*.sqlite'"'"' | %.3f s | %.3f s | %s |\n' "$c_find" "$r_find" "$(ratio "$c_find" "$r_find")"
printf '| one path in every checkpoint (find --history / find --long) | %.3f s | %.3f s | %s |\n' "$c_hist" "$r_hist" "$(ratio "$c_hist" "$r_hist")"
printf '| stats (all figures / raw-data) | %.3f s | %.3f s | %s |\n' "$c_stats" "$r_stats" "$(ratio "$c_stats" "$r_stats")"
