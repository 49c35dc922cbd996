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
# repository (bench/gen_git_repo.py) and a 240-file C project. Each turn, right after the
# previous checkpoint: append 1 MiB to the transcript, insert 3000 rows in one transaction
# (sqlite3), `git status`, `rm -rf` the node_modules the last turn unpacked, unpack a 9.4k-file
# node_modules (tar), `make -j2` the C project from clean, write BULK_MIB of new files (a
# build's output, a download: written once), then (ckptfs) a checkpoint. Timed: each step, the checkpoint with its fold. Medians and worst of TURNS; the
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
  # A C project of 240 files (`make -j2` every turn, from clean).
  python3 - "$1/proj" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d)
for i in range(240):
    body = "".join(f"int f{i}_{j}(int x) {{ return x * {j} + {i}; }}\n" for j in range(40))
    open(os.path.join(d, f"f{i}.c"), "w").write(body)
open(os.path.join(d, "Makefile"), "w").write(
    "OBJS := $(patsubst %.c,%.o,$(wildcard *.c))\nall: $(OBJS)\n%.o: %.c\n\t$(CC) -O1 -c $< -o $@\n"
    "clean:\n\trm -f *.o\n")
PY
}

# node_modules as an agent unpacks it: 9.4k small files in 940 packages.
python3 "$(dirname "$0")/gen_node_modules.py" "$T/nm.tar"
SQL=$(mktemp)
{ echo "BEGIN;"; i=0; while [ $i -lt 3000 ]; do echo "INSERT INTO t (v) VALUES ('$(printf '%0100d' $i)');"; i=$((i + 1)); done; echo "COMMIT;"; } > "$SQL"
turn() { # DIR N: prints "append insert git_status rm_node_modules unpack make" (ms)
  head -c 1048576 /dev/zero | tr '\0' 'y' > "$T/mib"
  t0=$(date +%s%N); cat "$T/mib" >> "$1/transcript.jsonl"; a=$(ms "$t0")
  t0=$(date +%s%N); sqlite3 "$1/state.db" < "$SQL"; s=$(ms "$t0")
  t0=$(date +%s%N); git -C "$1/repo" status --porcelain >/dev/null; g=$(ms "$t0")
  # The node_modules the last turn unpacked (in the lower layer since its checkpoint).
  r=""; if [ -d "$1/node_modules" ]; then t0=$(date +%s%N); rm -rf "$1/node_modules"; r=$(ms "$t0"); fi
  t0=$(date +%s%N); tar -xf "$T/nm.tar" -C "$1"; u=$(ms "$t0")
  make -s -C "$1/proj" clean >/dev/null
  t0=$(date +%s%N); make -s -C "$1/proj" -j2 >/dev/null; m=$(ms "$t0")
  if [ "$BULK" -gt 0 ]; then
    mkdir -p "$1/build"; head -c $((BULK << 20)) /dev/urandom > "$1/build/out-$2.bin"
  fi
  echo "$a $s $g ${r:--} $u $m"
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
# Per place (n native, o overlayfs, f fold, b budget) and step: the list of ms.
for p in n o f b; do for k in a s g r u m c; do eval "L_${p}_$k="; done; done
folds=0 kept=
keep() { # PLACE a s g r u m [c]
  p=$1; shift
  for k in a s g r u m c; do
    [ $# -gt 0 ] || break
    [ "$1" = - ] || eval "L_${p}_$k=\"\$L_${p}_$k $1\""
    shift
  done
}
i=0
while [ $i -lt "$TURNS" ]; do
  i=$((i + 1))
  settle; set -- $(turn "$T/native" $i); keep n "$@"
  echo "turn $i native: append $1 ms, inserts $2 ms, git status $3 ms, rm $4 ms, unpack $5 ms, make $6 ms" >&2
  settle; set -- $(turn "$T/ovl/room" $i); keep o "$@"
  echo "turn $i overlayfs: append $1 ms, inserts $2 ms, git status $3 ms, rm $4 ms, unpack $5 ms, make $6 ms" >&2
  for m in fold budget; do
    settle; set -- $(turn "$T/$m/room" $i)
    t0=$(date +%s%N); "$B" checkpoint "$T/$m/room" -m "turn $i" --json > "$T/ck.json"; c=$(ms "$t0")
    echo "turn $i $m: append $1 ms, inserts $2 ms, git status $3 ms, rm $4 ms, unpack $5 ms, make $6 ms, checkpoint $c ms$(grep -q '"folded": true' "$T/ck.json" && echo ', folded')" >&2
    if [ $m = fold ]; then keep f "$@" "$c"
    else
      keep b "$@" "$c"
      if grep -q '"folded": true' "$T/ck.json"; then
        folds=$((folds + 1))
        kept="$kept $(python3 -c 'import json,sys; f=json.load(open(sys.argv[1]))["fold"]; print("%d/%dMiB" % (f["kept_bytes"] >> 20, f["upper_bytes"] >> 20))' "$T/ck.json")"
      fi
    fi
  done
done
cell() { eval "v=\$L_$1_$2"; echo "$(echo $v | median) ($(echo $v | worst))"; }
row() { # NAME STEP
  printf '| %s | %s ms | %s ms | %s ms | %s ms | %sx |\n' "$1" "$(cell n $2)" "$(cell o $2)" "$(cell f $2)" "$(cell b $2)" \
    "$(eval "echo \$L_b_$2" | median | awk -v n="$(eval "echo \$L_n_$2" | median)" '{ printf "%.2f", (n > 0 ? $1 / n : 0) }')"
}
printf '| step: median (worst) of %s turns | native | kernel overlayfs | ckptfs, fold every checkpoint | ckptfs, --fold-budget %s | budget / native |\n' "$TURNS" "$BUDGET"
printf '|---|---|---|---|---|---|\n'
row "unpack node_modules (9.4k files)" u
row "make -j2 of 240 C files" m
row "git status (20k files)" g
row "rm -rf node_modules (the last turn's)" r
row "append 1 MiB to the transcript" a
row "3000 SQLite inserts (sqlite3, one transaction)" s
printf '| checkpoint (with its fold) | - | - | %s ms | %s ms | |\n' "$(cell f c)" "$(cell b c)"
printf '| folds (kept/upper at each) | - | - | %s | %s:%s | |\n' "$TURNS" "$folds" "${kept:- none}"
printf '| upper layer after the last turn | - | %s | %s | %s | |\n' "$(du -sh "$T/ovl/upper" | cut -f1)" \
  "$(du -sh "$T/fold/store/upper/main" 2>/dev/null | cut -f1)" "$(du -sh "$T/budget/store/upper/main" | cut -f1)"
printf '| store after the last turn | - | - | %s | %s | |\n' \
  "$(du -sh "$T/fold/store/objects" | cut -f1)" "$(du -sh "$T/budget/store/objects" | cut -f1)"
