#!/usr/bin/env bash
# Mutation testing of the safety-critical modules (docs/testing.md, "Mutation testing").
#
#   scripts/mutants.sh [MODULE...]      default: every module below
#   scripts/mutants.sh --list           the modules and the tests each runs against
#   MUTANTS_ARGS="--in-place" scripts/mutants.sh ...   extra cargo-mutants arguments (--in-place
#                                       mutates this checkout and reuses its target/: use a
#                                       spare clone; split on spaces, not globbed, so a -F
#                                       regex spells a space \s)
#
# For each module, cargo-mutants (https://mutants.rs) makes every small plausible bug it can
# (a function returning a default, a condition negated, an operator swapped) and runs the
# tests that cover that module; a mutant the tests pass is "missed". Results go to
# target/mutants/MODULE/ (mutants.out/outcomes.json, caught.txt, missed.txt) and one table
# line per module is printed. Needs `cargo install cargo-mutants --locked`. Slow: each
# mutant is an incremental build and a test run (minutes per module on two cores).
set -euo pipefail
cd "$(dirname "$0")/.."

# MODULE|files (comma-separated globs)|cargo test arguments (after `cargo test`)
MODULES=(
  "safe|src/fs/safe.rs|--lib -- fs::safe"
  "atomic|src/fs/atomic.rs|--lib --test it -- fs::atomic store::recover store::capture_faults::fault_injection health::powerloss::the_power health::powerloss::a_capture"
  "crypto|src/remote/crypto.rs|--lib -- remote::"
  "pack|src/remote/pack.rs|--lib -- remote::"
  "object|src/store/object.rs,src/store/object/*.rs|--lib -- store::object"
  "upper|src/ingest/upper/*.rs|--test it -- workspace::dirty workspace::lifecycle view::inodes_stable store::hardlinks workspace::snapshots hostile::workspace::a_fifo_fails_only hostile::deep::a_hard_link_over"
  "fold|src/workspace/fold.rs|--test it -- workspace::fold"
  "restore|src/transfer/restore/*.rs|--test it -- store::restore store::recover hostile::restore merge::workspace::hard_links"
)

if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${MODULES[@]}" | column -t -s '|'
  exit 0
fi
command -v cargo-mutants >/dev/null || {
  echo "cargo-mutants is not installed: cargo install cargo-mutants --locked" >&2
  exit 1
}
want=("$@")
printf '%-10s %7s %7s %7s %9s\n' module caught missed timeout unviable
for m in "${MODULES[@]}"; do
  IFS='|' read -r name files args <<<"$m"
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then
    continue
  fi
  out="target/mutants/$name"
  mkdir -p "$out"
  fargs=()
  IFS=',' read -ra globs <<<"$files"
  for g in "${globs[@]}"; do fargs+=(--file "$g"); done
  set -f
  # shellcheck disable=SC2086
  cargo mutants --no-shuffle --timeout-multiplier 3 --output "$out" ${MUTANTS_ARGS:-} "${fargs[@]}" \
    -- $args >"$out/log.txt" 2>&1 || true
  set +f
  mo="$out/mutants.out"
  count() { if [ -f "$mo/$1.txt" ]; then grep -c . "$mo/$1.txt" || true; else echo 0; fi; }
  printf '%-10s %7s %7s %7s %9s\n' "$name" "$(count caught)" "$(count missed)" \
    "$(count timeout)" "$(count unviable)"
done
# A test binary cargo-mutants kills at its timeout cannot run its drops: its mounts stay.
if grep -q ckptfs /proc/mounts; then
  echo "warning: ckptfs mounts are left (a timed-out test was killed?): grep ckptfs /proc/mounts," >&2
  echo "then ckptfs umount or umount -l each before removing its directory" >&2
fi
