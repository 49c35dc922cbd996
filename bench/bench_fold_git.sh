#!/bin/sh
# The first `git status` after a checkpoint that folds, beside the same status natively, in
# one run (docs/workspaces.md, "Warming the new overlay").
#
#   sh bench/bench_fold_git.sh [FILES] [TURNS] [DELAYS]
#        (as root; default 20000 files, 6 turns, delays "0 1 3" seconds; uses
#        target/release/ckptfs unless CKPTFS is set; BEFORE=another-ckptfs adds its column)
#
# One repository (bench/gen_git_repo.py) in a native directory and in a workspace (in a
# second one for BEFORE). Each turn: append a line to a tracked file in each, a checkpoint
# of each workspace (it folds: nobody is inside), then for each DELAY: wait DELAY seconds,
# time the first `git status` in each place and a second one right after. The delay stands
# for what comes between a checkpoint and the agent's next command (a model call). Prints a
# Markdown table of medians (ms) and the ratios to native.
set -eu
FILES=${1:-20000}
TURNS=${2:-6}
DELAYS=${3:-0 1 3}
B=${CKPTFS:-$(dirname "$0")/../target/release/ckptfs}
T=$(mktemp -d /var/tmp/bench-foldgit.XXXXXX)
cleanup() {
  "$B" umount "$T/after/room" >/dev/null 2>&1 || true
  [ -n "${BEFORE:-}" ] && "$BEFORE" umount "$T/before/room" >/dev/null 2>&1 || true
  rm -rf "$T"
}
trap cleanup EXIT
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
status_ms() { t0=$(date +%s%N); git -C "$1" status --porcelain >/dev/null; ms "$t0"; }

python3 "$(dirname "$0")/gen_git_repo.py" "$T/native" --files "$FILES" --commits 20 >/dev/null
git -C "$T/native" status >/dev/null
PLACES="after"
[ -n "${BEFORE:-}" ] && PLACES="after before"
for p in $PLACES; do
  bin=$B
  [ "$p" = before ] && bin=$BEFORE
  mkdir -p "$T/$p/room"
  cp -a "$T/native" "$T/$p/room/repo"
  "$bin" init "$T/$p/store" --root "room=$T/$p/room" >/dev/null
  "$bin" capture "$T/$p/store" -m generated >/dev/null
  "$bin" mount "$T/$p/store" --branch main >/dev/null
  git -C "$T/$p/room/repo" status >/dev/null
done

RES=""
for i in $(seq "$TURNS"); do
  for d in $DELAYS; do
    echo "turn $i delay $d" >> "$T/native/README.md"
    sync
    for p in $PLACES; do
      bin=$B
      [ "$p" = before ] && bin=$BEFORE
      echo "turn $i delay $d" >> "$T/$p/room/repo/README.md"
      "$bin" checkpoint "$T/$p/room" -m "turn $i" --json > "$T/ck.json"
      grep -q '"folded": true' "$T/ck.json" || echo "turn $i $p: not folded" >&2
    done
    sleep "$d"
    n1=$(status_ms "$T/native"); n2=$(status_ms "$T/native")
    line="$d native $n1 $n2"
    for p in $PLACES; do
      f1=$(status_ms "$T/$p/room/repo"); f2=$(status_ms "$T/$p/room/repo")
      line="$line $p $f1 $f2"
    done
    echo "turn $i, ${d} s after the checkpoint (first, second status in ms): $line" >&2
    RES="$RES$line
"
  done
done

col() { # DELAY PLACE FIELD(1: first, 2: second)
  printf '%s' "$RES" | awk -v d="$1" -v p="$2" -v f="$3" '$1 == d { for (i = 2; i <= NF; i++) if ($i == p) print $(i + f) }' | tr '\n' ' ' | median
}
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}x')"; }
echo
echo "| ms (median of $TURNS) | native | ckptfs | / native | ckptfs, second status |$( [ -n "${BEFORE:-}" ] && echo ' before | / native |')"
echo "|---|---|---|---|---|$( [ -n "${BEFORE:-}" ] && echo '---|---|')"
for d in $DELAYS; do
  n=$(col "$d" native 1); a=$(col "$d" after 1); a2=$(col "$d" after 2)
  row="| first git status, $d s after a checkpoint that folded | $n | $a | $(ratio "$a" "$n") | $a2 |"
  if [ -n "${BEFORE:-}" ]; then
    b=$(col "$d" before 1)
    row="$row $b | $(ratio "$b" "$n") |"
  fi
  echo "$row"
done
