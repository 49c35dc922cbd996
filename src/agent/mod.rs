//! Agent adapters: a native agent session (Codex, Claude Code) run turn after turn in a
//! room, each completed turn one checkpoint that binds the room's files to the session's ids
//! and final reply (docs/agents.md is the contract).
//!
//! One [`Adapter`] per agent CLI ([`codex`], [`claude`]) says how to start or resume the
//! branch's session, send a prompt, tell a completed turn from a failed one, and fork a
//! session natively; [`commands`] composes them with `runner::turn` (the cgroup, the user,
//! the claim, nothing recorded on failure) into `ckptfs agent init|turn|fork|log|transcript`.
//! What a checkpoint binds is a [`Binding`] under the meta key [`META_KEY`]; the branch's
//! session is the one its newest binding names ([`binding_of`]). The login is borrowed for
//! one turn ([`login`]); the session file is read through the safe module ([`session`]).

pub mod claude;
pub mod codex;
pub mod commands;
mod jsonl;
pub mod login;
pub mod session;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::Store;

/// The prefix of the meta keys of a checkpoint's [`Binding`] (`agent.session`...).
pub const META_KEY: &str = "agent";
/// The most of a final reply kept as text in a binding (its SHA-256 covers all of it).
pub const MAX_REPLY_TEXT: usize = 16 << 10;
/// How long a turn may take by default (`agent turn --timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long an agent process has to exit once its turn is over before it is killed.
pub const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Which agent CLI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// OpenAI Codex (`codex app-server`).
    Codex,
    /// Anthropic Claude Code (`claude -p --output-format stream-json`).
    Claude,
}

impl Kind {
    /// The adapter of this agent.
    pub fn adapter(self) -> &'static dyn Adapter {
        match self {
            Kind::Codex => &codex::Codex,
            Kind::Claude => &claude::Claude,
        }
    }

    /// `codex` or `claude`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Codex => "codex",
            Kind::Claude => "claude",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Kind> {
        match s {
            "codex" => Ok(Kind::Codex),
            "claude" => Ok(Kind::Claude),
            _ => Err(Error::Usage(format!(
                "agent {}: give codex or claude",
                crate::text::quote::text(s)
            ))),
        }
    }
}

/// What an adapter knows of its agent CLI.
pub trait Adapter: Sync {
    fn kind(&self) -> Kind;
    /// The command name looked up in PATH when no binary is given.
    fn program(&self) -> &'static str;
    /// The versions this adapter was tested with (native resume and fork fields change
    /// between versions; another one is refused unless accepted).
    fn tested_versions(&self) -> &'static [&'static str];
    /// The version out of `PROGRAM --version`'s output.
    fn parse_version(&self, out: &str) -> Option<String>;
    /// The environment variable that points the agent at its home.
    fn home_var(&self) -> &'static str;
    /// Where the agent's config file goes in the home (`--agent-config`).
    fn config_name(&self) -> &'static str;
    /// The config file `agent init` writes into the home when no `--agent-config` is given:
    /// the model and the policy, so the agent run by hand in the room (`codex resume`,
    /// `claude --resume`) behaves as it does under ckptfs.
    fn default_config(&self, model: Option<&str>) -> String;
    /// Where a borrowed login goes in the home.
    fn login_name(&self) -> &'static str;
    /// The approval and sandbox policy the agent runs under (recorded with every turn).
    fn policy(&self) -> serde_json::Value;
    /// Where a forked session's own file says its history ends in its parent's file (the
    /// parent's first bytes that belong to it), when the fork's file does not copy them.
    fn history_base(&self, own_file: &[u8]) -> Option<u64>;
    /// The driver of one turn: start or resume `b`'s session and send `prompt`.
    fn turn(&self, t: TurnSpec) -> Box<dyn crate::runner::driver::Driver>;
    /// The driver of a native fork of `from`'s session through its recorded turn, sending
    /// no model request.
    fn fork(&self, t: TurnSpec) -> Box<dyn crate::runner::driver::Driver>;
}

/// What an adapter's driver needs for one turn or fork.
#[derive(Clone, Debug)]
pub struct TurnSpec {
    /// The binding the branch holds (the session to resume or fork; settings).
    pub from: Binding,
    /// The prompt (empty for a fork).
    pub prompt: String,
    /// `--agent-arg`s of this call (after the recorded ones).
    pub extra_args: Vec<String>,
    /// The login to lend, if any (put in place as the process starts, removed before
    /// anything is recorded).
    pub login: Option<login::Lender>,
    /// The turn's time limit.
    pub timeout: Duration,
    /// The checkpoint being forked (forks only).
    pub fork_of: Option<ObjectId>,
}

/// The room's agent settings, as `agent init` recorded them (every binding carries them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub agent: Kind,
    /// The agent CLI (an absolute path).
    pub binary: PathBuf,
    /// Its version when the binding was made.
    pub version: String,
    /// The version was not one the adapter was tested with, and was accepted (audited).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub version_accepted: bool,
    /// The workspace root's path (the agent's working directory).
    pub workspace: PathBuf,
    /// The agent's home root's path (CODEX_HOME / CLAUDE_CONFIG_DIR).
    pub home: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Approval and sandbox policy (see [`Adapter::policy`]).
    pub policy: serde_json::Value,
    /// `--agent-arg`s given at init, passed on every turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_args: Vec<String>,
    /// Where the login is borrowed from (a path on the machine that ran init; never its
    /// bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_source: Option<PathBuf>,
    /// Whom the agent runs as (`--user`; None: the workspace's owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The agent runs as root (`--as-root`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub as_root: bool,
}

/// What a checkpoint binds: the settings, the native session and the completed turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    #[serde(flatten)]
    pub settings: Settings,
    /// The native session (Codex thread, Claude Code session) id; None before the first
    /// turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The completed turn's native id (Codex turn id; Claude Code's final message uuid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The final reply (at most [`MAX_REPLY_TEXT`] bytes of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// SHA-256 of the whole final reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_sha256: Option<String>,
    /// The session file (absolute, under the home) and its length at the turn's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file_len: Option<u64>,
    /// `--agent-arg`s of this turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turn_args: Vec<String>,
    /// Set by `agent fork`: the session and checkpoint this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    /// A fork the agent makes on the branch's first turn (Claude Code forks a session when it
    /// resumes it): the session id to resume and fork. The binding's `session` is the id the
    /// fork gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_pending: Option<String>,
}

/// Where a forked session comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    pub session: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    pub checkpoint: ObjectId,
}

impl Binding {
    /// A binding of `settings` with no session yet.
    pub fn fresh(settings: Settings) -> Binding {
        Binding {
            settings,
            session: None,
            turn: None,
            reply: None,
            reply_sha256: None,
            session_file: None,
            session_file_len: None,
            turn_args: Vec::new(),
            forked_from: None,
            fork_pending: None,
        }
    }

    /// Records `reply` (kept whole up to [`MAX_REPLY_TEXT`] bytes; hashed whole).
    pub fn set_reply(&mut self, reply: &str) {
        self.reply_sha256 = Some(ObjectId::of(reply.as_bytes()).to_hex());
        let mut end = reply.len().min(MAX_REPLY_TEXT);
        while !reply.is_char_boundary(end) {
            end -= 1;
        }
        self.reply = Some(reply[..end].to_string());
    }

    /// As meta: flat keys `agent.FIELD` (`agent.session`, `agent.forked_from.checkpoint`),
    /// so `log --meta agent.session=ID` finds a session's checkpoints; lists (`*_args`) as
    /// JSON text.
    pub fn to_meta(&self) -> crate::runner::driver::Bound {
        let mut m = crate::runner::driver::Bound::new();
        if let Ok(v) = serde_json::to_value(self) {
            flatten(META_KEY, &v, &mut m);
        }
        m
    }

    /// The binding in `meta`, if it holds one (`agent.agent` names the agent).
    ///
    /// # Errors
    /// `Corrupt` for `agent.*` keys that do not make a binding.
    pub fn from_meta(meta: &BTreeMap<String, serde_json::Value>) -> Result<Option<Binding>> {
        let prefix = format!("{META_KEY}.");
        let mut top = serde_json::Map::new();
        for (k, v) in meta {
            let Some(path) = k.strip_prefix(&prefix) else {
                continue;
            };
            let parts: Vec<&str> = path.split('.').collect();
            let mut obj = &mut top;
            for p in &parts[..parts.len() - 1] {
                let next = obj
                    .entry(p.to_string())
                    .or_insert_with(|| serde_json::Value::Object(Default::default()));
                let serde_json::Value::Object(o) = next else {
                    return Err(Error::Corrupt(format!(
                        "meta {k}: not an agent binding field"
                    )));
                };
                obj = o;
            }
            let last = parts[parts.len() - 1];
            let value = match v.as_str() {
                Some(t) if last.ends_with("_args") => {
                    serde_json::from_str(t).map_err(|e| Error::Corrupt(format!("meta {k}: {e}")))?
                }
                _ => v.clone(),
            };
            obj.insert(last.to_string(), value);
        }
        if top.is_empty() {
            return Ok(None);
        }
        serde_json::from_value(serde_json::Value::Object(top))
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("meta {prefix}*: not an agent binding: {e}")))
    }
}

/// `value` under `key` as flat meta keys (objects by dots, lists as JSON text).
fn flatten(key: &str, value: &serde_json::Value, out: &mut crate::runner::driver::Bound) {
    match value {
        serde_json::Value::Object(o) => {
            for (k, v) in o {
                flatten(&format!("{key}.{k}"), v, out);
            }
        }
        serde_json::Value::Array(_) => {
            out.insert(
                key.to_string(),
                serde_json::Value::String(value.to_string()),
            );
        }
        v => {
            out.insert(key.to_string(), v.clone());
        }
    }
}

/// The binding of checkpoint `id`, if it has one.
///
/// # Errors
/// Reading the record; `Corrupt` for an `agent` key that is not a binding.
pub fn binding_at(store: &Store, id: &ObjectId) -> Result<Option<Binding>> {
    let c = store.read_checkpoint(id)?;
    Binding::from_meta(&c.annotations.meta)
        .map_err(|e| e.within(format!("checkpoint {}", id.short())))
}

/// The binding `branch` holds: that of the newest checkpoint on its line of first parents
/// that has one (at most `runner::fingerprint::MAX_WALK` back), with its id.
///
/// # Errors
/// `NotFound` for a branch without a head; `Usage` when no checkpoint on its line binds an
/// agent (the store was not made by `agent init`).
pub fn binding_of(store: &Store, branch: &str) -> Result<(ObjectId, Binding)> {
    let head = store
        .read_branch(branch)?
        .ok_or_else(|| Error::NotFound(format!("branch {branch}")))?
        .head
        .ok_or_else(|| Error::NotFound(format!("branch {branch} has no checkpoint yet")))?;
    let mut cur = Some(head);
    for _ in 0..crate::runner::fingerprint::MAX_WALK {
        let Some(id) = cur else { break };
        if let Some(b) = binding_at(store, &id)? {
            return Ok((id, b));
        }
        cur = store.read_checkpoint(&id)?.parents.first().copied();
    }
    Err(Error::Usage(format!(
        "branch {branch} of {} binds no agent session: make the store with `ckptfs agent init`",
        store.root().display()
    )))
}

/// The version of agent CLI `binary` (`BINARY --version`, run with the fixed environment of
/// fingerprint commands, 10 s at most).
///
/// # Errors
/// `Usage` when it does not run or prints no version this adapter reads.
pub fn version_of(adapter: &dyn Adapter, binary: &Path) -> Result<String> {
    let out = jsonl::run_bounded(binary, &["--version"], Duration::from_secs(10))
        .map_err(|e| Error::Usage(format!("{}: {e}", binary.display())))?;
    adapter.parse_version(&out).ok_or_else(|| {
        Error::Usage(format!(
            "{} --version printed no {} version: {}",
            binary.display(),
            adapter.kind().name(),
            crate::text::quote::text(out.trim())
        ))
    })
}

/// Refuses a version the adapter was not tested with unless `accept` (then audited, naming
/// `what` the store was doing). Returns whether it was accepted.
///
/// # Errors
/// `Usage` naming the version and the tested ones; writing the audit line.
pub fn check_version(
    store: Option<&Store>,
    adapter: &dyn Adapter,
    version: &str,
    accept: bool,
    what: &str,
) -> Result<bool> {
    let tested = adapter.tested_versions();
    if tested.contains(&version) {
        return Ok(false);
    }
    if !accept {
        return Err(Error::Usage(format!(
            "{} {version} is not a version ckptfs was tested with ({}): native resume and fork \
             change between versions; pass --accept-agent-version to {what} anyway (audited)",
            adapter.kind().name(),
            tested.join(", ")
        )));
    }
    if let Some(s) = store {
        s.append_audit(&serde_json::json!({
            "time": crate::text::time::format_utc(crate::text::time::now_ns()),
            "op": "accept-agent-version", "pid": std::process::id(),
            "args": {"agent": adapter.kind(), "version": version, "for": what,
                     "tested": tested},
            "ok": true, "result": null}))?;
    }
    Ok(true)
}
