//! Runtime fingerprints: what an agent's saved session depends on, so a resume on a changed
//! runtime is refused instead of silently mixing versions (native resume formats are
//! version-dependent).
//!
//! A fingerprint ([`Runtime`]) always holds the platform (OS, kernel release, architecture,
//! C library) and, as the store declares in STORE.json's `runtime` ([`RuntimeDecl`]), the
//! SHA-256 of files (an agent binary, an interpreter: a bare name is looked up in PATH) and the
//! output of commands (`python3 --version`). Every checkpoint of a turn records the
//! fingerprint it ran under. A branch's fingerprint is that of the newest checkpoint on its
//! line of first parents that has one (at most [`MAX_WALK`] records back); `mount --branch`,
//! `exec` and `turn` compare it with the current one and refuse, naming each field that
//! differs, unless `--accept-runtime-change`, which is audited.
//!
//! Declared commands and files are root's configuration, never the agent's: a command runs
//! with working directory `/`, stdin empty and only the environment [`COMMAND_ENV`] (PATH
//! [`SYSTEM_PATH`]), never the caller's. A simple command line (a program and its arguments,
//! no quotes or shell syntax) has its program resolved to an absolute path when it is declared
//! (in the caller's PATH) and stored so; at run time the program (a bare name, in a
//! declaration from an older build, is looked up in [`SYSTEM_PATH`]) must pass
//! [`trust::check_program`] (owned by root or the caller, in directories others cannot write,
//! outside any root of the store and any ckptfs mount) or the field records `refused: ...`.
//! A line with shell syntax is run by `/bin/sh -c` under the same rules. A declared file is
//! hashed through a non-blocking, no-follow open of its resolved path, regular files only.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::{Runtime, RuntimeDecl};
use crate::store::{trust, Store};

/// How many records back along first parents a branch's fingerprint is looked for.
pub const MAX_WALK: usize = 256;
/// Longest time a declared command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// Output of a declared command kept as text up to this many bytes (one line); longer
/// output is recorded as its SHA-256.
pub const MAX_OUTPUT_TEXT: usize = 200;
/// Most output read from a declared command (the rest is drained, not hashed).
const MAX_OUTPUT: u64 = 1 << 20;
/// Most files and commands a store may declare.
pub const MAX_DECLARED: usize = 64;
/// The PATH a declared command runs with, and where a bare name in an older declaration is
/// looked up: system directories only.
pub const SYSTEM_PATH: &str = crate::fs::programs::SYSTEM_PATH;
/// The whole environment of a declared command (nothing of the caller's is passed on).
pub const COMMAND_ENV: [(&str, &str); 3] = [("PATH", SYSTEM_PATH), ("LC_ALL", "C"), ("HOME", "/")];
/// The shell a declared line with shell syntax runs in.
const SHELL: &str = "/bin/sh";
/// Characters that make a declared line a shell line rather than a program and its words.
const SHELL_SYNTAX: &[char] = &[
    '\'', '"', '\\', '|', '&', ';', '<', '>', '(', ')', '$', '`', '*', '?', '[', ']', '{', '}',
    '~', '#', '!', '\t',
];

/// One field that differs between a branch's fingerprint and the current one.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Difference {
    /// `platform.kernel`, `file:/usr/bin/agent`, `command:python3 --version`.
    pub field: String,
    /// As recorded (None: the recorded fingerprint has no such field).
    pub recorded: Option<String>,
    /// As it is now (None: not part of the current declaration).
    pub now: Option<String>,
}

impl Difference {
    /// `FIELD: RECORDED -> NOW`, for messages.
    pub fn describe(&self) -> String {
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not recorded)".into());
        format!(
            "{}: {} -> {}",
            self.field,
            side(&self.recorded),
            side(&self.now)
        )
    }
}

/// The platform part: `os`, `kernel`, `arch`, `libc`.
pub fn platform() -> BTreeMap<String, String> {
    let u = nix::sys::utsname::uname();
    let text = |s: &std::ffi::OsStr| s.to_string_lossy().into_owned();
    let mut out = BTreeMap::new();
    match &u {
        Ok(u) => {
            out.insert("os".into(), text(u.sysname()));
            out.insert("kernel".into(), text(u.release()));
            out.insert("arch".into(), text(u.machine()));
        }
        Err(e) => {
            out.insert("os".into(), format!("unknown ({e})"));
        }
    }
    out.insert("libc".into(), crate::fs::sys::libc_version());
    out
}

/// Checks a declaration: at most [`MAX_DECLARED`] entries, no empty ones, no NUL or newline.
///
/// # Errors
/// `Usage` naming the entry at fault.
pub fn check_decl(d: &RuntimeDecl) -> Result<()> {
    for (b, own) in &d.branches {
        crate::store::refs::check_name("branch", b)?;
        if !own.branches.is_empty() {
            return Err(Error::Usage(format!(
                "the runtime declaration of branch {b} declares branches of its own"
            )));
        }
        check_decl(own)?;
    }
    if d.files.len() + d.commands.len() > MAX_DECLARED {
        return Err(Error::Usage(format!(
            "a runtime declares at most {MAX_DECLARED} files and commands"
        )));
    }
    for (what, v) in d
        .files
        .iter()
        .map(|f| ("--file", f))
        .chain(d.commands.iter().map(|c| ("--command", c)))
    {
        if v.trim().is_empty() || v.len() > 4096 || v.contains(['\0', '\n']) {
            return Err(Error::Usage(format!(
                "{what} {v:?}: give a non-empty line of at most 4096 bytes"
            )));
        }
    }
    for f in &d.files {
        if f.contains('/') && !f.starts_with('/') {
            return Err(Error::Usage(format!(
                "--file {f}: give an absolute path or a command name found in PATH"
            )));
        }
    }
    Ok(())
}

/// The declaration `branch` uses (its own, else the store's; `None`: the store's).
pub fn declaration(store: &Store, branch: Option<&str>) -> RuntimeDecl {
    store
        .config()
        .runtime
        .as_ref()
        .map(|d| d.for_branch(branch))
        .unwrap_or_default()
}

/// The paths of the store's roots: no declared program inside them is run.
fn root_paths(store: &Store) -> Vec<PathBuf> {
    store
        .config()
        .roots
        .values()
        .map(|r| r.path.clone())
        .collect()
}

/// The current fingerprint under the declaration `branch` uses (see [`declaration`]). A
/// declared file's digest is taken from the store's cache while the file is the very same
/// (see [`DigestCache`]).
pub fn current(store: &Store, branch: Option<&str>) -> Runtime {
    let roots = root_paths(store);
    let mut cache = DigestCache::load(store.cache_dir().join(DIGEST_CACHE));
    let r = compute_with(&declaration(store, branch), &roots, &mut cache);
    cache.save();
    r
}

/// The fingerprint of this machine under `decl`; no declared program inside `roots` is run.
pub fn compute(decl: &RuntimeDecl, roots: &[PathBuf]) -> Runtime {
    compute_with(decl, roots, &mut DigestCache::none())
}

/// The name of the digest cache in the store's cache directory.
pub const DIGEST_CACHE: &str = "file-digests.json";

/// Digests of declared files by the identity of what was hashed: device, inode, size, mtime
/// and ctime (which no one but root can set back), so an agent binary of hundreds of MiB is
/// hashed once, not every turn. Advisory: a cache that does not read is empty; one that does
/// not write is skipped.
pub struct DigestCache {
    path: Option<PathBuf>,
    entries: BTreeMap<String, (String, String)>,
    changed: bool,
}

impl DigestCache {
    fn none() -> DigestCache {
        DigestCache {
            path: None,
            entries: BTreeMap::new(),
            changed: false,
        }
    }

    fn load(path: PathBuf) -> DigestCache {
        let entries = crate::fs::safe::open_regular_path(&path, false)
            .ok()
            .flatten()
            .and_then(|(f, _)| {
                let mut data = Vec::new();
                f.take(1 << 20).read_to_end(&mut data).ok()?;
                serde_json::from_slice(&data).ok()
            })
            .unwrap_or_default();
        DigestCache {
            path: Some(path),
            entries,
            changed: false,
        }
    }

    fn save(&self) {
        let (Some(p), true) = (&self.path, self.changed) else {
            return;
        };
        if let Ok(data) = serde_json::to_vec(&self.entries) {
            if let Err(e) = crate::fs::atomic::write_atomic_replace_volatile(p, &data, 0o600) {
                log::debug!("digest cache not written: {e}");
            }
        }
    }

    /// The identity of `st` as cached.
    fn identity(st: &crate::fs::safe::Stat) -> String {
        format!(
            "{}:{}:{}:{}.{}:{}.{}",
            st.dev, st.ino, st.size, st.mtime.0, st.mtime.1, st.ctime.0, st.ctime.1
        )
    }
}

/// The fingerprint of this machine under `decl`, with declared files' digests cached.
fn compute_with(decl: &RuntimeDecl, roots: &[PathBuf], cache: &mut DigestCache) -> Runtime {
    compute_taking(decl, roots, cache, Output::Stdout)
}

/// Which output of a declared command is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// stdout only (what is recorded now: a warning on stderr that depends on the
    /// environment is not the runtime).
    Stdout,
    /// stdout and stderr through one pipe, as records made before `command_output` hold.
    Both,
}

fn compute_taking(
    decl: &RuntimeDecl,
    roots: &[PathBuf],
    cache: &mut DigestCache,
    output: Output,
) -> Runtime {
    Runtime {
        command_output: (output == Output::Stdout && !decl.commands.is_empty())
            .then(|| "stdout".to_string()),
        platform: platform(),
        files: decl
            .files
            .iter()
            .map(|f| (f.clone(), file_print(f, cache)))
            .collect(),
        commands: decl
            .commands
            .iter()
            .map(|c| (c.clone(), command_print(c, roots, output)))
            .collect(),
    }
}

/// `sha256:<hex> <resolved path>` of a declared file, `missing`, or `unreadable: ERROR`.
fn file_print(declared: &str, cache: &mut DigestCache) -> String {
    let Some(path) = lookup(declared, SYSTEM_PATH) else {
        return "missing".into();
    };
    let real = std::fs::canonicalize(&path).unwrap_or(path);
    match hash_file(&real, cache) {
        Ok(h) => format!("sha256:{h} {}", real.display()),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// A declared name's path: absolute as given, or a name looked up in the directories of
/// `path` (a PATH value).
fn lookup(declared: &str, path: &str) -> Option<PathBuf> {
    if declared.starts_with('/') {
        let p = PathBuf::from(declared);
        return p.exists().then_some(p);
    }
    std::env::split_paths(path)
        .map(|d| d.join(declared))
        .find(|p| p.is_file())
}

/// Whether a declared command line needs a shell (see [`SHELL_SYNTAX`]).
fn is_shell_line(cmd: &str) -> bool {
    cmd.contains(SHELL_SYNTAX)
}

/// A declaration as it is stored: each simple command's program and each file named bare
/// resolved to an absolute path in the caller's PATH, the program checked
/// ([`trust::check_program`]).
///
/// # Errors
/// `Usage` for a program or file not found; `Invalid` for a program that is not trusted.
pub fn resolve_decl(decl: &RuntimeDecl, roots: &[PathBuf]) -> Result<RuntimeDecl> {
    let caller_path = std::env::var("PATH").unwrap_or_else(|_| SYSTEM_PATH.to_string());
    let mut out = decl.clone();
    for f in &mut out.files {
        if !f.starts_with('/') {
            let p = lookup(f, &caller_path)
                .ok_or_else(|| Error::Usage(format!("--file {f}: not found in PATH")))?;
            *f = p.to_string_lossy().into_owned();
        }
    }
    for c in &mut out.commands {
        if is_shell_line(c) {
            continue;
        }
        let mut words = c.split(' ').filter(|w| !w.is_empty());
        let program = words.next().unwrap_or_default();
        let p = lookup(program, &caller_path).ok_or_else(|| {
            Error::Usage(format!(
                "--command {c:?}: program {program} not found in PATH"
            ))
        })?;
        trust::check_program(&p, roots)?;
        *c = std::iter::once(p.to_string_lossy().as_ref())
            .chain(words)
            .collect::<Vec<_>>()
            .join(" ");
    }
    Ok(out)
}

/// A declared file's bytes hashed: opened without following a symlink at its last component
/// and without blocking (a FIFO or device is refused, not read); the digest cached by the
/// identity of the open file.
fn hash_file(p: &Path, cache: &mut DigestCache) -> Result<String> {
    let (parent, name) = match (p.parent(), p.file_name()) {
        (Some(d), Some(n)) => (d, n),
        _ => return Err(Error::Invalid(format!("{} is not a file", p.display()))),
    };
    let (mut f, st) = crate::fs::safe::Dir::open(parent)?.open_file(name)?;
    let key = p.display().to_string();
    let id = DigestCache::identity(&st);
    if let Some((cached_id, digest)) = cache.entries.get(&key) {
        if *cached_id == id {
            return Ok(digest.clone());
        }
    }
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(p, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    let digest = ObjectId(h.finalize().into()).to_hex();
    cache.entries.insert(key, (id, digest.clone()));
    cache.changed = true;
    Ok(digest)
}

/// The process a declared command line runs as: the program checked, cwd `/`, the fixed
/// environment, stdin empty, stdout (and with [`Output::Both`] stderr) into a pipe whose read
/// end is returned; stderr otherwise to /dev/null.
fn command_for(cmd: &str, roots: &[PathBuf], output: Output) -> Result<(Command, std::fs::File)> {
    let mut c = if is_shell_line(cmd) {
        let shell = trust::check_program(Path::new(SHELL), roots)?;
        let mut c = Command::new(shell);
        c.arg("-c").arg(cmd);
        c
    } else {
        let mut words = cmd.split(' ').filter(|w| !w.is_empty());
        let program = words.next().unwrap_or_default();
        let found = lookup(program, SYSTEM_PATH)
            .ok_or_else(|| Error::NotFound(format!("program {program}")))?;
        let mut c = Command::new(trust::check_program(&found, roots)?);
        c.args(words);
        c
    };
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| Error::io_op("pipe", e.into()))?;
    let err = match output {
        Output::Both => Stdio::from(w.try_clone().map_err(|e| Error::io_op("pipe", e))?),
        Output::Stdout => Stdio::null(),
    };
    c.current_dir("/")
        .env_clear()
        .envs(COMMAND_ENV)
        .stdin(Stdio::null())
        .stdout(w)
        .stderr(err);
    Ok((c, std::fs::File::from(r)))
}

/// A declared command's output as recorded (see [`Runtime::commands`]).
fn command_print(cmd: &str, roots: &[PathBuf], output: Output) -> String {
    let (mut command, out) = match command_for(cmd, roots, output) {
        Ok(c) => c,
        Err(e) => return format!("refused: {e}"),
    };
    let spawned = command.spawn();
    // The parent's copies of the write end go with `command`, so the reader sees EOF when
    // the child (and whatever it left running) closes its own.
    drop(command);
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return format!("cannot run: {e}"),
    };
    // Read on a thread, so a command that floods its pipe cannot outlast the timeout.
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut o = out.take(MAX_OUTPUT);
        let _partial = o.read_to_end(&mut buf);
        let _drained = std::io::copy(&mut o.into_inner(), &mut std::io::sink());
        buf
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if t0.elapsed() < COMMAND_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _gone = child.kill();
                let _reaped = child.wait();
                break None;
            }
        }
    };
    let Some(status) = status else {
        return format!("timed out after {} s", COMMAND_TIMEOUT.as_secs());
    };
    let buf = reader.join().unwrap_or_default();
    let text = String::from_utf8_lossy(&buf);
    let text = text.trim();
    let shown = if text.len() <= MAX_OUTPUT_TEXT && !text.contains('\n') {
        text.to_string()
    } else {
        format!("sha256:{}", ObjectId::of(text.as_bytes()).to_hex())
    };
    match status.code() {
        Some(0) => shown,
        Some(n) => format!("exit {n}: {shown}"),
        None => format!("killed: {shown}"),
    }
}

/// The fingerprint `branch` records: that of the newest checkpoint with one on the line of
/// first parents from its head (at most [`MAX_WALK`] back), with its id.
///
/// # Errors
/// Reading the branch or a record on the way.
pub fn recorded(store: &Store, branch: &str) -> Result<Option<(ObjectId, Runtime)>> {
    let mut cur = store.read_branch(branch)?.and_then(|b| b.head);
    for _ in 0..MAX_WALK {
        let Some(id) = cur else { break };
        let c = match store.read_checkpoint(&id) {
            Ok(c) => c,
            // A forgotten or pruned record ends the search (its fingerprint is gone).
            Err(Error::NotFound(_)) => break,
            Err(e) => return Err(e),
        };
        if let Some(r) = c.annotations.runtime {
            return Ok(Some((id, r)));
        }
        cur = c.parents.first().copied();
    }
    Ok(None)
}

/// Every field of `recorded` and `now` whose values differ (or that only one has).
pub fn differences(recorded: &Runtime, now: &Runtime) -> Vec<Difference> {
    let (a, b) = (recorded.fields(), now.fields());
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| Difference {
            field: k.clone(),
            recorded: a.get(k).cloned(),
            now: b.get(k).cloned(),
        })
        .collect()
}

/// What differs between the recorded fingerprint `rec` and `now`; a record made before
/// `command_output` (its commands' stdout and stderr together) is compared with the commands'
/// output taken its way, so a branch recorded by an older build is not refused for that alone.
pub fn differences_taking(
    store: &Store,
    branch: &str,
    rec: &Runtime,
    now: &Runtime,
) -> Vec<Difference> {
    if rec.commands.is_empty() || rec.command_output.is_some() {
        return differences(rec, now);
    }
    let roots = root_paths(store);
    let mut old_way = compute_taking(
        &declaration(store, Some(branch)),
        &roots,
        &mut DigestCache::none(),
        Output::Both,
    );
    old_way.files = now.files.clone();
    old_way.platform = now.platform.clone();
    differences(rec, &old_way)
}

/// The outcome of [`check_branch`].
#[derive(Clone, Debug, Serialize)]
pub struct RuntimeCheck {
    /// The fingerprint now.
    pub now: Runtime,
    /// The checkpoint whose fingerprint was compared (None: the branch records none).
    pub recorded_in: Option<ObjectId>,
    /// What differs (empty: same runtime).
    pub differences: Vec<Difference>,
    /// The differences were accepted (`--accept-runtime-change`, audited).
    pub accepted: bool,
}

/// Compares `branch`'s recorded fingerprint with the current one before `what` (`mount`,
/// `exec`, `turn`) resumes it. Differences refuse unless `accept`, which appends an
/// `accept-runtime-change` line naming them to the audit log.
///
/// # Errors
/// `Conflict` naming every field that differs; reading the branch; writing the audit line.
pub fn check_branch(store: &Store, branch: &str, what: &str, accept: bool) -> Result<RuntimeCheck> {
    check_branch_now(store, branch, what, accept, current(store, Some(branch)))
}

/// As [`check_branch`], with the current fingerprint `now` taken by the caller.
///
/// # Errors
/// As [`check_branch`].
pub fn check_branch_now(
    store: &Store,
    branch: &str,
    what: &str,
    accept: bool,
    now: Runtime,
) -> Result<RuntimeCheck> {
    let Some((id, rec)) = recorded(store, branch)? else {
        return Ok(RuntimeCheck {
            now,
            recorded_in: None,
            differences: Vec::new(),
            accepted: false,
        });
    };
    let differences = differences_taking(store, branch, &rec, &now);
    if differences.is_empty() {
        return Ok(RuntimeCheck {
            now,
            recorded_in: Some(id),
            differences,
            accepted: false,
        });
    }
    let listed: Vec<String> = differences.iter().map(Difference::describe).collect();
    if !accept {
        return Err(Error::Conflict(format!(
            "the runtime of branch {branch} (recorded in checkpoint {}) differs from this one: \
             {}; refusing to {what} it (resume formats are version-dependent); pass \
             --accept-runtime-change to go on anyway (audited)",
            id.short(),
            listed.join("; ")
        )));
    }
    store.append_audit(&serde_json::json!({
        "time": crate::text::time::format_utc(crate::text::time::now_ns()),
        "op": "accept-runtime-change", "pid": std::process::id(),
        "args": {"branch": branch, "for": what, "recorded_in": id},
        "ok": true, "result": {"differences": differences},
    }))?;
    log::info!(
        "runtime change accepted for branch {branch}: {}",
        listed.join("; ")
    );
    Ok(RuntimeCheck {
        now,
        recorded_in: Some(id),
        differences,
        accepted: true,
    })
}

/// Replaces the store's declaration, or with `branch` that branch's own (STORE.json
/// `runtime`; an empty one removes it: a branch then uses the store's again), audited.
///
/// # Errors
/// `Usage` for a bad declaration; writing STORE.json.
pub fn declare(store: &Store, branch: Option<&str>, decl: &RuntimeDecl) -> Result<()> {
    let files_and_commands = RuntimeDecl {
        files: decl.files.clone(),
        commands: decl.commands.clone(),
        branches: Default::default(),
    };
    check_decl(&files_and_commands)?;
    let roots = root_paths(store);
    if let Some(b) = branch {
        crate::store::refs::check_name("branch", b)?;
        // A declaration for no branch would never be used (a typo of the one meant).
        if store.read_branch(b)?.is_none() {
            return Err(Error::Usage(format!(
                "--branch {b}: no such branch (`ckptfs branch list {}`)",
                store.root().display()
            )));
        }
    }
    let files_and_commands = resolve_decl(&files_and_commands, &roots)?;
    let args =
        serde_json::json!({"branch": branch, "files": decl.files, "commands": decl.commands});
    store.mutate("fingerprint-declare", args, |_| {
        // Re-read under the lock: the Store was opened before it.
        let fresh = crate::remote::open_store(store.root())?;
        let mut config = fresh.config().clone();
        let mut all = config.runtime.take().unwrap_or_default();
        match branch {
            Some(b) if files_and_commands.is_empty() => {
                all.branches.remove(b);
            }
            Some(b) => {
                all.branches
                    .insert(b.to_string(), files_and_commands.clone());
            }
            None => {
                all.files = files_and_commands.files.clone();
                all.commands = files_and_commands.commands.clone();
            }
        }
        check_decl(&all)?;
        config.runtime = (!all.is_empty() || !all.branches.is_empty()).then_some(all);
        store.write_config_file(&config)?;
        Ok(((), serde_json::Value::Null))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::capture::{capture, CaptureOptions};
    use crate::store::checkpoint::Annotations;

    /// A store declaring `cmd`, with branch main's one checkpoint recording `recorded`.
    fn store_recording(dir: &Path, cmd: &str, recorded: impl Fn(&Store) -> Runtime) -> Store {
        std::fs::create_dir_all(dir.join("root")).unwrap();
        let s = crate::store::temp_store(dir);
        let decl = RuntimeDecl {
            files: Vec::new(),
            commands: vec![cmd.to_string()],
            branches: Default::default(),
        };
        declare(&s, None, &decl).unwrap();
        let s = Store::open(s.root()).unwrap();
        let runtime = recorded(&s);
        capture(
            &s,
            &CaptureOptions {
                branch: "main".into(),
                annotations: Annotations {
                    runtime: Some(runtime),
                    ..Annotations::default()
                },
                ..CaptureOptions::default()
            },
        )
        .unwrap();
        s
    }

    const NOISY: &str = "echo stable; echo warning >&2";

    #[test]
    fn a_record_of_an_older_build_compares_its_commands_its_own_way() {
        let t = tempfile::tempdir().unwrap();
        // As a build before `command_output` recorded it: stdout and stderr together.
        let s = store_recording(t.path(), NOISY, |s| {
            let roots = root_paths(s);
            compute_taking(
                &declaration(s, None),
                &roots,
                &mut DigestCache::none(),
                Output::Both,
            )
        });
        let (_, rec) = recorded(&s, "main").unwrap().unwrap();
        assert_eq!(rec.command_output, None);
        let now = current(&s, Some("main"));
        assert_eq!(now.command_output.as_deref(), Some("stdout"));
        assert_eq!(now.commands.values().next().unwrap(), "stable");
        // Compared plainly, the rule's change would look like a runtime change...
        assert_eq!(differences(&rec, &now).len(), 1);
        // ... compared its way, it is the same runtime.
        assert!(differences_taking(&s, "main", &rec, &now).is_empty());
        check_branch(&s, "main", "run a turn on", false).unwrap();
    }

    #[test]
    fn a_record_of_stdout_only_is_compared_plainly() {
        let t = tempfile::tempdir().unwrap();
        let s = store_recording(t.path(), NOISY, |s| current(s, None));
        let (_, rec) = recorded(&s, "main").unwrap().unwrap();
        assert_eq!(rec.command_output.as_deref(), Some("stdout"));
        assert_eq!(rec.commands.values().next().unwrap(), "stable");
        check_branch(&s, "main", "run a turn on", false).unwrap();
        // A recorded output that differs from now is still a difference.
        let mut other = rec.clone();
        for v in other.commands.values_mut() {
            *v = "unstable".into();
        }
        assert_eq!(
            differences_taking(&s, "main", &other, &current(&s, None)).len(),
            1
        );
    }
}
