#!/usr/bin/env bash
# Runs every test: unit tests, CLI integration tests, and tests on real FUSE and overlay mounts.
# Run as root (tests mount filesystems; /dev/fuse must exist).
set -euo pipefail
cd "$(dirname "$0")/.."
./examples/setup-deps.sh
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
    echo "installing pjdfstest (POSIX conformance suite used by the workspace tests)"
    cargo install --locked --quiet pjdfstest
fi
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --all-targets -- --test-threads=2
