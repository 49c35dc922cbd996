#!/bin/sh
# A runner built on `ckptfs agent` (docs/agents.md): a real Codex (or Claude Code: AGENT=claude)
# in a room, turn after turn, each completed turn one checkpoint bound to the native session;
# a native fork of turn 1 that continues from exactly there; back on main, the session goes on.
#
#   cargo build && sudo examples/agent-room.sh [WORKDIR]     (root: FUSE, overlayfs, cgroups)
#
# The model is the scripted model server of the tests (tests/agents/model_server.py) on
# 127.0.0.1, so this runs offline with no account. With a real model, drop the server and the
# provider lines: `agent init ... --auth-source ~/.codex/auth.json` lends your login to each turn.
# The agent runs as AGENT_USER (default nobody), never as root.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
CKPTFS=${CKPTFS:-$(command -v ckptfs || echo "$HERE/../target/debug/ckptfs")}
AGENT=${AGENT:-codex}
AGENT_USER=${AGENT_USER:-nobody}
WORK=${1:-$(mktemp -d /var/tmp/ckptfs-agent.XXXXXX)}
STORE=$WORK/store ROOM=$WORK/room HOMEDIR=$WORK/agent-home
say() { printf '\n== %s\n' "$*"; }
SERVER=
cleanup() {
  "$CKPTFS" umount "$ROOM" >/dev/null 2>&1 || true
  [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null || true
}
trap cleanup EXIT
command -v "$AGENT" >/dev/null || { echo "$AGENT is not installed (scripts/setup-deps.sh installs it)" >&2; exit 1; }
chmod 755 "$WORK"

say "the scripted model: three turns that run tools"
cat > "$WORK/script.json" <<'JSON'
{"turns": [
 {"prompt": "Create hello.py printing hello", "steps": [{"patch": {"path": "hello.py", "text": "print('hello')"}}],
  "reply": "Created hello.py."},
 {"prompt": "Run it and save the output", "steps": [{"shell": "python3 hello.py > out.txt"}],
  "reply": "Ran hello.py; the output is in out.txt."},
 {"prompt": "Write a README instead", "steps": [{"shell": "echo '# hello' > README.md"}],
  "reply": "Wrote README.md."}
]}
JSON
python3 "$HERE/../tests/agents/model_server.py" --script "$WORK/script.json" --log "$WORK/requests.jsonl" \
  --lifetime 900 > "$WORK/port" &
SERVER=$!
while [ ! -s "$WORK/port" ]; do sleep 0.1; done
PORT=$(cat "$WORK/port")

say "agent init: roots workspace=$ROOM and home=$HOMEDIR (the agent's own CODEX_HOME / CLAUDE_CONFIG_DIR)"
if [ "$AGENT" = codex ]; then
  cat > "$WORK/config.toml" <<'TOML'
model = "test-model"
model_provider = "local"
[model_providers.local]
name = "local"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
requires_openai_auth = true
request_max_retries = 0
stream_max_retries = 0
[features]
plugins = false
shell_snapshot = false
TOML
  echo '{"OPENAI_API_KEY": "sk-example-not-a-real-key"}' > "$WORK/login.json"
  # The server's port is given per turn, so the recorded home does not depend on it.
  REACH="--agent-arg=-c --agent-arg=model_providers.local.base_url=\"http://127.0.0.1:$PORT/v1\""
  CONFIG="--agent-config $WORK/config.toml"
else
  echo '{"claudeAiOauth": {"accessToken": "sk-example-not-a-real-token", "expiresAt": 4102444800000, "scopes": ["user:inference"]}}' > "$WORK/login.json"
  export ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1
  REACH="" CONFIG=""
fi
chmod 600 "$WORK/login.json"
# shellcheck disable=SC2086
"$CKPTFS" agent init "$STORE" --agent "$AGENT" --workspace "$ROOM" --home "$HOMEDIR" \
  --user "$AGENT_USER" --model test-model --auth-source "$WORK/login.json" $CONFIG

turn() { # turn PROMPT [agent turn options...]
  prompt=$1; shift
  # shellcheck disable=SC2086
  "$CKPTFS" agent turn "$STORE" --message "$prompt" "$@" $REACH
}
say "turn 1 (a new native session) and turn 2 (the same session, resumed)"
turn "Create hello.py printing hello" --label t1
turn "Run it and save the output"
ls -l "$ROOM"

say "fork turn 1 natively (no model request): branch alt shows turn 1's files at the same path"
"$CKPTFS" agent fork "$STORE" t1 alt
ls -l "$ROOM"
turn "Write a README instead" --branch alt

say "back to main: its session goes on where it was"
"$CKPTFS" switch "$ROOM" --to main
ls -l "$ROOM"

say "every turn and fork, with the native ids"
"$CKPTFS" agent log "$STORE"
say "the native history as turn 1's checkpoint holds it (first lines)"
"$CKPTFS" agent transcript "$STORE" t1 | head -c 600; echo
say "the login never entered the store"
if grep -rq "sk-example-not-a-real" "$STORE/audit.jsonl" "$HOMEDIR"; then echo "FOUND"; exit 1; else echo "not found: ok"; fi
