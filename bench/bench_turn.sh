#!/usr/bin/env bash
# What `ckptfs turn` costs over running the same agent turn by hand (`ckptfs exec` of the
# agent, then `ckptfs checkpoint`), side by side in one run, on a room from gen_room.py.
# The turn adds: the runtime fingerprint (hashing python3, running `python3 --version`), the
# claimed marker and its two synced audit lines, and a held checkpoint (the cgroup frozen for
# the second pass). Needs root and python3. Usage: bench/bench_turn.sh [small|large] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=${GEN_ROOM:-$(cd .. && pwd)/shared/bench/gen_room.py}
[ -f "$GEN" ] || GEN=/work/shared/bench/gen_room.py
SCALE=${1:-small}
N=${2:-5}
cargo build --release -q
B=$PWD/target/release/ckptfs
BASE=${BENCH_DIR:-/tmp/ckptfs-turnbench}
ROOM=$BASE/room STORE=$BASE/store
"$B" umount "$ROOM" >/dev/null 2>&1 || true
rm -rf "$BASE"
mkdir -p "$BASE"
trap '"$B" umount "$ROOM" >/dev/null 2>&1 || true; rm -rf "$BASE"' EXIT

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.3f}')"; }
median() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }

python3 "$GEN" gen "$ROOM" --scale "$SCALE" >/dev/null
"$B" init "$STORE" --root "room=$ROOM" >/dev/null
"$B" capture "$STORE" -m initial >/dev/null
"$B" fingerprint "$STORE" --file python3 --command "python3 --version" >/dev/null
"$B" mount "$STORE" --branch main >/dev/null
# One of each first: makes the cgroup, warms the caches.
"$B" exec --as-root "$ROOM" -- python3 "$GEN" turn "$ROOM" --seed 1000 >/dev/null
"$B" checkpoint "$ROOM" >/dev/null
"$B" turn --as-root "$ROOM" -- python3 "$GEN" turn "$ROOM" --seed 1001 >/dev/null 2>&1

agent=() ckpt=() hand=() turn=() fp=()
for i in $(seq 1 "$N"); do
    t0=$(now)
    "$B" exec --as-root "$ROOM" -- python3 "$GEN" turn "$ROOM" --seed "$i" >/dev/null
    t1=$(now)
    "$B" checkpoint "$ROOM" >/dev/null
    t2=$(now)
    agent+=("$(secs "$t0" "$t1")") ckpt+=("$(secs "$t1" "$t2")") hand+=("$(secs "$t0" "$t2")")
    t0=$(now)
    "$B" turn --as-root "$ROOM" -- python3 "$GEN" turn "$ROOM" --seed "$((i + 500))" >/dev/null 2>&1
    t1=$(now)
    turn+=("$(secs "$t0" "$t1")")
    t0=$(now)
    "$B" fingerprint "$STORE" >/dev/null
    fp+=("$(secs "$t0" "$(now)")")
done
echo "room: $SCALE ($(python3 "$GEN" stats "$ROOM" | tr -d '\n')), $N turns each, medians (s), $(findmnt -n -o FSTYPE -T "$BASE")"
printf '%-44s %s\n' "exec of the agent turn" "$(median "${agent[@]}")"
printf '%-44s %s\n' "checkpoint after it" "$(median "${ckpt[@]}")"
printf '%-44s %s\n' "by hand: exec + checkpoint" "$(median "${hand[@]}")"
printf '%-44s %s\n' "ckptfs turn (same agent turn, held checkpoint)" "$(median "${turn[@]}")"
printf '%-44s %s\n' "ckptfs fingerprint alone" "$(median "${fp[@]}")"
