#!/usr/bin/env bash
# The main job on a built-in example, start to finish (as root, on Debian):
# build ckptfs, create a store, capture a sample agent room, look at its history, mount a
# checkpoint read-only and browse it, then work in the room as a live workspace: checkpoint,
# fork, switch branches in place.
#
# Everything lives under $DEMO (default /tmp/ckptfs-demo); run again to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
echo "== building ckptfs (release)"
cargo build --release -q
B=$PWD/target/release/ckptfs
DEMO=${DEMO:-/tmp/ckptfs-demo}
ROOM=$DEMO/room
STORE=$DEMO/store

# Leave nothing mounted from an earlier run.
for m in "$ROOM" "$DEMO/view" "$DEMO/browse"; do "$B" umount "$m" >/dev/null 2>&1 || umount -l "$m" 2>/dev/null || true; done
rm -rf "$DEMO"
mkdir -p "$ROOM"/{src/app,transcripts,state,.hidden} "$DEMO/view" "$DEMO/browse"

run() { printf '\n$ %s\n' "$*"; "$@"; }

echo "== a sample room at $ROOM"
for i in $(seq 1 40); do printf 'def f%d():\n    return %d\n' "$i" "$i" >"$ROOM/src/app/mod$i.py"; done
echo '# sample room' >"$ROOM/README.md"
for i in $(seq 1 2000); do echo "{\"turn\":$i,\"role\":\"agent\",\"text\":\"step $i\"}"; done >"$ROOM/transcripts/session-001.jsonl"
sqlite3 "$ROOM/state/agent.sqlite" "CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES('turn','1');"
ln -s src/app "$ROOM/app"
echo secret-ish >"$ROOM/.hidden/config"

run "$B" init "$STORE" --root "room=$ROOM"
run "$B" capture "$STORE" -m "turn 1" --label turn-1
echo '{"turn":2001,"role":"agent","text":"more"}' >>"$ROOM/transcripts/session-001.jsonl"
echo 'print("new")' >"$ROOM/src/app/new.py"
sqlite3 "$ROOM/state/agent.sqlite" "UPDATE kv SET v='2' WHERE k='turn';"
run "$B" capture "$STORE" -m "turn 2"
run "$B" log "$STORE"
run "$B" diff "$STORE" turn-1 main
run "$B" cat "$STORE" turn-1:room/README.md

echo; echo "== read-only mount of checkpoint turn-1 (lazy, from the store)"
run "$B" mount "$STORE" turn-1 --at "$DEMO/view"
run ls -la "$DEMO/view"
run grep -rl "return 7" "$DEMO/view/src"
run sqlite3 "$DEMO/view/state/agent.sqlite" "SELECT v FROM kv WHERE k='turn';"
run "$B" umount "$DEMO/view"

echo; echo "== every checkpoint at once"
run "$B" browse "$STORE" "$DEMO/browse"
run ls "$DEMO/browse" "$DEMO/browse/labels"
run cat "$DEMO/browse/labels/turn-1/room/README.md"
run "$B" umount "$DEMO/browse"

echo; echo "== the room as a live workspace, at its own path"
run "$B" mount "$STORE" --branch main
echo "# edited in the workspace" >>"$ROOM/README.md"
run "$B" status "$STORE"
run "$B" checkpoint "$ROOM" -m "turn 3" --label turn-3
run "$B" fork "$STORE" turn-1 retry
run "$B" switch "$ROOM" --to retry
run cat "$ROOM/README.md"
run "$B" switch "$ROOM" --to main
run cat "$ROOM/README.md"
run "$B" branch list "$STORE"
run "$B" log "$STORE" --graph
run "$B" verify "$STORE"
run "$B" umount "$ROOM"
echo; echo "done: the store is at $STORE (remove $DEMO to clean up)"
