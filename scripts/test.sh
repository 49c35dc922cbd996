#!/usr/bin/env bash
# Runs every test: unit tests, CLI integration tests, and tests on real FUSE and overlay mounts.
# Run as root (tests mount filesystems; /dev/fuse must exist).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
if ! command -v pjdfstest >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/pjdfstest" ]; then
    echo "installing pjdfstest (POSIX conformance suite used by the workspace tests)"
    cargo install --locked --quiet pjdfstest
fi
# Garage, the S3 object store the remote tests start on loopback (tests/it/support/garage.rs). Its
# build takes about 14 minutes on 2 cores: done once, skipped when this version is installed.
GARAGE_VERSION=2.5.0
garage_bin=$(command -v garage || echo "$HOME/.cargo/bin/garage")
if ! "$garage_bin" --version 2>/dev/null | grep -q "cargo:$GARAGE_VERSION "; then
    echo "installing garage $GARAGE_VERSION (S3 object store used by the remote tests; ~14 min once)"
    cargo install --locked --quiet garage --version "$GARAGE_VERSION"
fi
export PATH="$HOME/.cargo/bin:$PATH"
cargo test --all-targets -- --test-threads=2
