#!/bin/sh
# The agent's next turn after a checkpoint, with and without `mount --fold-budget`, beside the
# same turn in a native directory, in one run (docs/workspaces.md, "The fold budget").
#
#   sh bench/bench_fold_budget.sh [TRANSCRIPT_MIB] [TURNS] [BULK_MIB] [BUDGET]
#        (as root; default 512 MiB, 5 turns, no bulk, budget 4G; uses target/release/ckptfs
#        unless CKPTFS is set)
#
# Four places: native, kernel overlayfs over a plain copy (its upper never folded), a workspace
# that folds at every checkpoint, a workspace mounted with --fold-budget BUDGET.
# A room holds a JSONL transcript of TRANSCRIPT_MIB, an 8 MB SQLite database and a 20k-file git
# repository (bench/gen_git_repo.py). Each turn, right after the previous checkpoint: append
# 1 MiB to the transcript, insert 3000 rows in one transaction (sqlite3), `git status`, write
# BULK_MIB of new files (a build's output, a download: written once), then (ckptfs) a
# checkpoint. Timed: each step, the checkpoint with its fold. Medians and worst of TURNS; the
# budget column also counts its folds (past BUDGET, each keeps the hot set). Per-turn lines go
# to stderr.
set -eu
MIB=${1:-512}
TURNS=${2:-5}
BULK=${3:-0}
BUDGET=${4:-4G}
B=${CKPTFS:-$(dirname "$0")/../target/release/ckptfs}
T=$(mktemp -d /var/tmp/bench-foldb.XXXXXX)
cleanup() {
  umount "$T/ovl/room" 2>/dev/null || true
  for m in fold budget; do "$B" umount "$T/$m/room" >/dev/null 2>&1 || true; done
  rm -rf "$T" "${SQL:-}"
}
trap cleanup EXIT
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

make_room() {
  mkdir -p "$1"
  python3 - "$1" "$MIB" <<'PY'
import os, sys, sqlite3
room, mib = sys.argv[1], int(sys.argv[2])
line = b'{"role":"assistant","content":"' + b"x" * 200 + b'"}\n'
with open(os.path.join(room, "transcript.jsonl"), "wb") as f:
    for _ in range(mib * (1 << 20) // len(line)):
        f.write(line)
db = sqlite3.connect(os.path.join(room, "state.db"))
db.execute("create table t (id integer primary key, v text)")
db.executemany("insert into t (v) values (?)", [("v" * 100,)] * 70000)
db.commit()
PY
  python3 "$(dirname "$0")/gen_git_repo.py" "$1/repo" --files 20000 --commits 20 >/dev/null
}

SQL=$(mktemp)
{ echo "BEGIN;"; i=0; while [ $i -lt 3000 ]; do echo "INSERT INTO t (v) VALUES ('$(printf '%0100d' $i)');"; i=$((i + 1)); done; echo "COMMIT;"; } > "$SQL"
turn() { # DIR N: prints "append_ms insert_ms git_status_ms"
  head -c 1048576 /dev/zero | tr '\0' 'y' > "$T/mib"
  t0=$(date +%s%N); cat "$T/mib" >> "$1/transcript.jsonl"; a=$(ms "$t0")
  t0=$(date +%s%N); sqlite3 "$1/state.db" < "$SQL"; s=$(ms "$t0")
  t0=$(date +%s%N); git -C "$1/repo" status --porcelain >/dev/null; g=$(ms "$t0")
  if [ "$BULK" -gt 0 ]; then
    mkdir -p "$1/build"; head -c $((BULK << 20)) /dev/urandom > "$1/build/out-$2.bin"
  fi
  echo "$a $s $g"
}
worst() { tr ' ' '\n' | grep . | sort -n | tail -1; }

make_room "$T/native"
for m in fold budget; do
  cp -a "$T/native" "$T/$m"
  mv "$T/$m" "$T/$m.room"; mkdir -p "$T/$m"; mv "$T/$m.room" "$T/$m/room"
  "$B" init "$T/$m/store" --root "ws=$T/$m/room" >/dev/null
  "$B" capture "$T/$m/store" -q -m initial >/dev/null
done
# Kernel overlayfs over a plain copy, the options a workspace uses, its upper never folded.
mkdir -p "$T/ovl/upper" "$T/ovl/work" "$T/ovl/room"
cp -a "$T/native" "$T/ovl/lower"
mount -t overlay ovl -o "lowerdir=$T/ovl/lower,upperdir=$T/ovl/upper,workdir=$T/ovl/work,redirect_dir=on,metacopy=on,index=on,xino=on" "$T/ovl/room"
"$B" mount "$T/fold/store" --branch main >/dev/null
"$B" mount "$T/budget/store" --branch main --fold-budget "$BUDGET" >/dev/null
for m in fold budget; do "$B" checkpoint "$T/$m/room" --allow-empty -m warm >/dev/null; done
echo "room: transcript $MIB MiB, state.db $(du -h "$T/native/state.db" | cut -f1); $TURNS turns, $BULK MiB written once a turn"

# Before each timed turn: the fold's background teardown done and earlier writes flushed, so
# no column pays for another's.
settle() {
  while find "$T/fold/store/upper/.folded" "$T/budget/store/upper/.folded" -mindepth 1 -maxdepth 1 2>/dev/null | grep -q .; do
    sleep 0.2
  done
  sync
}
na= ni= ng= oa= oi= og= fa= fi= fg= fc= ba= bi= bg= bc= folds=0 kept=
i=0
while [ $i -lt "$TURNS" ]; do
  i=$((i + 1))
  settle; set -- $(turn "$T/native" $i); na="$na $1"; ni="$ni $2"; ng="$ng $3"
  echo "turn $i native: append $1 ms, inserts $2 ms, git status $3 ms" >&2
  settle; set -- $(turn "$T/ovl/room" $i); oa="$oa $1"; oi="$oi $2"; og="$og $3"
  echo "turn $i overlayfs: append $1 ms, inserts $2 ms, git status $3 ms" >&2
  for m in fold budget; do
    settle; set -- $(turn "$T/$m/room" $i)
    t0=$(date +%s%N); "$B" checkpoint "$T/$m/room" -m "turn $i" --json > "$T/ck.json"; c=$(ms "$t0")
    echo "turn $i $m: append $1 ms, inserts $2 ms, git status $3 ms, checkpoint $c ms$(grep -q '"folded": true' "$T/ck.json" && echo ', folded')" >&2
    if [ $m = fold ]; then fa="$fa $1"; fi="$fi $2"; fg="$fg $3"; fc="$fc $c"
    else
      ba="$ba $1"; bi="$bi $2"; bg="$bg $3"; bc="$bc $c"
      if grep -q '"folded": true' "$T/ck.json"; then
        folds=$((folds + 1))
        kept="$kept $(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["fold"]; print("%d/%dMiB" % (f["kept_bytes"] >> 20, f["upper_bytes"] >> 20))' "$T/ck.json")"
      fi
    fi
  done
done
row() { # NAME NATIVE OVERLAY FOLD BUDGET (lists of ms)
  printf '| %s | %s (%s) ms | %s (%s) ms | %s (%s) ms | %s (%s) ms |\n' "$1" "$(echo $2 | median)" "$(echo $2 | worst)" \
    "$(echo $3 | median)" "$(echo $3 | worst)" "$(echo $4 | median)" "$(echo $4 | worst)" "$(echo $5 | median)" "$(echo $5 | worst)"
}
printf '| step: median (worst) of %s turns | native | kernel overlayfs | ckptfs, fold every checkpoint | ckptfs, --fold-budget %s |\n' "$TURNS" "$BUDGET"
printf '|---|---|---|---|---|\n'
row "append 1 MiB to the transcript" "$na" "$oa" "$fa" "$ba"
row "3000 SQLite inserts (sqlite3, one transaction)" "$ni" "$oi" "$fi" "$bi"
row "git status (20k files)" "$ng" "$og" "$fg" "$bg"
printf '| checkpoint (with its fold) | - | - | %s (%s) ms | %s (%s) ms |\n' "$(echo $fc | median)" "$(echo $fc | worst)" "$(echo $bc | median)" "$(echo $bc | worst)"
printf '| folds (kept/upper at each) | - | - | %s | %s:%s |\n' "$TURNS" "$folds" "${kept:- none}"
printf '| upper layer after the last turn | - | %s | %s | %s |\n' "$(du -sh "$T/ovl/upper" | cut -f1)" \
  "$(du -sh "$T/fold/store/upper/main" 2>/dev/null | cut -f1)" "$(du -sh "$T/budget/store/upper/main" | cut -f1)"
printf '| store after the last turn | - | - | %s | %s |\n' \
  "$(du -sh "$T/fold/store/objects" | cut -f1)" "$(du -sh "$T/budget/store/objects" | cut -f1)"
