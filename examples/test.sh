#!/usr/bin/env bash
# Runs every test: unit tests, integration tests of the CLI, and real FUSE / overlay mounts.
# Needs root (mounts) and /dev/fuse; .ci/run installs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --all-targets -- --test-threads=2
