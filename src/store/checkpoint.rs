//! Checkpoint records: immutable JSON, addressed by the SHA-256 of their exact bytes.
//!
//! Records come from stores and archives made elsewhere too, so reading one treats it as
//! hostile: the file must be a regular file of at most [`MAX_CHECKPOINT_BYTES`] (checked
//! before it is read), and decoding checks root, branch and label names, the number of roots
//! and parents, root modes and xattrs within the limits trees have.

use std::collections::BTreeMap;
use std::fs;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::{is_hex_prefix, ObjectId};
use crate::store::tree::{MAX_XATTR_LIST, MAX_XATTR_NAME, MAX_XATTR_VALUE};
use crate::store::Store;

/// Largest checkpoint record written or read (a record is a few hundred bytes plus its
/// message).
pub const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;
/// Most roots a record may have.
pub const MAX_ROOTS: usize = 1024;
/// Most parents a record may have (a capture has one, a merge two).
pub const MAX_PARENTS: usize = 64;
/// Fewest hex digits `resolve` takes as an id prefix: shorter ones match too much to mean one
/// checkpoint (and could be meant as a label).
pub const MIN_ID_PREFIX: usize = 4;
/// Most candidates an ambiguous-prefix error lists.
const MAX_LISTED_CANDIDATES: usize = 10;
/// Characters of a candidate's message that error lists.
const MAX_LISTED_MESSAGE: usize = 40;

/// The first line of `s`, cut to `max` characters (with "..." when cut).
fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    match line.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None if line.len() < s.trim_end().len() => format!("{line}..."),
        None => line.to_string(),
    }
}

/// The captured state of one root: its top tree and the root directory's own metadata.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RootRecord {
    pub tree: ObjectId,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    pub subdirs: u32,
    pub files: u64,
    pub bytes: u64,
    /// The root directory's own xattrs, as `[name, value]` hex pairs sorted by name (absent
    /// when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_pairs")]
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Serde for xattr lists in JSON records: `[["<hex name>", "<hex value>"], ...]`.
mod hex_pairs {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn unhex(s: &str) -> Option<Vec<u8>> {
        if s.len() % 2 != 0 {
            return None;
        }
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
            .collect()
    }

    pub fn serialize<S: Serializer>(v: &Pairs, s: S) -> Result<S::Ok, S::Error> {
        let pairs: Vec<[String; 2]> = v.iter().map(|(k, x)| [hex(k), hex(x)]).collect();
        pairs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Pairs, D::Error> {
        let pairs: Vec<[String; 2]> = Vec::deserialize(d)?;
        let mut out: Pairs = Vec::with_capacity(pairs.len());
        for [k, v] in &pairs {
            let (Some(k), Some(v)) = (unhex(k), unhex(v)) else {
                return Err(D::Error::custom("xattr is not hex"));
            };
            if k.is_empty() || k.contains(&0) || out.last().is_some_and(|(pk, _)| *pk >= k) {
                return Err(D::Error::custom("invalid or unsorted xattr name"));
            }
            out.push((k, v));
        }
        Ok(out)
    }
}

/// Counts recorded with a checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    pub new_objects: u64,
    pub new_bytes: u64,
    pub files_read: u64,
}

/// One checkpoint. Field order is the canonical encoding order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Checkpoint {
    pub version: u32,
    pub roots: BTreeMap<String, RootRecord>,
    pub parents: Vec<ObjectId>,
    pub branch: String,
    pub label: Option<String>,
    pub message: String,
    pub time_ns: i64,
    pub stats: Stats,
    /// Optional fields after `stats` (`meta`, `runtime`, `turn`), each absent when empty, so
    /// a record without them encodes byte for byte as before and old records still read.
    /// Boxed: most records have none, and the record stays small to move around.
    #[serde(flatten)]
    pub annotations: Box<Annotations>,
}

/// Most keys a checkpoint's `meta` may have.
pub const MAX_META_KEYS: usize = 256;
/// Longest `meta` key, in bytes.
pub const MAX_META_KEY: usize = 128;
/// Most bytes `meta` may take in a record (compact JSON): room for a session's ids and a
/// final reply, not for a transcript (that belongs in a root).
pub const MAX_META_BYTES: usize = 64 << 10;

/// What a runner records with a checkpoint besides the trees (see docs/runner.md). Every
/// field is optional in the record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Annotations {
    /// `--meta KEY=VALUE` / `--meta-file`: the session's ids, the final reply... Values are
    /// JSON strings, numbers, booleans or null (see [`check_meta`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, serde_json::Value>,
    /// The runtime fingerprint of the turn that made the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// The turn that made the checkpoint (`ckptfs turn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnRecord>,
}

impl Annotations {
    /// True when the record carries none of them.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty() && self.runtime.is_none() && self.turn.is_none()
    }
}

/// Checks a `meta` map: at most [`MAX_META_KEYS`] keys of 1 to [`MAX_META_KEY`] bytes of
/// `[A-Za-z0-9_.-]` starting with a letter or digit; values that are strings, numbers,
/// booleans or null (no nesting: `log --meta K=V` compares them as text); at most
/// [`MAX_META_BYTES`] in all.
///
/// # Errors
/// `Usage` naming the key or the size at fault.
pub fn check_meta(meta: &BTreeMap<String, serde_json::Value>) -> Result<()> {
    if meta.len() > MAX_META_KEYS {
        return Err(Error::Usage(format!(
            "meta has {} keys, more than {MAX_META_KEYS}",
            meta.len()
        )));
    }
    for (k, v) in meta {
        check_meta_key(k)?;
        if v.is_object() || v.is_array() {
            return Err(Error::Usage(format!(
                "meta {k}: value is a JSON {}; give a string, number, boolean or null",
                if v.is_object() { "object" } else { "array" }
            )));
        }
    }
    let bytes = serde_json::to_vec(meta)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if bytes > MAX_META_BYTES {
        return Err(Error::Usage(format!(
            "meta is {bytes} bytes, more than {MAX_META_BYTES}"
        )));
    }
    Ok(())
}

/// Checks one `meta` key (see [`check_meta`]).
///
/// # Errors
/// `Usage` naming the key.
pub fn check_meta_key(k: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    let ok = !k.is_empty()
        && k.len() <= MAX_META_KEY
        && k.chars().all(ok_char)
        && k.starts_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "meta key {k:?}: use 1 to {MAX_META_KEY} letters, digits, '_', '.' or '-', \
             starting with a letter or digit"
        )))
    }
}

/// The text `log --meta K=V` compares V with: a string as it is, anything else as JSON.
pub fn meta_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A runtime fingerprint (`ckptfs fingerprint`): what the agent's resume depends on. The
/// platform is always there; files and commands are those the store declares (STORE.json
/// `runtime`, see [`RuntimeDecl`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Runtime {
    /// `os`, `kernel` (release), `arch`, `libc`.
    pub platform: BTreeMap<String, String>,
    /// Declared file (as declared) -> `sha256:<hex> <resolved path>`, or `missing`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Declared command line -> its output (trimmed; `sha256:<hex>` when longer than a line or
    /// two), prefixed `exit N: ` when it did not exit 0: stdout only when `command_output` is
    /// `stdout`, stdout and stderr in records made before (where it is absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub commands: BTreeMap<String, String>,
    /// Which output of the declared commands `commands` holds: `stdout` (absent: stdout and
    /// stderr together, as builds before it recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_output: Option<String>,
}

impl Runtime {
    /// Every field as `(name, value)`: `platform.os`, `file:PATH`, `command:CMD`.
    pub fn fields(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in &self.platform {
            out.insert(format!("platform.{k}"), v.clone());
        }
        for (k, v) in &self.files {
            out.insert(format!("file:{k}"), v.clone());
        }
        for (k, v) in &self.commands {
            out.insert(format!("command:{k}"), v.clone());
        }
        out
    }
}

/// What a store declares makes up its runtime (STORE.json `runtime`; `ckptfs fingerprint
/// --file/--command` sets it), and what a branch declares instead of it (`--branch B`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RuntimeDecl {
    /// Files to hash: absolute paths, or command names looked up in PATH (`python3`).
    #[serde(default)]
    pub files: Vec<String>,
    /// Command lines (run by `sh -c`) whose output counts, e.g. `python3 --version`.
    #[serde(default)]
    pub commands: Vec<String>,
    /// Branches with a declaration of their own, used instead of this one (theirs have no
    /// `branches`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub branches: BTreeMap<String, RuntimeDecl>,
}

impl RuntimeDecl {
    /// What `branch` uses: its own declaration, else the store's (without `branches`).
    pub fn for_branch(&self, branch: Option<&str>) -> RuntimeDecl {
        let own = branch.and_then(|b| self.branches.get(b));
        let d = own.unwrap_or(self);
        RuntimeDecl {
            files: d.files.clone(),
            commands: d.commands.clone(),
            branches: BTreeMap::new(),
        }
    }

    /// No file and no command.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.commands.is_empty()
    }
}

/// The turn that made a checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct TurnRecord {
    /// The turn's id, as the audit log and `log --turns` name it.
    pub id: String,
    /// COMMAND and its arguments (lossy UTF-8).
    pub command: Vec<String>,
    pub exit_status: i32,
    pub started_ns: i64,
    pub ended_ns: i64,
    /// Set when the turn ran with `--accept-runtime-change` over a differing fingerprint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accepted_runtime_change: bool,
}

impl Checkpoint {
    /// Canonical bytes (compact JSON, fixed field order).
    pub fn encode(&self) -> Vec<u8> {
        // Serializing plain structs and maps cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Decodes and checks a record whose id is `id`.
    ///
    /// # Errors
    /// `Corrupt` naming the checkpoint and the first defect.
    pub fn decode(id: &ObjectId, data: &[u8]) -> Result<Checkpoint> {
        let bad = |m: String| Error::Corrupt(format!("checkpoint {id}: {m}"));
        if data.len() as u64 > MAX_CHECKPOINT_BYTES {
            return Err(bad(format!(
                "record is {} bytes, more than any record ({MAX_CHECKPOINT_BYTES})",
                data.len()
            )));
        }
        if ObjectId::of(data) != *id {
            return Err(Error::Corrupt(format!(
                "checkpoint {id} does not match its hash"
            )));
        }
        let c: Checkpoint = serde_json::from_slice(data).map_err(|e| bad(e.to_string()))?;
        if c.roots.len() > MAX_ROOTS {
            return Err(bad(format!(
                "{} roots, more than {MAX_ROOTS}",
                c.roots.len()
            )));
        }
        if c.parents.len() > MAX_PARENTS {
            return Err(bad(format!(
                "{} parents, more than {MAX_PARENTS}",
                c.parents.len()
            )));
        }
        for (name, root) in &c.roots {
            crate::store::refs::check_name("root", name)
                .map_err(|_| bad(format!("bad root name {name:?}")))?;
            if root.mode & !0o7777 != 0 {
                return Err(bad(format!("root {name}: mode has non-permission bits")));
            }
            let mut list = 0usize;
            for (k, v) in &root.xattrs {
                list += k.len() + 1;
                if k.len() > MAX_XATTR_NAME || v.len() > MAX_XATTR_VALUE || list > MAX_XATTR_LIST {
                    return Err(bad(format!("root {name}: xattrs over the kernel's limits")));
                }
            }
        }
        if !c.branch.is_empty() {
            crate::store::refs::check_name("branch", &c.branch)
                .map_err(|_| bad(format!("bad branch name {:?}", c.branch)))?;
        }
        if let Some(label) = &c.label {
            crate::store::refs::check_name("label", label)
                .map_err(|_| bad(format!("bad label name {label:?}")))?;
        }
        check_meta(&c.annotations.meta).map_err(|e| bad(e.to_string()))?;
        Ok(c)
    }
}

impl Store {
    /// Writes a checkpoint record durably (never overwriting) and returns its id.
    /// Writes the record of `c`, then moves its branch from `parent` to it; the record is
    /// taken back when either step fails (a failed directory sync, a full disk writing the
    /// ref), so no record stays that no ref names while `log` would list it on the branch.
    /// Callers hold the store lock.
    ///
    /// # Errors
    /// Those of [`Store::write_checkpoint`] and [`Store::advance_branch`].
    pub fn publish_checkpoint(&self, c: &Checkpoint, parent: Option<ObjectId>) -> Result<ObjectId> {
        let id = ObjectId::of(&c.encode());
        let published = self
            .write_checkpoint(c)
            .and_then(|written| self.advance_branch(&c.branch, parent, written));
        match published {
            Ok(()) => Ok(id),
            Err(e) => {
                self.forsake_record(&id);
                Err(e)
            }
        }
    }

    /// Takes back the record `id` that no branch names (see [`Store::publish_checkpoint`]).
    fn forsake_record(&self, id: &ObjectId) {
        // Records are content-addressed: make sure no ref names this one (it cannot, unless an
        // identical record existed before, which its time makes all but impossible).
        let named = self
            .list_branches()
            .map(|bs| bs.iter().any(|(_, b)| b.head == Some(*id)))
            .unwrap_or(true);
        if named {
            return;
        }
        let p = self.checkpoint_path(id);
        let removed =
            atomic::remove_file(&p).and_then(|()| atomic::sync_path(&self.checkpoints_dir()));
        if let Err(e) = removed {
            log::warn!(
                "checkpoint {} is recorded but on no branch (removing it failed: {e})",
                id.short()
            );
        }
    }

    pub fn write_checkpoint(&self, c: &Checkpoint) -> Result<ObjectId> {
        let data = c.encode();
        if data.len() as u64 > MAX_CHECKPOINT_BYTES {
            return Err(Error::Invalid(format!(
                "checkpoint record of {} bytes is more than {MAX_CHECKPOINT_BYTES} (a message \
                 that long?)",
                data.len()
            )));
        }
        let id = ObjectId::of(&data);
        atomic::write_atomic_new(&self.checkpoint_path(&id), &data, 0o444)?;
        Ok(id)
    }

    /// Reads and checks a checkpoint record.
    pub fn read_checkpoint(&self, id: &ObjectId) -> Result<Checkpoint> {
        let p = self.checkpoint_path(id);
        let what = format!("checkpoint {id}");
        let data = crate::store::object::read_regular_file(&p, MAX_CHECKPOINT_BYTES, false, &what)?
            .ok_or_else(|| Error::NotFound(what.clone()))?;
        Checkpoint::decode(id, &data)
    }

    /// Every checkpoint id in the store.
    pub fn list_checkpoints(&self) -> Result<Vec<ObjectId>> {
        let dir = self.checkpoints_dir();
        let mut out = Vec::new();
        for ent in fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            if let Some(name) = ent.file_name().to_str() {
                if let Ok(id) = ObjectId::parse(name) {
                    out.push(id);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Resolves a checkpoint spec: a label, a branch name (its head), or a unique id prefix
    /// (at least [`MIN_ID_PREFIX`] hex digits).
    ///
    /// # Errors
    /// `NotFound` for an unknown spec; `Usage` for a hex prefix shorter than
    /// [`MIN_ID_PREFIX`] that names no label or branch, and for an ambiguous prefix (the
    /// message lists up to [`MAX_LISTED_CANDIDATES`] of the matches, newest first).
    pub fn resolve(&self, spec: &str) -> Result<ObjectId> {
        if spec.is_empty() {
            return Err(Error::Usage("empty checkpoint name".into()));
        }
        if crate::store::refs::check_name("label", spec).is_ok() {
            if let Some(id) = self.read_label(spec)? {
                return Ok(id);
            }
            if let Some(b) = self.read_branch(spec)? {
                return b.head.ok_or_else(|| {
                    Error::NotFound(format!("branch {spec} has no checkpoint yet"))
                });
            }
        }
        if is_hex_prefix(spec) {
            let lower = spec.to_ascii_lowercase();
            if lower.len() == 64 {
                let id = ObjectId::parse(&lower)?;
                if self.checkpoint_path(&id).exists() {
                    return Ok(id);
                }
            } else if lower.len() < MIN_ID_PREFIX {
                return Err(Error::Usage(format!(
                    "checkpoint prefix {spec} is too short: give at least {MIN_ID_PREFIX} hex \
                     digits (or a label or branch)"
                )));
            } else {
                let matches: Vec<ObjectId> = self
                    .list_checkpoints()?
                    .into_iter()
                    .filter(|id| id.to_hex().starts_with(&lower))
                    .collect();
                match matches.len() {
                    1 => return Ok(matches[0]),
                    0 => {}
                    n => {
                        return Err(Error::Usage(format!(
                        "ambiguous checkpoint prefix {spec} ({n} matches; give more digits): {}",
                        self.describe_candidates(&matches)
                    )))
                    }
                }
            }
        }
        Err(Error::NotFound(format!(
            "checkpoint, label or branch {spec:?}"
        )))
    }

    /// `ID (TIME BRANCH "MESSAGE")` for up to [`MAX_LISTED_CANDIDATES`] of `ids`, newest first,
    /// joined by ", ". A record that cannot be read is listed by its id alone: the list is
    /// there to help choose, and must not hide the ambiguity behind a read error.
    fn describe_candidates(&self, ids: &[ObjectId]) -> String {
        let mut rows: Vec<(Option<Checkpoint>, ObjectId)> = ids
            .iter()
            .map(|id| (self.read_checkpoint(id).ok(), *id))
            .collect();
        rows.sort_by(|a, b| {
            let t = |r: &(Option<Checkpoint>, ObjectId)| r.0.as_ref().map(|c| c.time_ns);
            t(b).cmp(&t(a)).then(a.1.cmp(&b.1))
        });
        let mut out: Vec<String> = rows
            .iter()
            .take(MAX_LISTED_CANDIDATES)
            .map(|(c, id)| match c {
                Some(c) => format!(
                    "{} ({} {} {:?})",
                    id.short(),
                    crate::text::time::format_rfc3339(c.time_ns),
                    c.branch,
                    first_line(&c.message, MAX_LISTED_MESSAGE)
                ),
                None => id.short(),
            })
            .collect();
        if ids.len() > MAX_LISTED_CANDIDATES {
            out.push(format!("and {} more", ids.len() - MAX_LISTED_CANDIDATES));
        }
        out.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as builds before `meta`/`runtime`/`turn` wrote it, byte for byte.
    const OLD_RECORD: &str = concat!(
        r#"{"version":1,"roots":{"ws":{"tree":"#,
        r#""aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","#,
        r#""mode":493,"uid":0,"gid":0,"mtime_ns":1,"subdirs":0,"files":1,"bytes":3}},"#,
        r#""parents":[],"branch":"main","label":null,"message":"old","time_ns":5,"#,
        r#""stats":{"files":1,"dirs":1,"symlinks":0,"bytes":3,"new_objects":1,"#,
        r#""new_bytes":3,"files_read":1}}"#
    );

    #[test]
    fn an_old_record_reads_and_encodes_to_the_same_bytes() {
        let id = ObjectId::of(OLD_RECORD.as_bytes());
        let c = Checkpoint::decode(&id, OLD_RECORD.as_bytes()).expect("old record decodes");
        assert!(c.annotations.is_empty());
        assert_eq!(c.message, "old");
        // Same bytes, so the same id: adding the optional fields changed no old record.
        assert_eq!(c.encode(), OLD_RECORD.as_bytes());
    }

    #[test]
    fn annotations_round_trip_and_bad_meta_is_refused() {
        let id = ObjectId::of(OLD_RECORD.as_bytes());
        let mut c = Checkpoint::decode(&id, OLD_RECORD.as_bytes()).expect("decodes");
        c.annotations.meta.insert("thread".into(), "t-1".into());
        c.annotations
            .meta
            .insert("turn".into(), serde_json::json!(3));
        c.annotations.runtime = Some(Runtime {
            platform: BTreeMap::from([("os".into(), "Linux".into())]),
            ..Runtime::default()
        });
        c.annotations.turn = Some(TurnRecord {
            id: "abc".into(),
            command: vec!["true".into()],
            ..TurnRecord::default()
        });
        let bytes = c.encode();
        let back = Checkpoint::decode(&ObjectId::of(&bytes), &bytes).expect("decodes");
        assert_eq!(back, c);
        // A hostile record with a nested meta value or a bad key is refused.
        for bad in [r#""meta":{"k":{"x":1}},"#, r#""meta":{"a b":1},"#] {
            let text = OLD_RECORD.replacen(r#""stats""#, &format!("{bad}\"stats\""), 1);
            let err = Checkpoint::decode(&ObjectId::of(text.as_bytes()), text.as_bytes());
            assert!(matches!(err, Err(Error::Corrupt(_))), "{bad}: {err:?}");
        }
        let mut big = BTreeMap::new();
        big.insert(
            "reply".to_string(),
            serde_json::json!("x".repeat(MAX_META_BYTES)),
        );
        assert!(check_meta(&big).is_err());
    }
}
