#!/usr/bin/env python3
"""A fake agent for examples/runner.sh: one run is one turn of a saved session.

It resumes the session in --home (session.json: thread id, turns so far), appends the
prompt and its reply to the session's JSONL transcript, edits files in --room, records the
turn in a SQLite database, and writes its final reply to --reply-file (a JSON object the
runner gives `ckptfs turn --meta-file`). With --fail it dies half-way through the turn,
after writing, as a crashed agent would: exit 1, no reply.
"""

import argparse
import json
import os
import sqlite3
import sys

VERSION = "1.0"

p = argparse.ArgumentParser()
p.add_argument("--home", required=True, help="the agent's own state (like ~/.codex)")
p.add_argument("--room", required=True, help="the workspace it edits")
p.add_argument("--prompt", required=True)
p.add_argument("--reply-file", help="where to write the final reply as JSON")
p.add_argument("--fail", action="store_true", help="die half-way through the turn")
a = p.parse_args()

session_path = os.path.join(a.home, "session.json")
if os.path.exists(session_path):
    with open(session_path) as f:
        session = json.load(f)
else:
    session = {"thread": "th-" + os.urandom(4).hex(), "turns": 0}
n = session["turns"] + 1

transcript = os.path.join(a.home, "sessions", session["thread"] + ".jsonl")
os.makedirs(os.path.dirname(transcript), exist_ok=True)
with open(transcript, "a") as f:
    f.write(json.dumps({"turn": n, "role": "user", "text": a.prompt}) + "\n")

with open(os.path.join(a.room, "notes.md"), "a") as f:
    f.write(f"- turn {n}: {a.prompt}\n")
os.makedirs(os.path.join(a.room, "src"), exist_ok=True)
with open(os.path.join(a.room, "src", f"step{n}.py"), "w") as f:
    f.write(f"# written by turn {n}\nprint({a.prompt!r})\n")

db = sqlite3.connect(os.path.join(a.home, "state.sqlite"))
db.execute("CREATE TABLE IF NOT EXISTS turns (n INTEGER PRIMARY KEY, prompt TEXT)")
db.execute("INSERT OR REPLACE INTO turns VALUES (?, ?)", (n, a.prompt))
db.commit()
db.close()

if a.fail:
    print(f"fake-agent: turn {n} crashed half-way", file=sys.stderr)
    sys.exit(1)

reply = f"done: {a.prompt}"
with open(transcript, "a") as f:
    f.write(json.dumps({"turn": n, "role": "assistant", "text": reply}) + "\n")
session["turns"] = n
with open(session_path + ".tmp", "w") as f:
    json.dump(session, f)
os.replace(session_path + ".tmp", session_path)
if a.reply_file:
    with open(a.reply_file, "w") as f:
        json.dump({"thread": session["thread"], "turn": n, "reply": reply}, f)
print(f"fake-agent {VERSION}: turn {n} of {session['thread']}: {reply}")
