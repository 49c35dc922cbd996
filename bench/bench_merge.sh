#!/bin/sh
# Merge figures (docs/merge.md): two branches of a generated room, each with 3 agent turns
# (gen_room.py turn), merged by ckptfs beside git merging the same two histories as git
# repositories, in one run.
#
#   sh bench/bench_merge.sh [large|small|tiny]      (uses target/debug/ckptfs unless CKPTFS
#                                                   is set; a release build is what to quote)
#
# ckptfs: `merge --dry-run` (the plan: base, walk, drivers, nothing stored) and `merge --take
# ours` (recorded: objects, record, ref). git: `merge-tree --write-tree -X ours` (the same
# tree-level merge, objects written, no work tree) and `merge -X ours` into a work tree.
set -eu
SCALE=${1:-large}
B=${CKPTFS:-$(dirname "$0")/../target/debug/ckptfs}
GEN=${GEN_ROOM:-/work/shared/bench/gen_room.py}
T=$(mktemp -d /var/tmp/bench-merge.XXXXXX)
trap 'rm -rf "$T"' EXIT
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
GIT="git --git-dir=$T/g.git -c user.name=b -c user.email=b@b -c gc.auto=0"

python3 "$GEN" gen "$T/a" --scale "$SCALE" >/dev/null
cp -a "$T/a" "$T/b"
"$B" init "$T/store" --root "ws=$T/a" >/dev/null
"$B" capture "$T/store" -q -m base >/dev/null
"$B" fork "$T/store" main feat >/dev/null
$GIT init -q -b main
$GIT --work-tree="$T/a" add -A
$GIT --work-tree="$T/a" commit -q -m base
$GIT branch feat
echo "room: $(find "$T/a" -type f | wc -l) files, $(du -sh "$T/a" | cut -f1)"

for seed in 11 12 13; do
  python3 "$GEN" turn "$T/a" --seed "$seed" >/dev/null
  "$B" capture "$T/store" -q -m "main $seed" >/dev/null
  $GIT --work-tree="$T/a" add -A
  $GIT --work-tree="$T/a" commit -q -m "main $seed"
done
$GIT symbolic-ref HEAD refs/heads/feat
$GIT read-tree feat
for seed in 21 22 23; do
  python3 "$GEN" turn "$T/b" --seed "$seed" >/dev/null
  "$B" capture "$T/store" -q --from "ws=$T/b" -b feat -m "feat $seed" >/dev/null
  $GIT --work-tree="$T/b" add -A
  $GIT --work-tree="$T/b" commit -q -m "feat $seed"
done
$GIT symbolic-ref HEAD refs/heads/main
$GIT read-tree main
$GIT --work-tree="$T/a" update-index -q --refresh >/dev/null || true
echo "changed paths: main $($GIT diff --name-only feat~3 main | wc -l), feat $($GIT diff --name-only feat~3 feat | wc -l)"

sync
t0=$(date +%s%N); "$B" merge "$T/store" feat --dry-run --json >"$T/plan.json" || true; plan=$(ms "$t0")
t0=$(date +%s%N); "$B" merge "$T/store" feat --take ours --json >"$T/merge.json" || true; rec=$(ms "$t0")
t0=$(date +%s%N); $GIT merge-tree --write-tree -X ours main feat >/dev/null || true; mt=$(ms "$t0")
t0=$(date +%s%N); $GIT --work-tree="$T/a" merge -q -X ours --no-edit feat >/dev/null 2>&1 || true; gm=$(ms "$t0")
python3 - "$T/plan.json" "$T/merge.json" <<'PY'
import json, sys
p, m = (json.load(open(f)) for f in sys.argv[1:3])
drivers = {}
for s in p["steps"]:
    if s.get("driver"):
        drivers[s["driver"]] = drivers.get(s["driver"], 0) + 1
print(f"ckptfs plan: {len(p['steps'])} steps, merged by driver {drivers}, "
      f"{len(p['conflicts'])} conflicts ({sorted({c['kind'] for c in p['conflicts']})}); "
      f"recorded: {m['outcome']}")
for c in p["conflicts"]:
    print(f"  conflict {c['kind']}: {c['path']}: {c['detail']}")
PY
echo "ckptfs merge --dry-run:         $plan ms"
echo "ckptfs merge --take ours:       $rec ms"
echo "git merge-tree --write-tree:    $mt ms"
echo "git merge -X ours (work tree):  $gm ms"
