#!/usr/bin/env bash
# Installs the system packages ckptfs and its tests use (Debian/Ubuntu, as root). Idempotent.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v getfattr >/dev/null 2>&1 || need+=(attr)
command -v git >/dev/null 2>&1 || need+=(git)
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
command -v fuse-overlayfs >/dev/null 2>&1 || need+=(fuse-overlayfs)
command -v python3 >/dev/null 2>&1 || need+=(python3)
# The agent CLIs of tests/it/agent come from npm (below).
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
# tests/it/health/powerloss.rs records the system calls of a command (tests/powerloss).
command -v strace >/dev/null 2>&1 || need+=(strace)
# tests/it/support/garage.rs talks S3 to Garage behind ckptfs's back (curl --aws-sigv4).
command -v curl >/dev/null 2>&1 || need+=(curl)
# tests/cli_shell.rs renders the generated man pages (`man -l`, groff's nroff).
command -v man >/dev/null 2>&1 || need+=(man-db)
command -v nroff >/dev/null 2>&1 || need+=(groff-base)
# rusqlite's `session` feature (src/merge/sqlite.rs) generates its SQLite bindings at build
# time with bindgen, which loads libclang (and clang's own headers).
dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "ok installed" || need+=(libclang-dev)
# In /usr/sbin, which a non-root PATH may lack.
has() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
has mkfs.ext4 || need+=(e2fsprogs)
has mkfs.xfs || need+=(xfsprogs)
has mkfs.btrfs || need+=(btrfs-progs)
has fsfreeze || need+=(util-linux)
has setcap || need+=(libcap2-bin)
# tests/it/store/rootless.rs: an ordinary account's namespace maps its subordinate ids.
[ -x /usr/bin/newuidmap ] || need+=(uidmap)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The real agent CLIs `ckptfs agent` drives and tests/it/agent runs (docs/agents.md), at the
# versions the adapters were tested with; skipped when that version is installed.
CODEX_VERSION=0.169.0
CLAUDE_VERSION=2.1.332
npm_pkgs=()
codex --version 2>/dev/null | grep -qx "codex-cli $CODEX_VERSION" || npm_pkgs+=("@openai/codex@$CODEX_VERSION")
claude --version 2>/dev/null | grep -q "^$CLAUDE_VERSION " || npm_pkgs+=("@anthropic-ai/claude-code@$CLAUDE_VERSION")
if [ ${#npm_pkgs[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing agent CLIs: ${npm_pkgs[*]} (as root: npm install -g ${npm_pkgs[*]})" >&2
        exit 1
    fi
    echo "installing: ${npm_pkgs[*]}"
    npm install -g --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
    exit 1
fi
