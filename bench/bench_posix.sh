#!/usr/bin/env bash
# POSIX conformance side by side: pjdfstest on native ext4, kernel overlayfs, fuse-overlayfs and
# a ckptfs workspace, on this machine, in one run. Needs root, pjdfstest (cargo install
# pjdfstest) and fuse-overlayfs. Prints one line per filesystem: passed / failed / skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q
B=$PWD/target/release/ckptfs
CONF=$PWD/tests/data/pjdfstest.toml
PJD=$(command -v pjdfstest || echo "$HOME/.cargo/bin/pjdfstest")
T=$(mktemp -d /tmp/ckptfs-posix.XXXXXX)
cleanup() {
    "$B" umount "$T/ws" >/dev/null 2>&1 || true
    for m in "$T/kov" "$T/fov"; do umount -l "$m" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT

count() { # name dir
    local log="$T/$1.log"
    (cd "$2" && "$PJD" -c "$CONF" -p "$2" >"$log" 2>&1) || true
    printf '%-16s passed %4d  failed %3d  skipped %3d\n' "$1" \
        "$(grep -cE ' ok$' "$log")" "$(grep -cE ' FAILED$' "$log")" "$(grep -cE ' skipped$' "$log")"
}

mkdir -p "$T"/{native,lower,u1,w1,kov,u2,w2,fov,ws}
echo seed >"$T/lower/seed"
count native "$T/native"
mount -t overlay overlay -o "lowerdir=$T/lower,upperdir=$T/u1,workdir=$T/w1" "$T/kov"
count kernel-overlayfs "$T/kov"
fuse-overlayfs -o "lowerdir=$T/lower,upperdir=$T/u2,workdir=$T/w2" "$T/fov"
count fuse-overlayfs "$T/fov"
"$B" init "$T/store" --root "ws=$T/ws" >/dev/null
echo seed >"$T/ws/seed"
"$B" capture "$T/store" >/dev/null
"$B" mount "$T/store" --branch main >/dev/null
count ckptfs-workspace "$T/ws"
