#!/usr/bin/env python3
"""One agent turn in a native directory, driven as `ckptfs agent turn` drives it, for
bench/bench_agent.sh: Codex through `codex app-server` (thread/start or thread/resume,
turn/start, until turn/completed), Claude Code through `claude -p --output-format stream-json`
(--resume). The session id is kept in STATE between turns. Prints nothing; exits 1 when the
turn did not complete.

  agent_native.py codex|claude --home DIR --cwd DIR --state FILE --prompt TEXT [--arg ARG]...
"""
import argparse, json, os, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("agent", choices=["codex", "claude"])
ap.add_argument("--home", required=True)
ap.add_argument("--cwd", required=True)
ap.add_argument("--state", required=True)
ap.add_argument("--prompt", required=True)
ap.add_argument("--arg", action="append", default=[])
a = ap.parse_args()
session = open(a.state).read().strip() if os.path.exists(a.state) else None

if a.agent == "claude":
    env = dict(os.environ, CLAUDE_CONFIG_DIR=a.home, HOME=a.home)
    cmd = ["claude", "-p", "--output-format", "stream-json", "--verbose", "--input-format", "text",
           "--permission-mode", "bypassPermissions"] + (["--resume", session] if session else []) + a.arg
    p = subprocess.run(cmd, input=a.prompt.encode(), stdout=subprocess.PIPE, env=env, cwd=a.cwd)
    for line in p.stdout.splitlines():
        m = json.loads(line)
        if m.get("type") == "result" and m.get("subtype") == "success":
            open(a.state, "w").write(m["session_id"])
            sys.exit(0)
    sys.exit(1)

env = dict(os.environ, CODEX_HOME=a.home, HOME=a.home)
p = subprocess.Popen(["codex", "app-server"] + a.arg, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL, env=env, cwd=a.cwd)
n = 0
def call(method, params):
    global n
    n += 1
    p.stdin.write((json.dumps({"id": n, "method": method, "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == n and "method" not in m:
            return m["result"]
call("initialize", {"clientInfo": {"name": "bench", "version": "0"}})
p.stdin.write(b'{"method": "initialized"}\n'); p.stdin.flush()
common = {"cwd": a.cwd, "approvalPolicy": "never", "sandbox": "danger-full-access"}
if session:
    t = call("thread/resume", dict(common, threadId=session, excludeTurns=True))["thread"]["id"]
else:
    t = call("thread/start", common)["thread"]["id"]
open(a.state, "w").write(t)
turn = call("turn/start", {"threadId": t, "input": [{"type": "text", "text": a.prompt}]})["turn"]["id"]
ok = False
for line in p.stdout:
    m = json.loads(line)
    if m.get("method") == "turn/completed" and m["params"]["turn"]["id"] == turn:
        ok = m["params"]["turn"]["status"] == "completed"
        break
p.stdin.close()
p.wait()
sys.exit(0 if ok else 1)
