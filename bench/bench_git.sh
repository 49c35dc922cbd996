#!/usr/bin/env bash
# git at 100k files, side by side in one run (needs root, git, python3, kernel overlayfs).
# Usage: bench/bench_git.sh [FILES] [COMMITS]        (default 100000 files, 400 commits)
#
# Generates one repository (bench/gen_git_repo.py: nested source tree, a real history made
# by git fast-import) and puts it in three places:
#   native    a plain directory
#   overlay   kernel overlayfs over a plain lower copy (cp -a, index refreshed there), upper
#             and work dirs beside it, the options ckptfs uses
#   ckptfs    a workspace: the repository captured into a store and mounted as branch main
# and measures, in each, `git status` (first after mounting, steady = median of 5), `git status
# -uno`, `git status` with core.untrackedCache (first and steady), `git add -A && git commit`
# of a 100-file change, `find . | wc -l` and `du -s`, warm page cache unless said otherwise;
# for ckptfs also the first `git status` after `switch` away and back, and after a remount
# and after a fold once the lower view's background warm-up (src/view/warm.rs) is done.
# `mount --branch` waits for that warm-up (--warm-wait); the rows "--warm-wait 0" show a
# mount that does not, and the first `git status` right after it.
# Prints a Markdown table (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-100000}
COMMITS=${2:-400}
if [ -n "${CKPTFS_BIN:-}" ]; then
    B=$CKPTFS_BIN # (a quick check of this script with another build)
else
    cargo build --release -q
    B=$PWD/target/release/ckptfs
fi
BASE=${BENCH_DIR:-/tmp/ckptfs-gitbench}
GITC=(-c user.name=b -c user.email=b@b -c gc.auto=0 -c maintenance.auto=false)

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.3f}')"; }
timeit() { local t0; t0=$(now); "$@" >/dev/null 2>&1; secs "$t0" "$(now)"; }
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
steady() { local r=(); for _ in 1 2 3 4 5; do r+=("$(timeit "$@")"); done; median "${r[@]}"; }

cleanup() {
    "$B" umount "$BASE/ckptfs/repo" >/dev/null 2>&1 || true
    umount -l "$BASE/overlay/repo" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
rm -rf "$BASE"
mkdir -p "$BASE"/{native,overlay,ckptfs}
t0=$(now)
python3 bench/gen_git_repo.py "$BASE/native/repo" --files "$FILES" --commits "$COMMITS"
echo "generated in $(secs "$t0" "$(now)") s" >&2

# overlay: lower = a copy; its index refreshed on the lower itself first (what an agent's repo
# has), then the overlay mounted with ckptfs's options.
O=$BASE/overlay
cp -a "$BASE/native/repo" "$O/lower"
git -C "$O/lower" status >/dev/null
mkdir -p "$O/upper" "$O/work" "$O/repo"
ovl_mount() {
    mount -t overlay overlay -o "lowerdir=$O/lower,upperdir=$O/upper,workdir=$O/work,redirect_dir=on,index=on,metacopy=on,xino=on" "$O/repo"
}
ovl_mount

# ckptfs: capture the repository and mount it as the workspace of branch main.
C=$BASE/ckptfs
cp -a "$BASE/native/repo" "$C/repo"
"$B" init "$C/store" --root "repo=$C/repo" >/dev/null
"$B" capture "$C/store" -m generated >/dev/null
"$B" mount "$C/store" --branch main >/dev/null
git -C "$C/repo" status >/dev/null
"$B" checkpoint "$C/repo" -m "after the first status" >/dev/null 2>&1 || true

declare -A R
measure() { # name dir remount-command
    local n=$1 d=$2 remount=$3
    git -C "$d" config core.untrackedCache false
    git -C "$d" status >/dev/null
    eval "$remount"
    R[$n,first]=$(timeit git -C "$d" status)
    R[$n,steady]=$(steady git -C "$d" status)
    R[$n,uno]=$(steady git -C "$d" status -uno)
    git -C "$d" config core.untrackedCache true
    git -C "$d" status >/dev/null
    eval "$remount"
    R[$n,uc_first]=$(timeit git -C "$d" status)
    R[$n,uc_steady]=$(steady git -C "$d" status)
    R[$n,find]=$(steady sh -c "find '$d' | wc -l")
    R[$n,du]=$(steady du -s "$d")
    sync
    echo 3 >/proc/sys/vm/drop_caches
    R[$n,cold]=$(timeit git -C "$d" status)
    git -C "$d" ls-files | awk 'NR % 997 == 0' | head -100 >"$BASE/$n.edit"
    while read -r f; do echo "// edited" >>"$d/$f"; done <"$BASE/$n.edit"
    R[$n,commit]=$(timeit sh -c "cd '$d' && git add -A && git ${GITC[*]} commit -qm edit")
}

measure native "$BASE/native/repo" ":"
measure overlay "$O/repo" "umount $O/repo && ovl_mount"
ck_remount() {
    "$B" checkpoint "$C/repo" -m settle >/dev/null 2>&1 || true
    "$B" umount "$C/repo" >/dev/null
    R[ckptfs,mount]=$(timeit "$B" mount "$C/store" --branch main)
}
measure ckptfs "$C/repo" "ck_remount"

# Once the lower view has warmed the base (src/view/warm.rs: it lists every directory in the
# background after a mount, a fold or a switch to another checkpoint): after a checkpoint, an
# unmount and a mount, and after a checkpoint that folded a 100-file edit into a new base.
warmed() { cat "$C"/store/run/views/*.log 2>/dev/null | grep -c 'warmed ' || true; }
wait_warm() { # the count of "warmed" lines before
    local t0; t0=$(now)
    until [ "$(warmed)" -gt "$1" ]; do sleep 0.1; done
    W+=("$(secs "$t0" "$(now)")")
}
W=()
git -C "$C/repo" config core.untrackedCache false
"$B" checkpoint "$C/repo" -m settle >/dev/null 2>&1 || true
"$B" umount "$C/repo" >/dev/null
n=$(warmed)
RUST_LOG=ckptfs::view::warm=info "$B" mount "$C/store" --branch main >/dev/null
wait_warm "$n"
R[ckptfs,warm_first]=$(timeit git -C "$C/repo" status)
git -C "$C/repo" ls-files | awk 'NR % 991 == 0' | head -100 >"$BASE/fold.edit"
while read -r f; do echo "// folded" >>"$C/repo/$f"; done <"$BASE/fold.edit"
git -C "$C/repo" status >/dev/null
n=$(warmed)
"$B" checkpoint "$C/repo" -m "a 100-file edit, folded" >/dev/null
wait_warm "$n"
R[ckptfs,fold]=$(timeit git -C "$C/repo" status)

# A mount that does not wait for the warm-up, and the first status right after it.
"$B" checkpoint "$C/repo" -m settle >/dev/null 2>&1 || true
"$B" umount "$C/repo" >/dev/null
R[ckptfs,mount_nowait]=$(timeit "$B" mount "$C/store" --branch main --warm-wait 0)
R[ckptfs,first_nowait]=$(timeit git -C "$C/repo" status)
git -C "$C/repo" config core.untrackedCache true

# After a switch away and back (same checkpoint).
"$B" checkpoint "$C/repo" -m committed >/dev/null 2>&1 || true
head=$("$B" log "$C/store" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
"$B" fork "$C/store" "$head" --name alt >/dev/null
git -C "$C/repo" status >/dev/null
"$B" switch "$C/repo" --to alt --checkpoint-first >/dev/null
"$B" switch "$C/repo" --to main --checkpoint-first >/dev/null
R[ckptfs,switch]=$(timeit git -C "$C/repo" status)

row() { printf '| %s | %s | %s | %s |\n' "$1" "${R[native,$2]:--}" "${R[overlay,$2]:--}" "${R[ckptfs,$2]:--}"; }
files=$(git -C "$BASE/native/repo" ls-files | wc -l)
dirs=$(find "$BASE/native/repo" -path '*/.git' -prune -o -type d -print | wc -l)
size=$(du -sh "$BASE/native/repo" | cut -f1)
echo
echo "$files files, $dirs directories, $size with .git, $COMMITS commits; $(nproc) cores, kernel $(uname -r)"
echo
echo "| seconds | native | kernel overlayfs | ckptfs workspace |"
echo "|---|---|---|---|"
row "mount --branch, after umount (waits for the warm-up)" mount
row "git status, first after mount" first
row "mount --branch --warm-wait 0, after umount" mount_nowait
row "git status, first after mount --warm-wait 0" first_nowait
row "git status, steady" steady
row "git status -uno, steady" uno
row "git status, untrackedCache, first after mount" uc_first
row "git status, untrackedCache, steady" uc_steady
row "git status, first after mount, once the lower view is warm" warm_first
row "git status, first after a checkpoint that folded a 100-file edit, once warm" fold
row "git status, first after switch away and back" switch
row "git status, cold page cache" cold
row "git add -A && git commit, 100 files changed" commit
row "find . \| wc -l" find
row "du -s" du
echo
echo "lower view warm-ups waited for: ${W[*]} s (after the mount, after the fold)"
