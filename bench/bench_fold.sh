#!/bin/sh
# Upper-layer lifecycle figures (docs/workspaces.md), one run, side by side: per turn of the
# generated room, the checkpoint with its fold (nobody inside) against the checkpoint whose fold
# waits (a shell inside), the bytes left in the upper layer after each, and switch times.
#
#   sh bench/bench_fold.sh [small|tiny|large] [TURNS]     (as root; uses target/debug/ckptfs
#                                                            unless CKPTFS is set)
set -eu
SCALE=${1:-small}
TURNS=${2:-5}
B=${CKPTFS:-$(dirname "$0")/../target/debug/ckptfs}
GEN=${GEN_ROOM:-/work/shared/bench/gen_room.py}
T=$(mktemp -d)
trap '"$B" umount "$T/room" >/dev/null 2>&1 || true; umount -l "$T/room" 2>/dev/null || true; kill "$HOLD" 2>/dev/null || true; mountpoint -q "$T/room" || rm -rf "$T"' EXIT
HOLD=
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
upper() { du -sk "$T/store/upper/main" 2>/dev/null | cut -f1; }

python3 "$GEN" gen "$T/room" --scale "$SCALE" >/dev/null
"$B" init "$T/store" --root "ws=$T/room" >/dev/null
"$B" capture "$T/store" -m initial >/dev/null
"$B" mount "$T/store" --branch main >/dev/null
echo "room: $(find "$T/room" -type f | wc -l) files, $(du -sh "$T/room" | cut -f1)"
echo "turn  mode   checkpoint ms  command ms (checkpoint+fold)  folded  upper KiB after"
i=0
while [ $i -lt "$TURNS" ]; do
  i=$((i + 1))
  for mode in fold held; do
    python3 "$GEN" turn "$T/room" --seed "$i$([ $mode = fold ] && echo 1 || echo 2)" >/dev/null
    if [ $mode = held ]; then
      (cd "$T/room" && exec sleep 600) & HOLD=$!
      sleep 0.2
    fi
    t0=$(date +%s%N)
    out=$("$B" checkpoint "$T/room" -m "turn $i $mode" --json)
    dt=$(ms "$t0")
    read -r ck folded <<EOT
$(printf '%s' "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["elapsed_ms"], j["fold"]["folded"])')
EOT
    printf '%-5s %-6s %13s  %28s  %-6s  %s\n' "$i" "$mode" "$ck" "$dt" "$folded" "$(upper)"
    if [ $mode = held ]; then kill "$HOLD"; wait "$HOLD" 2>/dev/null || true; HOLD=; fi
  done
done
"$B" fork "$T/store" main --name other >/dev/null
for k in 1 2 3; do
  t0=$(date +%s%N); "$B" switch "$T/room" --to other >/dev/null; a=$(ms "$t0")
  t0=$(date +%s%N); "$B" switch "$T/room" --to main >/dev/null; b=$(ms "$t0")
  echo "switch main->other $a ms, other->main $b ms"
done
# The fold's background remover may still be at work: wait for it before measuring.
while [ -n "$(ls -A "$T/store/upper/.folded" 2>/dev/null)" ]; do sleep 0.2; done
echo "store: $(du -sh "$T/store" | cut -f1) (du -sx: $(du -sxh "$T/store" | cut -f1)); room: $(du -sh "$T/room" | cut -f1)"
