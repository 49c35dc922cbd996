#!/usr/bin/env bash
# Workspaces as root and without root, side by side in one run (docs/benchmarks.md, "Without
# root"). Needs root (it makes the ordinary account it measures), fuse3, uidmap, git, sqlite3,
# python3. Usage: bench/bench_rootless.sh [small|large] [TURNS]
#
# One generated room (../shared/bench/gen_room.py), made a git repository, is copied twice,
# both copies owned by a benchmark account with a subordinate id range. Root gets a store over
# one copy; the account gets a store of its own over the other (its workspace is then mounted
# in its user namespace, docs/rootless.md), with a cgroup delegated to it as systemd would.
# Every step runs once per mode, alternating, and every agent step goes through `ckptfs exec`
# in both (the agent is the room's owner: the account as root sees it, a subordinate id of it
# without root):
#   mount a workspace; first git status, then three more (median); TURNS turns
#   (gen_room.py turn), each checkpointed (median); switch to a fork of the first checkpoint
#   and back, then three more round trips (median); the workload (3 turns, git add -A &&
#   git commit, 5000 SQLite inserts).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-small}
TURNS=${2:-5}
GEN=${GEN_ROOM:-$(cd .. && pwd)/shared/bench/gen_room.py}
[ -f "$GEN" ] || GEN=/work/shared/bench/gen_room.py
cargo build --release -q
BASE=${BENCH_DIR:-/var/tmp/ckptfs-rootless-bench}
U=ckbench$$
useradd --create-home --shell /bin/sh "$U"
UU=$(id -u "$U")
grep -q "^$U:" /etc/subuid || usermod --add-subuids 400000-465535 --add-subgids 400000-465535 "$U"
FUSE_MODE=$(stat -c %a /dev/fuse)
chmod 0666 /dev/fuse
CG=$(findmnt -n -o TARGET -t cgroup2 | head -1)/$U
mkdir -p "$CG" && chown -R "$U" "$CG"
cleanup() {
    B2=$BASE/bin/ckptfs
    [ -x "$B2" ] && "$B2" umount --kill "$BASE/root/room" >/dev/null 2>&1 || true
    pkill -KILL -u "$U" 2>/dev/null || true
    for r in "$BASE"/root/room "$BASE"/user/room; do umount -l "$r" 2>/dev/null || true; done
    sleep 0.5
    for d in "$CG"/ckptfs/* "$CG"/ckptfs "$CG"; do rmdir "$d" 2>/dev/null || true; done
    userdel -r "$U" 2>/dev/null || true
    chmod "$FUSE_MODE" /dev/fuse
    if grep -q " $BASE" /proc/mounts; then
        echo "not removing $BASE: something is still mounted there" >&2
    else
        rm -rf --one-file-system "$BASE"
    fi
    grep -q " /tmp/ckptfs-$UU" /proc/mounts || rm -rf --one-file-system "/tmp/ckptfs-$UU"
}
trap cleanup EXIT
rm -rf "$BASE"
mkdir -p "$BASE/bin" "$BASE/root" "$BASE/user"
chmod 0755 "$BASE"
install -m 0755 target/release/ckptfs "$BASE/bin/ckptfs"
B=$BASE/bin/ckptfs
GIT="git -c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false -c safe.directory=*"

echo "generating a $SCALE room..." >&2
python3 "$GEN" gen "$BASE/src" --scale "$SCALE" >/dev/null
(cd "$BASE/src" && $GIT init -q && $GIT add -A && $GIT commit -qm base)
chown -R "$U:$U" "$BASE/src"
cp -a "$BASE/src" "$BASE/root/room"
cp -a "$BASE/src" "$BASE/user/room"
chown "$U:$U" "$BASE/user"
rm -rf "$BASE/src"

# as MODE (root|user): ckptfs ARGS, both through runuser and env -i (the same start-up cost);
# the account's commands start in its delegated cgroup.
ck() {
    local mode=$1; shift
    if [ "$mode" = root ]; then
        runuser -u root -- env -i PATH=/usr/bin:/bin HOME=/root "$B" "$@"
    else
        sh -c 'echo $$ > "$0"/cgroup.procs && exec "$@"' "$CG" \
            runuser -u "$U" -- env -i PATH=/usr/bin:/bin HOME="/home/$U" "$B" "$@"
    fi
}
now() { date +%s.%N; }
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1; python3 -c "print(f'{$(now) - $t0:.3f}')"; }
median() { python3 -c "import statistics,sys; print(f'{statistics.median(map(float, sys.argv[1:])):.3f}')" "$@"; }

for m in root user; do
    ck $m init "$BASE/$m/store" --root "room=$BASE/$m/room" >/dev/null
    ck $m capture "$BASE/$m/store" -q -m base
    ck $m fork "$BASE/$m/store" main other >/dev/null
done
declare -A R
# The account's namespace first: made after root's workspace, it would hold a copy of it where
# the machine's mounts are private (docs/rootless.md, "The threat model without root").
for m in user root; do R[$m.mount]=$(timed ck $m mount "$BASE/$m/store" --branch main); done
for m in root user; do
    R[$m.gitstatus]=$(timed ck $m exec "$BASE/$m/room" -- $GIT -C "$BASE/$m/room" status --porcelain)
done
for i in 1 2 3; do
    for m in root user; do
        R[$m.gs.$i]=$(timed ck $m exec "$BASE/$m/room" -- $GIT -C "$BASE/$m/room" status --porcelain)
    done
done
for i in $(seq 1 "$TURNS"); do
    for m in root user; do
        ck $m exec "$BASE/$m/room" -- python3 "$GEN" turn "$BASE/$m/room" --seed "$i" >/dev/null
        R[$m.ckpt.$i]=$(timed ck $m checkpoint "$BASE/$m/room" -m "turn $i")
    done
done
for m in root user; do
    R[$m.ckpt]=$(median $(for i in $(seq 1 "$TURNS"); do echo "${R[$m.ckpt.$i]}"; done))
    R[$m.gitagain]=$(median "${R[$m.gs.1]}" "${R[$m.gs.2]}" "${R[$m.gs.3]}")
    R[$m.switch]=$(timed ck $m switch "$BASE/$m/room" --to other)
    R[$m.back]=$(timed ck $m switch "$BASE/$m/room" --to main)
done
for i in 1 2 3; do
    for m in root user; do
        R[$m.sw.$i]=$(timed ck $m switch "$BASE/$m/room" --to other)
        R[$m.bk.$i]=$(timed ck $m switch "$BASE/$m/room" --to main)
    done
done
for m in root user; do
    R[$m.swagain]=$(median "${R[$m.sw.1]}" "${R[$m.bk.1]}" "${R[$m.sw.2]}" "${R[$m.bk.2]}" "${R[$m.sw.3]}" "${R[$m.bk.3]}")
done
WORK="for s in 101 102 103; do python3 $GEN turn ROOM --seed \$s >/dev/null; done; cd ROOM && $GIT add -A && $GIT commit -qm w && python3 -c 'import sqlite3; c=sqlite3.connect(\"state/agent.sqlite\"); c.execute(\"CREATE TABLE IF NOT EXISTS bench(i INTEGER PRIMARY KEY, v TEXT)\"); [ (c.execute(\"INSERT INTO bench(v) VALUES (?)\", (\"x\"*100,)), c.commit()) for _ in range(5000)]'"
for m in root user; do
    R[$m.work]=$(timed ck $m exec "$BASE/$m/room" -- /bin/sh -c "${WORK//ROOM/$BASE/$m/room}")
done
for m in root user; do ck $m umount "$BASE/$m/room" >/dev/null; done

ratio() { python3 -c "print(f'{$2 / $1:.2f}x')"; }
echo
echo "$SCALE room, $TURNS turns ($(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| step | root | without root | without root / root |"
echo "|---|---|---|---|"
row() { echo "| $1 | ${R[root.$2]} s | ${R[user.$2]} s | $(ratio "${R[root.$2]}" "${R[user.$2]}") |"; }
row "mount a workspace" mount
row "first git status (through exec)" gitstatus
row "git status again (through exec; median of 3)" gitagain
row "checkpoint after a turn (median of $TURNS)" ckpt
row "first switch to another checkpoint (parks the tree)" switch
row "first switch back" back
row "switch there or back again (median of 6)" swagain
row "workload (3 turns, git add+commit, 5000 inserts; through exec)" work
