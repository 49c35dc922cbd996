#!/bin/sh
# A runner built on `ckptfs turn` (docs/runner.md): a fake agent (fake_agent.py: a JSONL
# transcript, file edits, SQLite) runs several turns; one fails and is retried; then a
# branch forks from an earlier turn and the session resumes there; then a simulated
# upgrade of the agent makes the next turn refuse, until the change is accepted.
#
#   cargo build && sudo examples/runner.sh [WORKDIR]     (root: FUSE, overlayfs, cgroups)
#
# CKPTFS names the binary (default: ckptfs on PATH, else target/debug/ckptfs). The agent runs
# as AGENT_USER (default nobody), never as root: it owns the roots, and `ckptfs turn` runs
# COMMAND as the owner of the workspace's root (docs/runner.md, "Who the agent runs as").
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
CKPTFS=${CKPTFS:-$(command -v ckptfs || echo "$HERE/../target/debug/ckptfs")}
WORK=${1:-$(mktemp -d /tmp/ckptfs-runner.XXXXXX)}
AGENT_USER=${AGENT_USER:-nobody}
STORE=$WORK/store ROOM=$WORK/room HOMEDIR=$WORK/agent-home REPLY=$WORK/out/reply.json
AGENT=$WORK/bin/fake-agent
say() { printf '\n== %s\n' "$*"; }
cleanup() { "$CKPTFS" umount "$ROOM" >/dev/null 2>&1 || true; }
trap cleanup EXIT

say "a store with two roots: the room and the agent's home; the agent is part of the runtime"
mkdir -p "$ROOM" "$HOMEDIR" "$WORK/bin" "$WORK/out"
chmod 755 "$WORK" "$WORK/bin"
cp "$HERE/fake_agent.py" "$AGENT" && chmod 755 "$AGENT"
echo "# notes" > "$ROOM/notes.md"
# The agent's user owns what it writes: its roots and the directory of its reply.
chown -R "$AGENT_USER" "$ROOM" "$HOMEDIR" "$WORK/out"
"$CKPTFS" init "$STORE" --root "room=$ROOM" --root "agent=$HOMEDIR"
"$CKPTFS" capture "$STORE" -m "empty room"
"$CKPTFS" fingerprint "$STORE" --file "$AGENT" --command "python3 --version"

# One turn: the agent's exit status is the turn's; its reply becomes the checkpoint's meta.
# AGENT_FAIL=1 makes the agent die half-way.
turn() { # turn BRANCH PROMPT [ckptfs turn options...]
  branch=$1 prompt=$2; shift 2
  rm -f "$REPLY"
  "$CKPTFS" turn "$STORE" --branch "$branch" --meta "prompt=$prompt" --meta-file "$REPLY" "$@" \
    -- "$AGENT" --home "$HOMEDIR" --room "$ROOM" --prompt "$prompt" --reply-file "$REPLY" \
    ${AGENT_FAIL:+--fail}
}

say "turns 1 and 2"
turn main "write the plan" --label turn-1
turn main "implement step 1"

say "turn 3 fails: nothing is recorded, its writes wait in the workspace"
rc=0; AGENT_FAIL=1 turn main "implement step 2" --label never || rc=$?
[ "$rc" -ne 0 ] || { echo "the failing turn succeeded?" >&2; exit 1; }
echo "turn exited $rc"
"$CKPTFS" status "$STORE"
"$CKPTFS" log "$STORE" --turns -n 1

say "retry turn 3: the failed writes are set aside in displaced/, the agent runs again"
turn main "implement step 2" --retry

say "fork from turn 1 and resume the session there (same paths, no copying)"
"$CKPTFS" switch "$ROOM" --to turn-1 --name alt
turn alt "try another plan"
echo "transcript on alt: $(cat "$HOMEDIR"/sessions/*.jsonl | wc -l) lines (turn 1, then this one)"

say "a simulated upgrade of the agent: resuming is refused, naming what changed"
echo "# upgraded" >> "$AGENT"
rc=0; turn alt "after the upgrade" || rc=$?
[ "$rc" -ne 0 ] || { echo "the turn ran on a changed runtime?" >&2; exit 1; }
echo "refused (exit $rc); accepting the change on purpose (audited):"
turn alt "after the upgrade" --accept-runtime-change

say "what happened"
"$CKPTFS" log "$STORE" --turns
"$CKPTFS" log "$STORE" --graph
"$CKPTFS" log "$STORE" --meta "prompt=write the plan"
