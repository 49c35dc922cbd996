#!/usr/bin/env python3
"""A scripted model server for ckptfs's real-agent tests: only the model is fake.

Speaks the two wire protocols the real agent CLIs use, as server-sent events:
  POST /v1/responses  OpenAI Responses API (Codex)
  POST /v1/messages   Anthropic Messages API (Claude Code)

Replies are a function of the request alone (forks and resumes need no server state): the last
user prompt in the request is looked up in the script, the tool results that follow it are
counted, and the next scripted step is sent as a tool call, or the final reply when all were.

  model_server.py --script SCRIPT.json --log LOG.jsonl [--port 0] [--lifetime 600]

prints the port on stdout once listening and exits by itself after --lifetime seconds.

Script: {"turns": [{"prompt": "make hello",
                     "steps": [{"shell": "echo hi > hello.txt"},
                               {"patch": {"path": "notes.md", "text": "line\\n"}}],
                     "reply": "done: hello",
                     "fail": "http500" | "cut" | "hang", "fail_times": 1}]}
A shell step is Codex's `exec_command` / Claude Code's `Bash`; a patch step adds a file with
Codex's apply_patch (run through exec_command, which Codex intercepts) / Claude Code's `Write`.
`fail` makes the first `fail_times` requests of that prompt fail: HTTP 500, a stream cut before
completion, or a stream that stays open sending nothing. An unscripted prompt gets the reply
"unscripted: PROMPT".

Log: one JSON line per request, flushed: {"n", "time", "path", "kind", "prompt", "step",
"body", "auth"}; kind is "turn" for a request carrying a scripted prompt, "other" otherwise.
GET /_stats gives {"requests": N, "turn_requests": M}.
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"n": 0, "turn_requests": 0, "failed": {}}


def text_of(content):
    """The text of a message's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") in ("text", "input_text"):
            out.append(block.get("text", ""))
    return "\n".join(out)


def is_context(text):
    """Text the CLI adds around the user's prompt (<environment_context>, reminders)."""
    t = text.strip()
    return not t or t.startswith("<")


def codex_prompt(body):
    """(prompt, tool results after it) of a Responses API request."""
    items = body.get("input") or []
    prompt, after = None, 0
    for item in items:
        if item.get("type") == "message" and item.get("role") == "user":
            t = text_of(item.get("content"))
            if not is_context(t):
                prompt, after = t.strip(), 0
        elif item.get("type") in ("function_call_output", "custom_tool_call_output"):
            after += 1
    return prompt, after


def claude_prompt(body):
    """(prompt, tool results after it) of a Messages API request."""
    prompt, after = None, 0
    for msg in body.get("messages") or []:
        if msg.get("role") != "user":
            continue
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        texts = [
            b.get("text", "")
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and not is_context(b.get("text", ""))
        ]
        if results:
            after += len(results)
        elif texts:
            prompt, after = texts[-1].strip(), 0
    return prompt, after


def patch_command(step):
    path, text = step["path"], step["text"]
    lines = "".join("+" + l + "\n" for l in text.splitlines())
    return "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: %s\n%s*** End Patch\nEOF\n" % (path, lines)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ckptfs-model/1"

    def log_message(self, *args):
        pass

    # -- plumbing -----------------------------------------------------------------------

    def body(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {"unparsed": raw.decode("utf-8", "replace")}

    def record(self, kind, prompt, step, body):
        with LOCK:
            STATE["n"] += 1
            if kind == "turn":
                STATE["turn_requests"] += 1
            line = {
                "n": STATE["n"],
                "time": time.time(),
                "path": self.path,
                "kind": kind,
                "prompt": prompt,
                "step": step,
                "body": body,
                "auth": self.headers.get("authorization") or self.headers.get("x-api-key"),
            }
            self.server.log.write(json.dumps(line) + "\n")
            self.server.log.flush()

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def event(self, name, data):
        self.wfile.write(("event: %s\ndata: %s\n\n" % (name, json.dumps(data))).encode())
        self.wfile.flush()

    # -- the script ---------------------------------------------------------------------

    def plan(self, prompt, done):
        """(turn, step or None for the final reply, failure or None)."""
        turn = next((t for t in self.server.script.get("turns", []) if t.get("prompt") == prompt), None)
        if turn is None:
            return None, None, None
        failure = None
        if turn.get("fail") and done == 0:
            with LOCK:
                used = STATE["failed"].get(prompt, 0)
                if used < int(turn.get("fail_times", 1)):
                    STATE["failed"][prompt] = used + 1
                    failure = turn["fail"]
        steps = turn.get("steps", [])
        step = steps[done] if done < len(steps) else None
        return turn, step, failure

    def fail(self, failure, first_events):
        if failure == "http500":
            self.send_json(500, {"error": {"type": "server_error", "message": "scripted failure"}})
            return
        self.start_sse()
        for name, data in first_events:
            self.event(name, data)
        if failure == "hang":
            time.sleep(self.server.lifetime)
        # "cut": the connection closes before the response completes.
        self.wfile.flush()

    # -- routes -------------------------------------------------------------------------

    def do_GET(self):
        if self.path.startswith("/_stats"):
            with LOCK:
                self.send_json(200, {"requests": STATE["n"], "turn_requests": STATE["turn_requests"]})
            return
        self.record("other", None, None, None)
        self.send_json(404, {"error": "not found"})

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self):
        body = self.body()
        if self.path.startswith("/v1/responses"):
            self.codex_turn(body)
        elif self.path.startswith("/v1/messages/count_tokens"):
            self.record("other", None, None, body)
            self.send_json(200, {"input_tokens": 10})
        elif self.path.startswith("/v1/messages"):
            self.claude_turn(body)
        else:
            self.record("other", None, None, body)
            self.send_json(404, {"error": {"type": "not_found", "message": self.path}})

    def codex_turn(self, body):
        prompt, done = codex_prompt(body)
        turn, step, failure = self.plan(prompt, done)
        self.record("turn" if turn else "other", prompt, done, body)
        rid = "resp_%d" % STATE["n"]
        created = ("response.created", {"type": "response.created", "response": {"id": rid}})
        if failure:
            self.fail(failure, [created])
            return
        self.start_sse()
        self.event(*created)
        if step is not None:
            cmd = step["shell"] if "shell" in step else patch_command(step["patch"])
            item = {
                "type": "function_call",
                "id": "fc_%d" % STATE["n"],
                "call_id": "call_%d" % STATE["n"],
                "name": "exec_command",
                "arguments": json.dumps({"cmd": cmd, "login": False, "tty": False}),
            }
        else:
            text = turn["reply"] if turn else "unscripted: %s" % prompt
            item = {
                "type": "message",
                "role": "assistant",
                "id": "msg_%d" % STATE["n"],
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        self.event("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": item})
        self.event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item})
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        self.event("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}})

    def claude_turn(self, body):
        prompt, done = claude_prompt(body)
        turn, step, failure = self.plan(prompt, done)
        self.record("turn" if turn else "other", prompt, done, body)
        mid = "msg_%d" % STATE["n"]
        start = (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model", "test-model"),
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 1},
                },
            },
        )
        if failure:
            self.fail(failure, [start])
            return
        self.start_sse()
        self.event(*start)
        if step is not None:
            if "shell" in step:
                name, args = "Bash", {"command": step["shell"], "description": "scripted step"}
            else:
                p = step["patch"]
                name, args = "Write", {"file_path": p["path"], "content": p["text"]}
            tid = "toolu_%d" % STATE["n"]
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                       "content_block": {"type": "tool_use", "id": tid, "name": name, "input": {}}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                       "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}})
            stop = "tool_use"
        else:
            text = turn["reply"] if turn else "unscripted: %s" % prompt
            self.event("content_block_start", {"type": "content_block_start", "index": 0,
                       "content_block": {"type": "text", "text": ""}})
            self.event("content_block_delta", {"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": text}})
            stop = "end_turn"
        self.event("content_block_stop", {"type": "content_block_stop", "index": 0})
        self.event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                   "usage": {"output_tokens": 5}})
        self.event("message_stop", {"type": "message_stop"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=600)
    a = ap.parse_args()
    with open(a.script) as f:
        script = json.load(f)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    server.script = script
    server.lifetime = a.lifetime
    server.log = open(a.log, "a")
    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()
    timer = threading.Timer(a.lifetime, server.shutdown)
    timer.daemon = True
    timer.start()
    server.serve_forever()


if __name__ == "__main__":
    main()
