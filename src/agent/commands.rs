//! `ckptfs agent init|turn|fork|log|transcript`: the adapters composed with the store, the
//! workspace and `runner::turn` (docs/agents.md).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use super::login::{self, Lender};
use super::{binding_at, binding_of, check_version, version_of, Adapter, Binding, Kind, Settings};
use super::{TurnSpec, DEFAULT_TIMEOUT};
use crate::error::{Error, Result};
use crate::fs::safe::Dir;
use crate::id::ObjectId;
use crate::runner::fingerprint;
use crate::runner::run_as::RunAsOptions;
use crate::runner::turn::{self, TurnOptions, TurnReport};
use crate::store::checkpoint::{Annotations, Runtime, RuntimeDecl};
use crate::store::{InitOptions, RootConfig, Store};
use crate::workspace;

/// The root names of an agent's store.
pub const WORKSPACE_ROOT: &str = "workspace";
pub const HOME_ROOT: &str = "home";

/// `agent init`.
#[derive(Clone, Debug)]
pub struct AgentInit {
    pub store: PathBuf,
    pub agent: Kind,
    pub workspace: PathBuf,
    pub home: PathBuf,
    pub model: Option<String>,
    pub auth_source: Option<PathBuf>,
    pub user: Option<String>,
    pub as_root: bool,
    /// The agent's own config file, copied into the home.
    pub agent_config: Option<PathBuf>,
    pub agent_args: Vec<String>,
    /// The agent CLI (default: the adapter's program in PATH).
    pub binary: Option<PathBuf>,
    pub accept_agent_version: bool,
    /// Compress stored chunks (zstd).
    pub zstd: bool,
}

/// What `agent init` did.
#[derive(Clone, Debug, Serialize)]
pub struct InitReport {
    pub store: PathBuf,
    pub checkpoint: ObjectId,
    pub branch: String,
    #[serde(flatten)]
    pub settings: Settings,
}

/// Who owns what init creates: the `--user`'s uid/gid, else the workspace's owner when it
/// exists, else the caller.
fn owner_of(o: &AgentInit) -> Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if let Some(u) = &o.user {
        let user = nix::unistd::User::from_name(u)
            .map_err(|e| Error::io_op("reading the user database", e.into()))?
            .ok_or_else(|| Error::Usage(format!("--user {u}: no such user")))?;
        return Ok((user.uid.as_raw(), user.gid.as_raw()));
    }
    if let Ok(m) = std::fs::symlink_metadata(&o.workspace) {
        return Ok((m.uid(), m.gid()));
    }
    Ok((
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    ))
}

/// Makes `dir` (and missing parents, as root's) when missing; a new last component is given
/// to `owner` with `mode`.
fn ensure_dir(dir: &Path, owner: (u32, u32), mode: u32) -> Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::Usage(format!(
            "{} is not a directory",
            dir.display()
        ))),
        Err(_) => {
            let parent = dir
                .parent()
                .ok_or_else(|| Error::Usage(format!("{}: no parent", dir.display())))?;
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
            let name = dir.file_name().unwrap_or_default();
            let p = Dir::open(parent)?;
            p.create_dir(name, mode)?;
            p.set_owner(name, owner.0, owner.1)?;
            p.set_mode(name, mode)
        }
    }
}

/// Copies the operator's `--agent-config` into the home as the adapter's config file
/// (refused when the home has one); without it, writes the adapter's default config (model
/// and policy) unless the home has a config already.
fn put_config(o: &AgentInit, a: &dyn Adapter, owner: (u32, u32)) -> Result<()> {
    let data = match &o.agent_config {
        Some(src) => std::fs::read(src)
            .map_err(|e| Error::Usage(format!("--agent-config {}: {e}", src.display())))?,
        None => {
            // A home that has its own config keeps it.
            if Dir::open(&o.home)?
                .stat(OsStr::new(a.config_name()))?
                .is_some()
            {
                return Ok(());
            }
            a.default_config(o.model.as_deref()).into_bytes()
        }
    };
    let home = Dir::open(&o.home)?;
    let name = OsStr::new(a.config_name());
    if home.stat(name)?.is_some() {
        return Err(Error::Conflict(format!(
            "{} already has {}: remove it or drop --agent-config",
            o.home.display(),
            a.config_name()
        )));
    }
    let path = o.home.join(a.config_name());
    let mut f = home.create_file(name, 0o600)?;
    f.write_all(&data).map_err(|e| Error::io(&path, e))?;
    crate::fs::safe::set_owner_fd(&f, &path, owner.0, owner.1)?;
    f.sync_all().map_err(|e| Error::io(&path, e))
}

/// The agent CLI to use: `given`, else the adapter's program in PATH; absolute, resolved.
fn resolve_binary(a: &dyn Adapter, given: Option<&Path>) -> Result<PathBuf> {
    let p = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let path = std::env::var_os("PATH").unwrap_or_default();
            std::env::split_paths(&path)
                .map(|d| d.join(a.program()))
                .find(|c| c.is_file())
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{} is not in PATH: install it or give --agent-binary",
                        a.program()
                    ))
                })?
        }
    };
    std::fs::canonicalize(&p).map_err(|e| Error::Usage(format!("{}: {e}", p.display())))
}

/// `ckptfs agent init`: the store, the home with the agent's config, the fingerprint, and the
/// first checkpoint (binding the settings, no session yet).
///
/// # Errors
/// `Usage` for bad paths, an untested version not accepted, an unreadable login or config;
/// what `Store::init` and capture refuse.
pub fn init(o: &AgentInit) -> Result<InitReport> {
    let a = o.agent.adapter();
    for (what, p) in [("--workspace", &o.workspace), ("--home", &o.home)] {
        if !p.is_absolute() {
            return Err(Error::Usage(format!(
                "{what} {}: give an absolute path",
                p.display()
            )));
        }
    }
    if o.workspace.starts_with(&o.home) || o.home.starts_with(&o.workspace) {
        return Err(Error::Usage(format!(
            "--home {} and --workspace {} must not contain each other: the agent's home is a \
             root of its own",
            o.home.display(),
            o.workspace.display()
        )));
    }
    if o.user.is_some() && o.as_root {
        return Err(Error::Usage("give --user or --as-root, not both".into()));
    }
    let binary = resolve_binary(a, o.binary.as_deref())?;
    let roots = [o.workspace.clone(), o.home.clone()];
    let binary = crate::store::trust::check_program(&binary, &roots)
        .map_err(|e| Error::Usage(e.to_string()))?;
    let version = version_of(a, &binary)?;
    let accepted = check_version(None, a, &version, o.accept_agent_version, "init")?;
    if let Some(src) = &o.auth_source {
        login::read_source(src)?;
    }
    let owner = owner_of(o)?;
    ensure_dir(&o.workspace, owner, 0o755)?;
    ensure_dir(&o.home, owner, 0o700)?;
    put_config(o, a, owner)?;
    let mut roots_cfg = BTreeMap::new();
    for (name, path) in [(WORKSPACE_ROOT, &o.workspace), (HOME_ROOT, &o.home)] {
        roots_cfg.insert(
            name.to_string(),
            RootConfig {
                path: path.clone(),
                exclude: Vec::new(),
            },
        );
    }
    // The lent login's name at the home's top stays out of every checkpoint (the default
    // credential rules have both agents' names; this says it for the home whatever they are).
    if let Some(h) = roots_cfg.get_mut(HOME_ROOT) {
        h.exclude.push(format!("/{}", a.login_name()));
    }
    let store = Store::init(
        &o.store,
        &InitOptions {
            roots: roots_cfg,
            zstd: o.zstd,
            no_default_excludes: false,
        },
    )?;
    if accepted {
        check_version(Some(&store), a, &version, true, "init")?;
    }
    declare_agent(&store, &binary)?;
    let store = crate::remote::open_store(store.root())?;
    let settings = Settings {
        agent: o.agent,
        binary,
        version,
        version_accepted: accepted,
        workspace: o.workspace.clone(),
        home: o.home.clone(),
        model: o.model.clone(),
        policy: a.policy(),
        agent_args: o.agent_args.clone(),
        auth_source: o.auth_source.clone(),
        user: o.user.clone(),
        as_root: o.as_root,
    };
    let binding = Binding::fresh(settings.clone());
    let r = crate::ingest::capture::capture(
        &store,
        &crate::ingest::capture::CaptureOptions {
            branch: "main".into(),
            label: None,
            message: format!("agent init ({} {})", a.kind().name(), settings.version),
            from: BTreeMap::new(),
            exclude: Vec::new(),
            progress: false,
            annotations: Annotations {
                meta: binding.to_meta(),
                runtime: Some(fingerprint::current(&store, Some("main"))),
                turn: None,
            },
        },
    )?;
    Ok(InitReport {
        store: store.root().to_path_buf(),
        checkpoint: r.id,
        branch: "main".into(),
        settings,
    })
}

/// Declares the agent binary's digest and `BINARY --version` in the store's runtime
/// fingerprint, when the declaration lacks them (a store made by `agent init`; a clone, whose
/// STORE.json is its own, on its first turn).
///
/// # Errors
/// As `fingerprint::declare`.
fn declare_agent(store: &Store, binary: &Path) -> Result<()> {
    let mut decl = fingerprint::declaration(store, None);
    let file = binary.display().to_string();
    let command = format!("{file} --version");
    if decl.files.contains(&file) && decl.commands.contains(&command) {
        return Ok(());
    }
    if !decl.files.contains(&file) {
        decl.files.push(file);
    }
    if !decl.commands.contains(&command) {
        decl.commands.push(command);
    }
    fingerprint::declare(
        store,
        None,
        &RuntimeDecl {
            files: decl.files,
            commands: decl.commands,
            branches: Default::default(),
        },
    )
}

/// `agent turn` and `agent fork`: what they share.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    pub branch: String,
    pub label: Option<String>,
    pub extra_args: Vec<String>,
    /// Lend the login from this file instead of the recorded `--auth-source`.
    pub auth_source: Option<PathBuf>,
    pub timeout: Option<Duration>,
    pub accept_agent_version: bool,
    pub accept_runtime_change: bool,
    /// `agent turn --retry`.
    pub retry: bool,
    /// `--user` / `--as-root` of this call (the recorded ones apply when neither is given,
    /// except root, which must be asked for every time).
    pub run_as: RunAsOptions,
}

/// What `agent turn` or `agent fork` did: the turn's report and what its checkpoint binds.
#[derive(Clone, Debug, Serialize)]
pub struct AgentReport {
    #[serde(flatten)]
    pub turn: TurnReport,
    /// What the checkpoint binds (only when `ok`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
}

/// The branch's workspace mounted (as `turn` would) and a login a killed turn left in its
/// home removed, before the turn (so `--retry` never sets a login aside into the store).
fn ready_workspace(store: &Store, branch: &str, s: &Settings) -> Result<()> {
    workspace::ensure_mounted(store, branch)?;
    if login::remove(&s.home, s.agent.adapter().login_name())? {
        log::warn!(
            "removed a login a turn left in {} (its runner was killed?)",
            s.home.display()
        );
    }
    Ok(())
}

/// The settings of `b` as they are for this run: the version now (checked), accepted or
/// not; and the runtime fingerprint now, whose `BINARY --version` gives the version (so the
/// agent CLI is asked once per turn).
fn settings_now(
    store: &Store,
    branch: &str,
    b: &Binding,
    o: &RunOptions,
    what: &str,
) -> Result<(Settings, Runtime)> {
    let a = b.settings.agent.adapter();
    // The binding names the roots and the binary; a store made elsewhere is not trusted to
    // choose them: the roots must be the store's own, the binary a trusted program.
    for (name, path) in [
        (WORKSPACE_ROOT, &b.settings.workspace),
        (HOME_ROOT, &b.settings.home),
    ] {
        let ours = store.config().roots.get(name).map(|r| &r.path);
        if ours != Some(path) {
            return Err(Error::Untrusted(format!(
                "branch {branch}'s agent binding names root {name} at {}, which is not the \
                 store's ({})",
                path.display(),
                ours.map_or("none".into(), |p| p.display().to_string())
            )));
        }
    }
    let roots = [b.settings.workspace.clone(), b.settings.home.clone()];
    crate::store::trust::check_program(&b.settings.binary, &roots)
        .map_err(|e| Error::Usage(format!("agent binary: {e}")))?;
    declare_agent(store, &b.settings.binary)?;
    // Again: the declaration may have just been written.
    let store = &crate::remote::open_store(store.root())?;
    let now = fingerprint::current(store, Some(branch));
    let mut s = b.settings.clone();
    let probe = format!("{} --version", s.binary.display());
    s.version = match now
        .commands
        .get(&probe)
        .and_then(|out| a.parse_version(out))
    {
        Some(v) => v,
        None => version_of(a, &s.binary)?,
    };
    s.version_accepted = check_version(Some(store), a, &s.version, o.accept_agent_version, what)?;
    Ok((s, now))
}

fn lender(s: &Settings, o: &RunOptions) -> Result<Option<Lender>> {
    let src = o.auth_source.as_ref().or(s.auth_source.as_ref());
    match src {
        None => Ok(None),
        Some(p) => Ok(Some(Lender::new(
            &s.home,
            s.agent.adapter().login_name(),
            login::read_source(p)?,
        ))),
    }
}

/// Whom the agent runs as: this call's `--user`/`--as-root`, else the recorded user. A
/// recorded `as_root` is not enough (the binding may come from a store made elsewhere): it
/// must be asked for again.
fn run_as_for(o: &RunOptions, s: &Settings) -> Result<RunAsOptions> {
    if o.run_as.user.is_some() || o.run_as.as_root {
        return Ok(o.run_as.clone());
    }
    if s.as_root {
        return Err(Error::Usage(
            "the room's agent was set up to run as root: pass --as-root to run it as root \
             again, or --user USER"
                .into(),
        ));
    }
    Ok(RunAsOptions {
        user: s.user.clone(),
        as_root: false,
    })
}

fn turn_options(o: &RunOptions, s: &Settings, message: String, kind: &str) -> Result<TurnOptions> {
    Ok(TurnOptions {
        branch: o.branch.clone(),
        label: o.label.clone(),
        message,
        meta: BTreeMap::new(),
        meta_file: None,
        command: Vec::new(),
        retry: o.retry,
        accept_runtime_change: o.accept_runtime_change,
        no_fold: false,
        run_as: run_as_for(o, s)?,
        driver: Some(format!("agent-{kind}:{}", s.agent.name())),
        runtime_now: None,
    })
}

fn report(store: &Store, r: TurnReport) -> Result<AgentReport> {
    let binding = match &r.checkpoint {
        Some(id) => binding_at(store, id)?,
        None => None,
    };
    Ok(AgentReport { turn: r, binding })
}

/// `ckptfs agent turn`: one prompt to the branch's native session, one checkpoint binding
/// the completed turn, or nothing (see docs/agents.md).
///
/// # Errors
/// Before the agent runs: as `runner::turn::run_driven`, an untested version, an unreadable
/// login. After: the report says what happened.
pub fn turn(store: &Store, prompt: &str, o: &RunOptions) -> Result<AgentReport> {
    if prompt.trim().is_empty() {
        return Err(Error::Usage("the prompt is empty".into()));
    }
    let (_, from) = binding_of(store, &o.branch)?;
    let (settings, now) = settings_now(store, &o.branch, &from, o, "run a turn")?;
    // Again: settings_now may have declared the agent in STORE.json.
    let store = &crate::remote::open_store(store.root())?;
    let login = lender(&settings, o)?;
    let first = prompt.lines().next().unwrap_or("").trim();
    let mut short: String = first.chars().take(72).collect();
    if short.len() < first.len() {
        short.push_str("...");
    }
    // Every refusal before any work: the turn's options (whom it runs as) first.
    let mut t = turn_options(o, &settings, format!("agent turn: {short}"), "turn")?;
    t.runtime_now = Some(now);
    ready_workspace(store, &o.branch, &settings)?;
    let mut from = from;
    from.settings = settings.clone();
    let a = settings.agent.adapter();
    let mut driver = a.turn(TurnSpec {
        from,
        prompt: prompt.to_string(),
        extra_args: o.extra_args.clone(),
        login,
        timeout: o.timeout.unwrap_or(DEFAULT_TIMEOUT),
        fork_of: None,
    });
    report(store, turn::run_driven(store, &t, driver.as_mut())?)
}

/// `ckptfs agent fork`: branch `name` at `checkpoint`, shown at the room's paths (the branch
/// mounted there is switched away, as `switch` does), and a native fork of the checkpoint's
/// session through its recorded turn, with no model request, recorded as the new branch's
/// first checkpoint.
///
/// # Errors
/// `Usage` when the checkpoint binds no completed turn; what `fork`, `switch` and the turn
/// refuse.
pub fn fork(store: &Store, checkpoint: &str, name: &str, o: &RunOptions) -> Result<AgentReport> {
    let id = store.resolve(checkpoint)?;
    let from = binding_at(store, &id)?.ok_or_else(|| {
        Error::Usage(format!(
            "checkpoint {} binds no agent session (not made by `ckptfs agent`)",
            id.short()
        ))
    })?;
    if from.session.is_none() || from.turn.is_none() {
        return Err(Error::Usage(format!(
            "checkpoint {} binds no completed turn to fork (the first checkpoint of `agent \
             init` has none): fork a turn's checkpoint",
            id.short()
        )));
    }
    let mut o = o.clone();
    o.branch = name.to_string();
    let (settings, _) = settings_now(store, name, &from, &o, "fork")?;
    let store = &crate::remote::open_store(store.root())?;
    let t = turn_options(
        &o,
        &settings,
        format!("agent fork of checkpoint {}", id.short()),
        "fork",
    )?;
    workspace::fork(store, checkpoint, name)?;
    // Show the fork at the room's paths: the branch mounted there goes (refused, naming
    // why, when it holds changes not checkpointed).
    for st in workspace::states(store)? {
        if st.branch != name && workspace::is_live(store, &st)? {
            workspace::switch(
                store,
                &st.branch,
                name,
                workspace::DirtyPolicy::Refuse,
                None,
            )?;
            break;
        }
    }
    ready_workspace(store, name, &settings)?;
    let mut from = from;
    from.settings = settings.clone();
    let mut driver = settings.agent.adapter().fork(TurnSpec {
        from,
        prompt: String::new(),
        extra_args: o.extra_args.clone(),
        login: lender(&settings, &o)?,
        timeout: o.timeout.unwrap_or(DEFAULT_TIMEOUT),
        fork_of: Some(id),
    });
    report(store, turn::run_driven(store, &t, driver.as_mut())?)
}

/// One line of `agent log`.
#[derive(Clone, Debug, Serialize)]
pub struct LogRow {
    #[serde(flatten)]
    pub turn: turn::TurnRow,
    /// `turn` or `fork`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<Binding>,
}

/// `ckptfs agent log`: every agent turn and fork (of `branch`), newest first, with what its
/// checkpoint binds.
///
/// # Errors
/// Reading the audit log or a record.
pub fn log(store: &Store, branch: Option<&str>) -> Result<Vec<LogRow>> {
    let drivers = turn::turn_drivers(store)?;
    let mut out = Vec::new();
    for row in turn::turns(store, branch)? {
        let Some(d) = drivers.get(&row.turn) else {
            continue;
        };
        let Some(kind) = d.strip_prefix("agent-").and_then(|k| k.split(':').next()) else {
            continue;
        };
        let binding = match &row.checkpoint {
            Some(c) => binding_at(store, &store.resolve(c)?)?,
            None => None,
        };
        out.push(LogRow {
            kind: kind.to_string(),
            turn: row,
            binding,
        });
    }
    Ok(out)
}

/// How many forks back `agent transcript` follows.
pub const MAX_FORK_DEPTH: usize = 64;

/// `ckptfs agent transcript`: the native history as `checkpoint` holds it: the bound session
/// file's first `session_file_len` bytes, after its fork ancestors' part of the history when
/// the agent keeps that in the parent's file (Codex).
///
/// # Errors
/// `Usage` when the checkpoint binds no session file; reading files from the store.
pub fn transcript(store: &Store, checkpoint: &str, out: &mut dyn Write) -> Result<()> {
    let id = store.resolve(checkpoint)?;
    let mut parts = Vec::new();
    let mut cur = Some((id, None));
    while let Some((id, limit)) = cur.take() {
        if parts.len() >= MAX_FORK_DEPTH {
            return Err(Error::Corrupt(format!(
                "checkpoint {}: more than {MAX_FORK_DEPTH} forks back",
                id.short()
            )));
        }
        let b = binding_at(store, &id)?.ok_or_else(|| {
            Error::Usage(format!("checkpoint {} binds no agent session", id.short()))
        })?;
        let mut own = session_bytes(store, &id, &b)?;
        if let Some(l) = limit {
            own.truncate(usize::try_from(l).unwrap_or(usize::MAX));
        }
        let base = b.settings.agent.adapter().history_base(&own);
        if let (Some(end), Some(f)) = (base, &b.forked_from) {
            cur = Some((f.checkpoint, Some(end)));
        }
        parts.push(own);
    }
    for p in parts.iter().rev() {
        out.write_all(p)
            .map_err(|e| Error::io_op("writing the transcript", e))?;
    }
    Ok(())
}

/// The session file `b` binds at checkpoint `id`, its first `session_file_len` bytes, read
/// from the store.
fn session_bytes(store: &Store, id: &ObjectId, b: &Binding) -> Result<Vec<u8>> {
    let (Some(file), Some(len)) = (&b.session_file, b.session_file_len) else {
        return Err(Error::Usage(format!(
            "checkpoint {} binds no session file yet (no turn has completed)",
            id.short()
        )));
    };
    let rel = file.strip_prefix(&b.settings.home).map_err(|_| {
        Error::Corrupt(format!(
            "checkpoint {}: session file {} is not under the home {}",
            id.short(),
            file.display(),
            b.settings.home.display()
        ))
    })?;
    let spec = format!("{}:{HOME_ROOT}/{}", id.to_hex(), rel.display());
    let loc = crate::history::walk::locate(store, &spec)?;
    let Some(crate::store::tree::Entry {
        kind: crate::store::tree::EntryKind::File { chunks },
        ..
    }) = &loc.entry
    else {
        return Err(Error::Corrupt(format!("{spec}: not a regular file")));
    };
    let mut data = Vec::new();
    for c in chunks {
        if data.len() as u64 >= len {
            break;
        }
        data.extend_from_slice(&store.read_chunk(c)?);
    }
    data.truncate(usize::try_from(len).unwrap_or(usize::MAX));
    Ok(data)
}
