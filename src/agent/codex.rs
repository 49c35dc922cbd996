//! The Codex adapter: `codex app-server` (JSON-RPC 2.0 as JSON lines over stdio; `codex
//! app-server generate-json-schema` prints the protocol of an installed version).
//!
//! A turn: `initialize` and `initialized`; `thread/start` (no session yet) or
//! `thread/resume` of the branch's thread, with the working directory, approval policy
//! `never` and sandbox `danger-full-access` (the agent is contained by ckptfs: its own user,
//! the workspace's cgroup); `turn/start` with the prompt; then notifications until
//! `turn/completed` for that turn, whose status must be `completed`. The final reply is the
//! last `agentMessage` item completed in the turn. Then stdin is closed and the server exits.
//! The thread's rollout file (`thread.path`, under CODEX_HOME/sessions) must then hold the
//! turn's completion event naming the turn and carrying the reply.
//!
//! A fork: `thread/fork` of the recorded thread through the recorded turn (`lastTurnId`); no
//! model request is sent. The new thread's history must end with the recorded reply.

use std::cell::RefCell;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};

use serde_json::{json, Value};

use super::jsonl::{reap, Lines};
use super::{session, Adapter, Binding, Kind, TurnSpec, EXIT_WAIT};
use crate::runner::driver::{Bound, Driver, Failure};

/// The Codex adapter.
pub struct Codex;

/// Versions of `@openai/codex` this adapter was tested with.
pub const TESTED: &[&str] = &["0.169.0"];

impl Adapter for Codex {
    fn kind(&self) -> Kind {
        Kind::Codex
    }
    fn program(&self) -> &'static str {
        "codex"
    }
    fn tested_versions(&self) -> &'static [&'static str] {
        TESTED
    }
    fn parse_version(&self, out: &str) -> Option<String> {
        // `codex-cli 0.169.0`
        let line = out.lines().next()?.trim();
        let v = line.strip_prefix("codex-cli ")?.trim();
        (!v.is_empty()).then(|| v.to_string())
    }
    fn home_var(&self) -> &'static str {
        "CODEX_HOME"
    }
    fn config_name(&self) -> &'static str {
        "config.toml"
    }
    fn login_name(&self) -> &'static str {
        "auth.json"
    }
    fn default_config(&self, model: Option<&str>) -> String {
        let mut c = String::from(
            "# Written by `ckptfs agent init`: the policy every ckptfs turn uses.\n\
             approval_policy = \"never\"\nsandbox_mode = \"danger-full-access\"\n",
        );
        if let Some(m) = model {
            c.push_str(&format!("model = {}\n", json!(m)));
        }
        c
    }
    fn policy(&self) -> Value {
        json!({"approval_policy": "never", "sandbox": "danger-full-access"})
    }
    fn history_base(&self, own_file: &[u8]) -> Option<u64> {
        // The first line, `session_meta`: `history_base.end_byte_offset` in the parent's
        // rollout.
        let first = own_file.split(|b| *b == b'\n').next()?;
        let v: Value = serde_json::from_slice(first).ok()?;
        v["payload"]["history_base"]["end_byte_offset"].as_u64()
    }
    fn turn(&self, t: TurnSpec) -> Box<dyn Driver> {
        Box::new(CodexRun {
            spec: t,
            fork: false,
            done: None,
        })
    }
    fn fork(&self, t: TurnSpec) -> Box<dyn Driver> {
        Box::new(CodexRun {
            spec: t,
            fork: true,
            done: None,
        })
    }
}

/// What a completed turn or fork left to check and bind.
struct Done {
    thread: String,
    turn: String,
    reply: String,
    path: Option<PathBuf>,
}

/// One `codex app-server` run: a turn, or a fork.
struct CodexRun {
    spec: TurnSpec,
    fork: bool,
    done: Option<Done>,
}

/// The JSON-RPC side of a run.
struct Rpc {
    stdin: ChildStdin,
    lines: Lines,
    next_id: i64,
}

impl Rpc {
    fn send(&mut self, msg: &Value) -> Result<(), String> {
        let mut line = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("writing to codex app-server: {e}"))
    }

    /// Sends request `method` and waits for its response; notifications meanwhile go to
    /// `seen`.
    fn call(
        &mut self,
        method: &str,
        params: Value,
        seen: &mut dyn FnMut(&Value),
    ) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"id": id, "method": method, "params": params}))?;
        loop {
            let m = self.next()?;
            if m.get("method").is_some() {
                seen(&m);
                continue;
            }
            if m.get("id") == Some(&json!(id)) {
                if let Some(e) = m.get("error") {
                    return Err(format!(
                        "codex app-server refused {method}: {}",
                        e.get("message").and_then(Value::as_str).unwrap_or("error")
                    ));
                }
                return Ok(m.get("result").cloned().unwrap_or(Value::Null));
            }
        }
    }

    /// The next notification or response. A request from the server is answered with an
    /// error (with approval policy `never` none is expected, and none is granted).
    fn next(&mut self) -> Result<Value, String> {
        loop {
            let m = self.lines.next_json()?;
            if m.get("method").is_some() && m.get("id").is_some() {
                let id = m["id"].clone();
                log::warn!(
                    "codex app-server asked {}: refused",
                    m["method"].as_str().unwrap_or("?")
                );
                self.send(&json!({"id": id, "error": {"code": -32601,
                    "message": "ckptfs grants no requests (approval policy never)"}}))?;
                continue;
            }
            return Ok(m);
        }
    }
}

impl CodexRun {
    fn thread_params(&self) -> Value {
        let s = &self.spec.from.settings;
        let mut p = json!({"cwd": s.workspace, "approvalPolicy": "never",
            "sandbox": "danger-full-access"});
        if let Some(m) = &s.model {
            p["model"] = json!(m);
        }
        p
    }

    /// The conversation: on success what to check and bind.
    fn converse(&mut self, rpc: &mut Rpc) -> Result<Done, String> {
        let mut ignore = |_: &Value| {};
        rpc.call(
            "initialize",
            json!({"clientInfo": {"name": "ckptfs", "version": env!("CARGO_PKG_VERSION")}}),
            &mut ignore,
        )?;
        rpc.send(&json!({"method": "initialized"}))?;
        let from = self.spec.from.clone();
        if self.fork {
            let (Some(thread), Some(turn)) = (&from.session, &from.turn) else {
                return Err("the checkpoint binds no completed Codex turn to fork".into());
            };
            let mut p = self.thread_params();
            p["threadId"] = json!(thread);
            p["lastTurnId"] = json!(turn);
            let r = rpc.call("thread/fork", p, &mut ignore)?;
            let reply = last_reply_in_turns(&r["thread"]["turns"]).unwrap_or_default();
            return Ok(Done {
                thread: str_of(&r["thread"]["id"])?,
                turn: turn.clone(),
                reply,
                path: r["thread"]["path"].as_str().map(PathBuf::from),
            });
        }
        let r = match &from.session {
            Some(t) => {
                let mut p = self.thread_params();
                p["threadId"] = json!(t);
                p["excludeTurns"] = json!(true);
                rpc.call("thread/resume", p, &mut ignore)?
            }
            None => rpc.call("thread/start", self.thread_params(), &mut ignore)?,
        };
        let thread = str_of(&r["thread"]["id"])?;
        let path = r["thread"]["path"].as_str().map(PathBuf::from);
        let reply: RefCell<Option<String>> = RefCell::new(None);
        let completed: RefCell<Vec<Value>> = RefCell::new(Vec::new());
        let mut collect = |m: &Value| {
            if m["params"]["threadId"] != json!(thread) {
                return;
            }
            if m["method"] == "item/completed" && m["params"]["item"]["type"] == "agentMessage" {
                *reply.borrow_mut() = m["params"]["item"]["text"].as_str().map(str::to_string);
            }
            if m["method"] == "turn/completed" {
                completed.borrow_mut().push(m.clone());
            }
        };
        let r = rpc.call(
            "turn/start",
            json!({"threadId": thread,
                   "input": [{"type": "text", "text": self.spec.prompt}]}),
            &mut collect,
        )?;
        let turn = str_of(&r["turn"]["id"])?;
        let is_ours = |m: &Value| m["params"]["turn"]["id"] == json!(turn);
        // A quick turn completes before turn/start's response arrives.
        let done = loop {
            let found = completed.borrow().iter().find(|m| is_ours(m)).cloned();
            if let Some(d) = found {
                break d;
            }
            let m = rpc.next()?;
            if m.get("method").is_some() {
                collect(&m);
            }
        };
        let t = &done["params"]["turn"];
        if t["status"] != "completed" {
            let why = t["error"]["message"].as_str().unwrap_or("no reason given");
            return Err(format!(
                "codex turn {turn} ended {}: {why}",
                t["status"].as_str().unwrap_or("?")
            ));
        }
        let reply = reply
            .into_inner()
            .or_else(|| last_reply_in_turns(&json!([t])))
            .ok_or_else(|| format!("codex turn {turn} completed without a final reply"))?;
        Ok(Done {
            thread,
            turn,
            reply,
            path,
        })
    }

    /// Checks the rollout file and makes the binding.
    fn bind(&self, d: &Done) -> Result<Binding, String> {
        let s = &self.spec.from.settings;
        let path = d
            .path
            .clone()
            .ok_or("codex app-server named no rollout file for the thread")?;
        let data = session::read(&s.home, &path).map_err(|e| e.to_string())?;
        let lines = session::lines(&data);
        if self.fork {
            // The fork's rollout names its parent and where in the parent's rollout its
            // history ends (`history_base`); the history itself stays the parent's.
            let parent = self.spec.from.session.as_deref().unwrap_or_default();
            let meta = lines.first().map(|l| &l["payload"]);
            if meta.and_then(|p| p["forked_from_id"].as_str()) != Some(parent) {
                return Err(
                    session::lacks(&path, &format!("no fork of thread {parent}")).to_string(),
                );
            }
            if self.spec.from.reply.as_deref() != Some(d.reply.as_str()) {
                return Err(format!(
                    "the forked thread's last reply is not the one the checkpoint recorded: {}",
                    crate::text::quote::text(&d.reply)
                ));
            }
        } else if !lines.iter().any(|l| is_completion(l, &d.turn, &d.reply)) {
            return Err(session::lacks(
                &path,
                &format!("no completion event of turn {} with its reply", d.turn),
            )
            .to_string());
        }
        let mut b = Binding::fresh(s.clone());
        b.session = Some(d.thread.clone());
        b.turn = Some(d.turn.clone());
        b.set_reply(&d.reply);
        b.session_file = Some(path);
        b.session_file_len = Some(data.len() as u64);
        b.turn_args = self.spec.extra_args.clone();
        b.forked_from = if self.fork {
            self.spec.fork_of.map(|c| super::ForkOrigin {
                session: self.spec.from.session.clone().unwrap_or_default(),
                turn: self.spec.from.turn.clone(),
                checkpoint: c,
            })
        } else {
            self.spec.from.forked_from.clone()
        };
        Ok(b)
    }
}

fn str_of(v: &Value) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("codex app-server answered without an id: {v}"))
}

/// The text of the last `agentMessage` item of the last turn in `turns`.
fn last_reply_in_turns(turns: &Value) -> Option<String> {
    turns
        .as_array()?
        .last()?
        .get("items")?
        .as_array()?
        .iter()
        .rev()
        .find(|i| i["type"] == "agentMessage")
        .and_then(|i| i["text"].as_str())
        .map(str::to_string)
}

/// A rollout line that completes turn `turn` with `reply` (`event_msg` `task_complete`).
fn is_completion(l: &Value, turn: &str, reply: &str) -> bool {
    let p = &l["payload"];
    l["type"] == "event_msg"
        && matches!(p["type"].as_str(), Some("task_complete" | "turn_complete"))
        && p["turn_id"] == json!(turn)
        && p["last_agent_message"] == json!(reply)
}

impl Driver for CodexRun {
    fn describe(&self) -> Vec<String> {
        let mut v = vec![
            self.spec.from.settings.binary.display().to_string(),
            "app-server".to_string(),
        ];
        v.extend(self.spec.from.settings.agent_args.iter().cloned());
        v.extend(self.spec.extra_args.iter().cloned());
        v.push(
            if self.fork {
                "thread/fork"
            } else {
                "turn/start"
            }
            .to_string(),
        );
        v
    }

    fn cwd(&self) -> Option<PathBuf> {
        Some(self.spec.from.settings.workspace.clone())
    }

    fn start(&mut self, owner: (u32, u32)) -> Result<(), String> {
        match &mut self.spec.login {
            Some(l) => l.lend(owner),
            None => Ok(()),
        }
    }

    fn command(&mut self) -> std::process::Command {
        let s = &self.spec.from.settings;
        let mut c = std::process::Command::new(&s.binary);
        c.arg("app-server")
            .args(&s.agent_args)
            .args(&self.spec.extra_args)
            .env("CODEX_HOME", &s.home)
            .env("HOME", &s.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        c
    }

    fn drive(&mut self, mut child: Child) -> Result<ExitStatus, Failure> {
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let status = reap(&mut child, EXIT_WAIT).ok();
            return Err(Failure {
                status,
                reason: "codex app-server started without pipes".into(),
                spawn: None,
            });
        };
        let mut rpc = Rpc {
            stdin,
            lines: Lines::start(stdout, self.spec.timeout),
            next_id: 0,
        };
        let talked = self.converse(&mut rpc);
        // Closing stdin ends the server; one that lingers is killed.
        drop(rpc);
        let status = reap(&mut child, EXIT_WAIT);
        match (talked, status) {
            (Ok(d), Ok(st)) => {
                self.done = Some(d);
                // The server exits 0 on EOF; a signal here was someone else's kill.
                if st.success() || st.code().is_some() {
                    Ok(ExitStatus::default())
                } else {
                    Ok(st)
                }
            }
            (Err(reason), st) => Err(Failure {
                status: st.ok(),
                reason,
                spawn: None,
            }),
            (Ok(_), Err(e)) => Err(Failure {
                status: None,
                reason: format!("waiting for codex app-server: {e}"),
                spawn: None,
            }),
        }
    }

    fn settle(&mut self, ok: bool) -> Result<Bound, String> {
        if let Some(l) = &mut self.spec.login {
            l.take_back()?;
        }
        if !ok {
            return Ok(Bound::new());
        }
        let d = self
            .done
            .take()
            .ok_or("codex app-server completed no turn")?;
        self.bind(&d).map(|b| b.to_meta())
    }
}
