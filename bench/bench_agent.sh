#!/usr/bin/env bash
# What `ckptfs agent turn` adds to a real agent's turn (issue 29's benchmark): the same
# scripted turn (one shell command, then the reply) with the real agent CLI against the
# scripted model server, in a native directory (driven the same way by bench/agent_native.py)
# and through ckptfs (the room: the small generated room plus the agent's home), interleaved,
# N turns each; the store's growth per turn. Needs root, python3 and the agent CLI.
#   bench/bench_agent.sh [codex|claude] [N]
set -euo pipefail
cd "$(dirname "$0")/.."
GEN=${GEN_ROOM:-$(cd .. && pwd)/shared/bench/gen_room.py}
[ -f "$GEN" ] || GEN=/work/shared/bench/gen_room.py
AGENT=${1:-codex}
N=${2:-10}
cargo build --release -q
B=$PWD/target/release/ckptfs
BASE=${BENCH_DIR:-/var/tmp/ckptfs-agentbench}
"$B" umount "$BASE/room" >/dev/null 2>&1 || true
rm -rf "$BASE"
mkdir -p "$BASE"
SERVER=
trap '"$B" umount "$BASE/room" >/dev/null 2>&1 || true; [ -n "$SERVER" ] && kill $SERVER; rm -rf "$BASE"' EXIT

# The script: N turns for each side, one shell step each.
python3 - "$BASE/script.json" "$N" <<'PY'
import json, sys
turns = [{"prompt": f"{side} turn {i}", "steps": [{"shell": f"echo {i} >> turns.log"}],
          "reply": f"done {i}"} for side in ("native", "ckptfs") for i in range(int(sys.argv[2]) + 1)]
json.dump({"turns": turns}, open(sys.argv[1], "w"))
PY
python3 tests/agents/model_server.py --script "$BASE/script.json" --log "$BASE/requests.jsonl" \
    --lifetime 3600 > "$BASE/port" &
SERVER=$!
while [ ! -s "$BASE/port" ]; do sleep 0.1; done
PORT=$(cat "$BASE/port")
cat > "$BASE/config.toml" <<TOML
model = "test-model"
model_provider = "ckpt"
[model_providers.ckpt]
name = "ckpt"
base_url = "http://127.0.0.1:$PORT/v1"
wire_api = "responses"
env_key = "CKPT_BENCH_KEY"
request_max_retries = 0
stream_max_retries = 0
[features]
plugins = false
shell_snapshot = false
TOML
export CKPT_BENCH_KEY=bench ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=bench \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_MAX_RETRIES=0 IS_SANDBOX=1

# Two identical rooms: the small generated room and an empty agent home.
python3 "$GEN" gen "$BASE/native-room" --scale small >/dev/null
python3 "$GEN" gen "$BASE/room" --scale small >/dev/null
mkdir -p "$BASE/native-home"
cfg=()
if [ "$AGENT" = codex ]; then cp "$BASE/config.toml" "$BASE/native-home/"; cfg=(--agent-config "$BASE/config.toml"); fi
"$B" agent init "$BASE/store" --agent "$AGENT" --workspace "$BASE/room" --home "$BASE/home" \
    --as-root "${cfg[@]}" >/dev/null

now() { date +%s.%N; }
# /usr/bin/python3 starts in ~10 ms (a pyenv shim takes ~90 ms, which would flatter ckptfs).
PY=${PYTHON:-/usr/bin/python3}
native() { "$PY" bench/agent_native.py "$AGENT" --home "$BASE/native-home" --cwd "$BASE/native-room" \
    --state "$BASE/native-session" --prompt "native turn $1"; }
through() { "$B" agent turn "$BASE/store" --as-root --message "ckptfs turn $1" >/dev/null 2>&1; }
# What the store keeps: objects and records (not the workspace's upper layer, which a fold empties).
store_bytes() { du -scb "$BASE/store/objects" "$BASE/store/checkpoints" "$BASE/store/refs" 2>/dev/null | tail -1 | cut -f1; }
# Turn 0 of each: starts the sessions, mounts the room, warms the caches.
native 0; through 0
nat=() ck=() grow=()
for i in $(seq 1 "$N"); do
    t0=$(now); native "$i"; t1=$(now)
    s0=$(store_bytes)
    t2=$(now); through "$i"; t3=$(now)
    s1=$(store_bytes)
    nat+=("$(python3 -c "print($t1 - $t0)")") ck+=("$(python3 -c "print($t3 - $t2)")") grow+=("$((s1 - s0))")
done
python3 - "$AGENT" "$N" "${nat[*]}" "${ck[*]}" "${grow[*]}" <<'PY'
import statistics as st, sys
agent, n = sys.argv[1], sys.argv[2]
nat = [float(x) for x in sys.argv[3].split()]
ck = [float(x) for x in sys.argv[4].split()]
grow = [int(x) for x in sys.argv[5].split()]
mn, mc = st.median(nat), st.median(ck)
print(f"{agent}, {n} turns each, interleaved (one shell command + reply per turn):")
print(f"  native turn      median {mn*1000:7.0f} ms   min {min(nat)*1000:6.0f} ms")
print(f"  ckptfs agent turn median {mc*1000:7.0f} ms   min {min(ck)*1000:6.0f} ms")
print(f"  added by ckptfs: median {(mc-mn)*1000:+.0f} ms ({mc/mn:.2f}x), min to min {(min(ck)-min(nat))*1000:+.0f} ms")
print(f"  store growth per turn: median {st.median(grow)/1024:.0f} KiB (max {max(grow)/1024:.0f} KiB)")
PY
