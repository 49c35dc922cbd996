//! The Claude Code adapter: `claude -p --output-format stream-json --verbose`, the prompt on
//! stdin, `--resume SESSION` for the branch's session, permission mode `bypassPermissions`
//! (the agent is contained by ckptfs: its own user, the workspace's cgroup).
//!
//! A turn is complete when the stream's `result` event says `success` and is not an error;
//! its `result` is the final reply and its `session_id` the session. The session file
//! (CLAUDE_CONFIG_DIR/projects/<cwd>/<session>.jsonl) must then hold the final assistant
//! message with that reply; its `uuid` is the turn's id.
//!
//! A fork sends no model request: Claude Code forks a session when it resumes it
//! (`--resume PARENT --fork-session --session-id NEW`), so `agent fork` checks the parent's
//! session file in the fork's home, gives the fork its session id, and the branch's first turn
//! makes the native fork with exactly the parent's history at the checkpoint.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};

use serde_json::{json, Value};

use super::jsonl::{reap, Lines};
use super::{session, Adapter, Binding, Kind, TurnSpec, EXIT_WAIT};
use crate::runner::driver::{Bound, Driver, Failure};

/// The Claude Code adapter.
pub struct Claude;

/// Versions of `@anthropic-ai/claude-code` this adapter was tested with.
pub const TESTED: &[&str] = &["2.1.332"];

impl Adapter for Claude {
    fn kind(&self) -> Kind {
        Kind::Claude
    }
    fn program(&self) -> &'static str {
        "claude"
    }
    fn tested_versions(&self) -> &'static [&'static str] {
        TESTED
    }
    fn parse_version(&self, out: &str) -> Option<String> {
        // `2.1.332 (Claude Code)`
        let line = out.lines().next()?.trim();
        let (v, rest) = line.split_once(' ')?;
        (rest.contains("Claude Code") && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| v.to_string())
    }
    fn home_var(&self) -> &'static str {
        "CLAUDE_CONFIG_DIR"
    }
    fn config_name(&self) -> &'static str {
        "settings.json"
    }
    fn login_name(&self) -> &'static str {
        ".credentials.json"
    }
    fn default_config(&self, model: Option<&str>) -> String {
        let mut c = json!({"permissions": {"defaultMode": "bypassPermissions"}});
        if let Some(m) = model {
            c["model"] = json!(m);
        }
        format!("{c:#}\n")
    }
    fn policy(&self) -> Value {
        json!({"permission_mode": "bypassPermissions"})
    }
    fn history_base(&self, _own_file: &[u8]) -> Option<u64> {
        // `--fork-session` copies the parent's history into the fork's file.
        None
    }
    fn turn(&self, t: TurnSpec) -> Box<dyn Driver> {
        Box::new(ClaudeRun {
            spec: t,
            fork: false,
            done: None,
        })
    }
    fn fork(&self, t: TurnSpec) -> Box<dyn Driver> {
        Box::new(ClaudeRun {
            spec: t,
            fork: true,
            done: None,
        })
    }
}

/// What a completed turn left to check and bind.
struct Done {
    session: String,
    turn: Option<String>,
    reply: String,
}

/// One `claude` run: a turn, or (for a fork) `claude --version` as the agent's user, which
/// sends nothing anywhere.
struct ClaudeRun {
    spec: TurnSpec,
    fork: bool,
    done: Option<Done>,
}

impl ClaudeRun {
    fn args(&self) -> Vec<String> {
        let s = &self.spec.from.settings;
        if self.fork {
            return vec!["--version".into()];
        }
        let mut a: Vec<String> = [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--input-format",
            "text",
            "--permission-mode",
            "bypassPermissions",
        ]
        .map(String::from)
        .to_vec();
        if let Some(m) = &s.model {
            a.extend(["--model".into(), m.clone()]);
        }
        let from = &self.spec.from;
        match (&from.fork_pending, &from.session) {
            (Some(parent), Some(new)) => a.extend([
                "--resume".into(),
                parent.clone(),
                "--fork-session".into(),
                "--session-id".into(),
                new.clone(),
            ]),
            (None, Some(session)) => a.extend(["--resume".into(), session.clone()]),
            _ => {}
        }
        a.extend(s.agent_args.iter().cloned());
        a.extend(self.spec.extra_args.iter().cloned());
        a
    }

    /// Reads the stream to its `result` event.
    fn converse(&mut self, lines: &mut Lines) -> Result<Done, String> {
        let mut session = None;
        let mut last_uuid = None;
        loop {
            let m = lines.next_json()?;
            match m["type"].as_str() {
                Some("system") if m["subtype"] == "init" => {
                    session = m["session_id"].as_str().map(str::to_string);
                }
                Some("assistant") => {
                    last_uuid = m["uuid"].as_str().map(str::to_string);
                }
                Some("result") => {
                    if m["subtype"] != "success" || m["is_error"] == json!(true) {
                        return Err(format!(
                            "claude turn ended {}: {}",
                            m["subtype"].as_str().unwrap_or("?"),
                            m["result"]
                                .as_str()
                                .or_else(|| m["errors"][0].as_str())
                                .unwrap_or("no reason given")
                        ));
                    }
                    let s = m["session_id"]
                        .as_str()
                        .map(str::to_string)
                        .or(session)
                        .ok_or("claude named no session")?;
                    let reply = m["result"].as_str().ok_or("claude's result has no text")?;
                    return Ok(Done {
                        session: s,
                        turn: last_uuid,
                        reply: reply.to_string(),
                    });
                }
                _ => {}
            }
        }
    }

    /// The session file of `session` in the home (`projects/*/SESSION.jsonl`).
    fn session_file(&self, session: &str) -> Result<PathBuf, String> {
        let home = &self.spec.from.settings.home;
        session::find(home, Path::new("projects"), &format!("{session}.jsonl"), 2)
            .into_iter()
            .next()
            .ok_or_else(|| {
                format!(
                    "no session file of {session} under {}/projects",
                    home.display()
                )
            })
    }

    /// Checks the session file and makes the binding.
    fn bind(&self, d: &Done) -> Result<Binding, String> {
        let s = &self.spec.from.settings;
        let from = &self.spec.from;
        // A fork checks the parent's history, as the checkpoint holds it.
        let look_in = if self.fork {
            from.fork_pending.clone().or(from.session.clone())
        } else {
            Some(d.session.clone())
        }
        .ok_or("the checkpoint binds no Claude Code session to fork")?;
        let path = self.session_file(&look_in)?;
        let data = session::read(&s.home, &path).map_err(|e| e.to_string())?;
        let lines = session::lines(&data);
        let found = lines.iter().rev().find(|l| {
            l["type"] == "assistant" && assistant_text(l).as_deref() == Some(d.reply.as_str())
        });
        let Some(found) = found else {
            return Err(
                session::lacks(&path, "no assistant message with the final reply").to_string(),
            );
        };
        let mut b = Binding::fresh(s.clone());
        b.turn = d
            .turn
            .clone()
            .or_else(|| found["uuid"].as_str().map(str::to_string));
        b.set_reply(&d.reply);
        b.turn_args = self.spec.extra_args.clone();
        if self.fork {
            let parent = look_in;
            b.session = Some(new_session_id());
            b.fork_pending = Some(parent.clone());
            b.forked_from = self.spec.fork_of.map(|c| super::ForkOrigin {
                session: parent,
                turn: from.turn.clone(),
                checkpoint: c,
            });
            b.session_file = Some(path);
            b.session_file_len = Some(data.len() as u64);
        } else {
            b.session = Some(d.session.clone());
            b.forked_from = from.forked_from.clone();
            b.session_file = Some(path);
            b.session_file_len = Some(data.len() as u64);
        }
        Ok(b)
    }
}

/// The text of an assistant line of a session file (its text blocks, joined).
fn assistant_text(l: &Value) -> Option<String> {
    let blocks = l["message"]["content"].as_array()?;
    let text: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    (!text.is_empty()).then(|| text.join(""))
}

/// A random UUID (version 4) for a forked session.
fn new_session_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::getrandom(&mut b).is_err() {
        let t = crate::text::time::now_ns().to_le_bytes();
        b[..8].copy_from_slice(&t);
        b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

impl Driver for ClaudeRun {
    fn describe(&self) -> Vec<String> {
        let mut v = vec![self.spec.from.settings.binary.display().to_string()];
        v.extend(self.args());
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
        c.args(self.args())
            .env("CLAUDE_CONFIG_DIR", &s.home)
            .env("HOME", &s.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        if s.as_root {
            // Claude Code refuses bypassPermissions as root unless told it is sandboxed:
            // it is, in the workspace's cgroup, and root was asked for.
            c.env("IS_SANDBOX", "1");
        }
        c
    }

    fn drive(&mut self, mut child: Child) -> Result<ExitStatus, Failure> {
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let status = reap(&mut child, EXIT_WAIT).ok();
            return Err(Failure {
                status,
                reason: "claude started without pipes".into(),
                spawn: None,
            });
        };
        if self.fork {
            drop(stdin);
            drop(stdout);
            return reap(&mut child, EXIT_WAIT).map_err(|e| Failure {
                status: None,
                reason: format!("waiting for claude --version: {e}"),
                spawn: None,
            });
        }
        let wrote = stdin
            .write_all(self.spec.prompt.as_bytes())
            .map_err(|e| format!("writing the prompt to claude: {e}"));
        drop(stdin);
        let mut lines = Lines::start(stdout, self.spec.timeout);
        let talked = wrote.and_then(|()| self.converse(&mut lines));
        if talked.is_err() {
            let _gone = child.kill();
        }
        let status = reap(&mut child, EXIT_WAIT);
        match (talked, status) {
            (Ok(d), Ok(st)) => {
                self.done = Some(d);
                Ok(st)
            }
            (Err(reason), st) => Err(Failure {
                status: st.ok(),
                reason,
                spawn: None,
            }),
            (Ok(_), Err(e)) => Err(Failure {
                status: None,
                reason: format!("waiting for claude: {e}"),
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
        let d = if self.fork {
            let from = &self.spec.from;
            Done {
                session: from.session.clone().unwrap_or_default(),
                turn: from.turn.clone(),
                reply: from.reply.clone().unwrap_or_default(),
            }
        } else {
            self.done.take().ok_or("claude completed no turn")?
        };
        self.bind(&d).map(|b| b.to_meta())
    }
}
