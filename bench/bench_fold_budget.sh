#!/bin/sh
# The agent's next turn after a checkpoint, with and without `mount --fold-budget`, beside the
# same turn in a native directory, in one run (docs/workspaces.md, "The fold budget").
#
#   sh bench/bench_fold_budget.sh [TRANSCRIPT_MIB] [TURNS]     (as root; default 512 MiB, 5 turns;
#                                   uses target/release/ckptfs unless CKPTFS is set)
#
# A room holds a JSONL transcript of TRANSCRIPT_MIB, an 8 MB SQLite database and a 20k-file git
# repository (bench/gen_git_repo.py). Each turn, right after the previous checkpoint: append
# 1 MiB to the transcript, insert 3000 rows in one transaction (sqlite3), `git status`, then
# (ckptfs) a checkpoint. Timed: each step, the checkpoint with its fold. Medians of TURNS.
set -eu
MIB=${1:-512}
TURNS=${2:-5}
B=${CKPTFS:-$(dirname "$0")/../target/release/ckptfs}
T=$(mktemp -d /var/tmp/bench-foldb.XXXXXX)
cleanup() {
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
turn() { # DIR: prints "append_ms insert_ms git_status_ms"
  head -c 1048576 /dev/zero | tr '\0' 'y' > "$T/mib"
  t0=$(date +%s%N); cat "$T/mib" >> "$1/transcript.jsonl"; a=$(ms "$t0")
  t0=$(date +%s%N); sqlite3 "$1/state.db" < "$SQL"; s=$(ms "$t0")
  t0=$(date +%s%N); git -C "$1/repo" status --porcelain >/dev/null; g=$(ms "$t0")
  echo "$a $s $g"
}

make_room "$T/native"
for m in fold budget; do
  cp -a "$T/native" "$T/$m"
  mv "$T/$m" "$T/$m.room"; mkdir -p "$T/$m"; mv "$T/$m.room" "$T/$m/room"
  "$B" init "$T/$m/store" --root "ws=$T/$m/room" >/dev/null
  "$B" capture "$T/$m/store" -q -m initial >/dev/null
done
"$B" mount "$T/fold/store" --branch main >/dev/null
"$B" mount "$T/budget/store" --branch main --fold-budget 4G >/dev/null
for m in fold budget; do "$B" checkpoint "$T/$m/room" --allow-empty -m warm >/dev/null; done
echo "room: transcript $MIB MiB, state.db $(du -h "$T/native/state.db" | cut -f1); $TURNS turns"

na= ni= ng= fa= fi= fg= fc= ba= bi= bg= bc=
i=0
while [ $i -lt "$TURNS" ]; do
  i=$((i + 1))
  set -- $(turn "$T/native"); na="$na $1"; ni="$ni $2"; ng="$ng $3"
  for m in fold budget; do
    set -- $(turn "$T/$m/room")
    t0=$(date +%s%N); "$B" checkpoint "$T/$m/room" -m "turn $i" >/dev/null; c=$(ms "$t0")
    if [ $m = fold ]; then fa="$fa $1"; fi="$fi $2"; fg="$fg $3"; fc="$fc $c"
    else ba="$ba $1"; bi="$bi $2"; bg="$bg $3"; bc="$bc $c"; fi
  done
done
printf '| step (median of %s) | native | ckptfs, fold every checkpoint | ckptfs, --fold-budget 4G |\n' "$TURNS"
printf '|---|---|---|---|\n'
printf '| append 1 MiB to the transcript | %s ms | %s ms | %s ms |\n' "$(echo $na | median)" "$(echo $fa | median)" "$(echo $ba | median)"
printf '| 3000 SQLite inserts (sqlite3, one transaction) | %s ms | %s ms | %s ms |\n' "$(echo $ni | median)" "$(echo $fi | median)" "$(echo $bi | median)"
printf '| git status (20k files) | %s ms | %s ms | %s ms |\n' "$(echo $ng | median)" "$(echo $fg | median)" "$(echo $bg | median)"
printf '| checkpoint (with its fold) | - | %s ms | %s ms |\n' "$(echo $fc | median)" "$(echo $bc | median)"
printf '| upper layer after the last turn | - | %s | %s |\n' \
  "$(du -sh "$T/fold/store/upper/main" 2>/dev/null | cut -f1)" "$(du -sh "$T/budget/store/upper/main" | cut -f1)"
