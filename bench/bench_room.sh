#!/usr/bin/env bash
# The generated agent room in three places, side by side in one run (needs root, kernel
# overlayfs, fuse3, restic, python3). Usage: bench/bench_room.sh [SCALE] [TURNS]
# (default large 10). The figures for issue 19's "large generated room" benchmark.
#
# One room (gen_room.py gen --scale SCALE, seed 1) is put in three places:
#   native    a plain directory, backed up with `restic backup` (a local repository) after
#             every turn: the peer for store bytes
#   overlay   kernel overlayfs over a plain lower copy (cp -a), upper and work dirs beside it,
#             the options a workspace uses (redirect_dir=on,index=on,metacopy=on,xino=on); its
#             upper layer is never folded: what an upper that lives on holds
#   ckptfs    a workspace: the room captured into a store (default options) and mounted as
#             branch main; after every turn `ckptfs checkpoint`, whose fold (nobody inside)
#             empties the upper layer (docs/workspaces.md)
# Each place then gets the same TURNS turns (gen_room.py turn --seed 1..TURNS).
#
# Timed, warm page cache unless said otherwise: `find . | wc -l` and `du -s`, each first after a
# mount (overlay: umount + mount; ckptfs: umount + mount --branch main; native: same as steady),
# steady (median of 5), and `find` with a cold page cache (drop_caches); once on the fresh room
# and once after the turns; the turn itself and what follows it (restic backup, checkpoint with
# its fold), median over the turns. Bytes: the tree's own size (du -sb of the native room),
# ckptfs's upper layer after every checkpoint and its store (without cache/ and upper/) against
# restic's repository before and after the turns, and the overlay's never-folded upper.
# Then, in the workspace only: the first `du -s` and `find` right after a checkpoint's fold, and
# HELD (default 3) more turns with a process inside (its cwd in the room: no fold runs), their
# turn time and the upper they leave, and the checkpoint after it has left (which folds).
# `git status` is not measured: gen_room.py makes no git repository (bench_git.sh covers git).
#
# FOLD_BUDGET=SIZE mounts the workspace with `--fold-budget SIZE`: the fold waits until the upper
# holds more than SIZE, and then keeps the hot set (docs/workspaces.md).
#
# Prints per-turn lines on stderr and two Markdown tables on stdout. Everything is made under
# BENCH_DIR (default /tmp/ckptfs-roombench, several GB at large) and removed at the end unless
# BENCH_KEEP=1. CKPTFS_BIN picks another build (default: target/release/ckptfs, built first).
set -euo pipefail
cd "$(dirname "$0")/.."
SCALE=${1:-large}
TURNS=${2:-10}
GEN=${GEN_ROOM:-$(cd .. && pwd)/shared/bench/gen_room.py}
[ -f "$GEN" ] || GEN=/work/shared/bench/gen_room.py
if [ -n "${CKPTFS_BIN:-}" ]; then
    B=$CKPTFS_BIN
else
    cargo build --release -q
    B=$PWD/target/release/ckptfs
fi
BASE=${BENCH_DIR:-/tmp/ckptfs-roombench}
N=$BASE/native/room O=$BASE/overlay C=$BASE/ckptfs
export RESTIC_PASSWORD=bench RESTIC_REPOSITORY=$BASE/restic

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.3f}')"; }
timeit() { local t0; t0=$(now); "$@" >/dev/null 2>&1; secs "$t0" "$(now)"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
steady() { local r=(); for _ in 1 2 3 4 5; do r+=("$(timeit "$@")"); done; median "${r[@]}"; }
mib() { python3 -c "print(f'{$1 / 1048576:.1f}')"; }
bytes() { du -sb "$@" | cut -f1; }
# Bytes and count of the regular files in a directory (the data an upper layer holds).
files_in() { find "$1" -type f ! -name base.json -printf '%s\n' | awk '{n++; s+=$1} END {printf "%d %d\n", s, n}'; }
# The store's bytes without its rebuildable cache/ and the upper layers (counted apart).
store_bytes() { du -sb --exclude=cache --exclude=upper "$C/store" | cut -f1; }
dropcaches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

ovl_mount() {
    mount -t overlay overlay -o "lowerdir=$O/lower,upperdir=$O/upper,workdir=$O/work,redirect_dir=on,index=on,metacopy=on,xino=on" "$O/room"
}
holder=
cleanup() {
    if [ -n "$holder" ]; then kill "$holder" 2>/dev/null || true; wait "$holder" 2>/dev/null || true; fi
    "$B" umount "$C/room" >/dev/null 2>&1 || true
    umount -l "$O/room" 2>/dev/null || true
    if [ "${BENCH_KEEP:-0}" != 1 ] && ! mountpoint -q "$C/room" && ! mountpoint -q "$O/room"; then
        rm -rf "$BASE"
    fi
}
trap cleanup EXIT
cleanup
rm -rf "$BASE"
mkdir -p "$BASE/native" "$O"/{upper,work,room} "$C"

t0=$(now)
python3 "$GEN" gen "$N" --scale "$SCALE" --seed 1 >/dev/null
echo "generated in $(secs "$t0" "$(now)") s" >&2
cp -a "$N" "$O/lower"
cp -a "$N" "$C/room"
ovl_mount
"$B" init "$C/store" --root "ws=$C/room" >/dev/null
t0=$(now)
"$B" capture -q "$C/store" -m generated >/dev/null
echo "ckptfs capture in $(secs "$t0" "$(now)") s" >&2
"$B" mount "$C/store" --branch main ${FOLD_BUDGET:+--fold-budget "$FOLD_BUDGET"} >/dev/null
t0=$(now)
restic init -q >/dev/null
(cd "$N" && restic backup -q . >/dev/null)
echo "restic first backup in $(secs "$t0" "$(now)") s" >&2
sync
tree0=$(bytes "$N")
store0=$(store_bytes)
restic0=$(bytes "$BASE/restic")

declare -A R
remount() { # place
    case $1 in
        native) : ;;
        overlay) umount "$O/room" && ovl_mount ;;
        ckptfs) "$B" umount "$C/room" >/dev/null && "$B" mount "$C/store" --branch main ${FOLD_BUDGET:+--fold-budget "$FOLD_BUDGET"} >/dev/null ;;
    esac
}
dir_of() { case $1 in native) echo "$N" ;; overlay) echo "$O/room" ;; ckptfs) echo "$C/room" ;; esac; }
walks() { # phase: find/du first after mount, steady, cold find, in every place
    local p d
    for p in native overlay ckptfs; do
        d=$(dir_of "$p")
        remount "$p"
        R[$p,$1,find1]=$(timeit sh -c "cd '$d' && find . | wc -l")
        remount "$p"
        R[$p,$1,du1]=$(timeit du -s "$d")
        R[$p,$1,find]=$(steady sh -c "cd '$d' && find . | wc -l")
        R[$p,$1,du]=$(steady du -s "$d")
        dropcaches
        R[$p,$1,cold]=$(timeit sh -c "cd '$d' && find . | wc -l")
        R[$p,$1,entries]=$(cd "$d" && find . | wc -l)
    done
}
walks fresh

t_native=() t_overlay=() t_ckptfs=() t_restic=() t_ckpt=() t_ckpt_only=() upper_after=()
folds=0 new_bytes=0
for i in $(seq 1 "$TURNS"); do
    t_native+=("$(timeit python3 "$GEN" turn "$N" --seed "$i")")
    t_restic+=("$(timeit sh -c "cd '$N' && restic backup -q .")")
    t_overlay+=("$(timeit python3 "$GEN" turn "$O/room" --seed "$i")")
    t_ckptfs+=("$(timeit python3 "$GEN" turn "$C/room" --seed "$i")")
    t0=$(now)
    "$B" checkpoint "$C/room" -m "turn $i" --json >"$BASE/ckpt.json"
    t_ckpt+=("$(secs "$t0" "$(now)")")
    read -r folded nb ms br <<EOT
$(python3 -c "import json; d=json.load(open('$BASE/ckpt.json')); print(d['fold']['folded'], d['checkpoint']['stats']['new_bytes'], d['elapsed_ms'], d['bytes_read'])")
EOT
    [ "$folded" = True ] && folds=$((folds + 1))
    new_bytes=$((new_bytes + nb))
    t_ckpt_only+=("$ms")
    # The fold's background remover may still be at work on upper/.folded: the upper layer
    # in use is upper/main.
    read -r ub uf <<<"$(files_in "$C/store/upper/main")"
    upper_after+=("$ub")
    echo "turn $i: turn ${t_ckptfs[-1]} s, checkpoint ${t_ckpt[-1]} s (${ms} ms before the fold, $(mib "$br") MiB of files read), folded $folded, new objects $(mib "$nb") MiB, upper after: $uf files, $ub bytes" >&2
done
while [ -n "$(ls -A "$C/store/upper/.folded" 2>/dev/null)" ]; do sleep 0.2; done
sync
tree1=$(bytes "$N")
store1=$(store_bytes)
restic1=$(bytes "$BASE/restic")
read -r oub ouf <<<"$(files_in "$O/upper")"
read -r cub cuf <<<"$(files_in "$C/store/upper/main")"
du_s=$(du -sb "$C/store" | cut -f1) du_sx=$(du -sxb "$C/store" | cut -f1)
max_upper=$(printf '%s\n' "${upper_after[@]}" | sort -n | tail -1)
walks turned

# ckptfs only: the first walk after a checkpoint's fold (the fold mounts a new overlay over the
# new head), then HELD turns with a process inside (its cwd in the room), so no fold runs
# between them: their turn time and the upper they leave; then a checkpoint once it has left.
HELD=${HELD:-3}
python3 "$GEN" turn "$C/room" --seed 1001 >/dev/null
"$B" checkpoint "$C/room" -m "turn before the walk" >/dev/null
R[ckptfs,fold_du]=$(timeit du -s "$C/room")
R[ckptfs,fold_find]=$(timeit sh -c "cd '$C/room' && find . | wc -l")
(cd "$C/room" && exec sleep 3600) &
holder=$!
t_held=() upper_held=()
for i in $(seq 1 "$HELD"); do
    t_held+=("$(timeit python3 "$GEN" turn "$C/room" --seed "$((1001 + i))")")
    "$B" checkpoint "$C/room" -m "held turn $i" --json >"$BASE/ckpt.json"
    read -r hf hms <<<"$(python3 -c "import json; d=json.load(open('$BASE/ckpt.json')); print(d['fold']['folded'], d['elapsed_ms'])")"
    read -r ub uf <<<"$(files_in "$C/store/upper/main")"
    upper_held+=("$ub")
    echo "held turn $i: turn ${t_held[-1]} s, checkpoint ${hms} ms, folded $hf, upper after: $uf files, $ub bytes" >&2
done
kill "$holder"
wait "$holder" 2>/dev/null || true
"$B" checkpoint "$C/room" -m "after the holder left" --json >"$BASE/ckpt.json"
left_folded=$(python3 -c "import json; d=json.load(open('$BASE/ckpt.json')); print(d['fold']['folded'], d['recorded'])")
read -r lub luf <<<"$(files_in "$C/store/upper/main")"

row() { printf '| %s | %s | %s | %s |\n' "$1" "${R[native,$2]}" "${R[overlay,$2]}" "${R[ckptfs,$2]}"; }
echo
echo "$SCALE room: ${R[native,fresh,entries]} entries, $(mib "$tree0") MiB (du -sb); $TURNS turns; $(nproc) cores, kernel $(uname -r), $(findmnt -n -o FSTYPE -T "$BASE")"
echo
echo "| seconds | native | kernel overlayfs | ckptfs workspace |"
echo "|---|---|---|---|"
for ph in fresh turned; do
    w=$([ $ph = fresh ] && echo "fresh room" || echo "after $TURNS turns")
    row "find . \| wc -l, first after mount ($w)" "$ph,find1"
    row "find . \| wc -l, steady ($w)" "$ph,find"
    row "find . \| wc -l, cold page cache ($w)" "$ph,cold"
    row "du -s, first after mount ($w)" "$ph,du1"
    row "du -s, steady ($w)" "$ph,du"
done
echo "| one turn (gen_room.py turn), median of $TURNS | $(median "${t_native[@]}") | $(median "${t_overlay[@]}") | $(median "${t_ckptfs[@]}") |"
echo "| after it: restic backup / checkpoint with its fold, median | $(median "${t_restic[@]}") | - | $(median "${t_ckpt[@]}") (before the fold: $(median "${t_ckpt_only[@]}") ms) |"
echo "| du -s / find, first right after a checkpoint's fold | - | - | ${R[ckptfs,fold_du]} / ${R[ckptfs,fold_find]} |"
echo "| one turn with a process inside (no fold before it), median of $HELD | - | - | $(median "${t_held[@]}") |"
echo
echo "| MiB | tree | restic repository | kernel overlayfs upper | ckptfs store | ckptfs upper |"
echo "|---|---|---|---|---|---|"
echo "| fresh room | $(mib "$tree0") | $(mib "$restic0") | 0 | $(mib "$store0") | 0 |"
echo "| after $TURNS turns | $(mib "$tree1") | $(mib "$restic1") | $(mib "$oub") ($ouf files) | $(mib "$store1") | $(mib "$cub") ($cuf files) |"
echo "| growth over the $TURNS turns | $(mib $((tree1 - tree0))) | $(mib $((restic1 - restic0))) | | $(mib $((store1 - store0))) (new objects: $(mib "$new_bytes")) | |"
echo
echo "ckptfs: $folds of $TURNS checkpoints folded; the largest upper left after a checkpoint: $max_upper bytes; du -sb STORE $du_s, du -sxb $du_sx."
echo "With a process inside, the upper after each of $HELD checkpoints: $(for b in "${upper_held[@]}"; do printf '%s MiB ' "$(mib "$b")"; done)(not folded); the checkpoint once it left: folded, recorded = $left_folded, upper $lub bytes ($luf files)."
