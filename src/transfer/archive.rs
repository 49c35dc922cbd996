//! `archive` / `unarchive`: a portable single-file export of chosen history.
//!
//! ## Format
//! A zstd stream (with frame checksums) of a tar archive whose entries are, in order:
//! ```text
//! MANIFEST.json          format "ckptfs-archive", version, source roots (name -> path, excludes),
//!                        compression, chunker, checkpoint ids, branches {name: record},
//!                        labels {name: id}, object count and bytes
//! checkpoints/<64 hex>   checkpoint records, exact bytes (the id is their SHA-256)
//! objects/<64 hex>       every tree and chunk they reach, uncompressed (the id is their SHA-256)
//! ```
//! Nothing else is allowed: an entry with another name, an absolute path, `..`, a link or a
//! device is refused. With `--split SIZE` the stream is cut into `FILE.part000`, `FILE.part001`...
//! The sidecar `FILE.sha256` (written last: it is the commit point of an archive) holds
//! `sha256sum` lines: one per part, and one named `FILE` for the whole stream (the parts
//! concatenated). `sha256sum -c --ignore-missing FILE.sha256` checks the parts.
//!
//! ## Import
//! `unarchive` (1) checks every part's digest and the whole digest against the sidecar (or
//! `--sha256`); (2) reads the whole archive once without writing anything: entry names,
//! each object re-hashed, each record decoded, every object the checkpoints reach present, no
//! label or branch conflicting with the target store; only then (3) creates the target store if
//! needed and imports under the store lock: objects (deduplicated, re-hashed again), then
//! records, then STORE.json roots (`--relocate NAME=/NEW/PATH` changes only a root's recorded
//! path), then refs. A failure in (1) or (2) imports nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::checkpoint::Checkpoint;
use crate::store::object::ObjectBatch;
use crate::store::refs::Branch;
use crate::store::tree::{EntryKind, Tree};
use crate::store::{ChunkerConfig, InitOptions, RootConfig, Store};

/// `format` of MANIFEST.json.
pub const ARCHIVE_FORMAT: &str = "ckptfs-archive";
/// Archive format version written and read by this build.
pub const ARCHIVE_VERSION: u32 = 1;
const MANIFEST_NAME: &str = "MANIFEST.json";
/// Largest entry accepted (objects are at most the chunker max, 64 MiB; trees stay far below).
const MAX_ENTRY: u64 = 256 << 20;
const ZSTD_LEVEL: i32 = 3;

/// MANIFEST.json.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub created: String,
    pub roots: BTreeMap<String, RootConfig>,
    pub compression: String,
    pub chunker: ChunkerConfig,
    pub checkpoints: Vec<ObjectId>,
    pub branches: BTreeMap<String, Branch>,
    pub labels: BTreeMap<String, ObjectId>,
    pub objects: u64,
    pub object_bytes: u64,
}

/// What to export.
#[derive(Clone, Debug, Default)]
pub struct ArchiveOptions {
    /// Checkpoint ids/prefixes, labels or branch names (a branch brings its whole history).
    pub specs: Vec<String>,
    pub all: bool,
    pub out: PathBuf,
    /// Cut the file into parts of this many bytes.
    pub split: Option<u64>,
}

/// One file of an archive with its digest.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct PartDigest {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
}

/// What `archive` wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ArchiveReport {
    pub file: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    pub parts: Vec<PartDigest>,
    pub sidecar: PathBuf,
    pub checkpoints: usize,
    pub objects: u64,
    pub object_bytes: u64,
    pub branches: Vec<String>,
    pub labels: Vec<String>,
}

/// What `unarchive` did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UnarchiveReport {
    pub store: PathBuf,
    pub created_store: bool,
    pub sha256: String,
    pub checkpoints_new: usize,
    pub checkpoints_present: usize,
    pub objects_new: u64,
    pub objects_present: u64,
    pub branches: Vec<String>,
    pub labels: Vec<String>,
    pub relocated: BTreeMap<String, PathBuf>,
    /// The existing store's new format version, when its trees had to gain ctimes and inode
    /// numbers (an archive from a newer store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgraded_to: Option<u32>,
}

/// One entry read from an archive (already checked).
pub enum ArchiveItem {
    Object {
        id: ObjectId,
        data: Vec<u8>,
    },
    Checkpoint {
        id: ObjectId,
        data: Vec<u8>,
        record: Checkpoint,
    },
}

// ---------------------------------------------------------------------------------------------
// Export

struct Selection {
    checkpoints: BTreeMap<ObjectId, Checkpoint>,
    branches: BTreeMap<String, Branch>,
    labels: BTreeMap<String, ObjectId>,
}

fn select(store: &Store, opts: &ArchiveOptions) -> Result<Selection> {
    let mut sel = Selection {
        checkpoints: BTreeMap::new(),
        branches: BTreeMap::new(),
        labels: BTreeMap::new(),
    };
    let all_labels = store.list_labels()?;
    let add_history = |sel: &mut Selection, head: ObjectId| -> Result<()> {
        let mut cur = Some(head);
        while let Some(id) = cur {
            if sel.checkpoints.contains_key(&id) {
                break;
            }
            match store.read_checkpoint(&id) {
                Ok(c) => {
                    cur = c.parents.first().copied();
                    sel.checkpoints.insert(id, c);
                }
                // Older history pruned by gc: the archive starts here.
                Err(Error::NotFound(_)) if id != head => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    if opts.all {
        for id in store.list_checkpoints()? {
            let c = store.read_checkpoint(&id)?;
            sel.checkpoints.insert(id, c);
        }
        for (n, b) in store.list_branches()? {
            sel.branches.insert(n, b);
        }
    } else {
        for spec in &opts.specs {
            let as_name = crate::store::refs::check_name("label", spec).is_ok();
            if as_name {
                if let Some(id) = store.read_label(spec)? {
                    let c = store.read_checkpoint(&id)?;
                    sel.checkpoints.insert(id, c);
                    continue;
                }
                if let Some(b) = store.read_branch(spec)? {
                    if let Some(h) = b.head {
                        add_history(&mut sel, h)?;
                    }
                    sel.branches.insert(spec.clone(), b);
                    continue;
                }
            }
            let id = store.resolve(spec)?;
            let c = store.read_checkpoint(&id)?;
            sel.checkpoints.insert(id, c);
        }
    }
    for (n, id) in all_labels {
        if sel.checkpoints.contains_key(&id) {
            sel.labels.insert(n, id);
        }
    }
    Ok(sel)
}

/// Writes parts: temp files `.<FILE>.ckptfs-tmp-<pid>.<n>` beside FILE, renamed at the end.
struct PartWriter {
    dir: PathBuf,
    base_name: String,
    temp_prefix: String,
    split: Option<u64>,
    parts: Vec<(PathBuf, Sha256, u64)>,
    cur: Option<File>,
    whole: Sha256,
    whole_len: u64,
}

impl PartWriter {
    fn open_part(&mut self) -> io::Result<()> {
        atomic::fault_point("write")?;
        let n = self.parts.len();
        let p = self.dir.join(format!("{}{n}", self.temp_prefix));
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)?;
        self.cur = Some(f);
        self.parts.push((p, Sha256::new(), 0));
        Ok(())
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let full = match (self.split, self.parts.last()) {
            (_, None) => true,
            (Some(s), Some(p)) => p.2 >= s,
            (None, Some(_)) => false,
        };
        if full || self.cur.is_none() {
            self.open_part()?;
        }
        let room = match (self.split, self.parts.last()) {
            (Some(s), Some(p)) => (s - p.2).min(buf.len() as u64) as usize,
            _ => buf.len(),
        };
        let n = self
            .cur
            .as_mut()
            .ok_or_else(|| io::Error::other("no open archive part"))?
            .write(&buf[..room])?;
        if let Some(p) = self.parts.last_mut() {
            p.1.update(&buf[..n]);
            p.2 += n as u64;
        }
        self.whole.update(&buf[..n]);
        self.whole_len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.cur {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn file_name_of(p: &Path) -> Result<String> {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| Error::Usage(format!("{} is not a file name", p.display())))
}

/// Name of the sidecar of archive FILE.
pub fn sidecar_path(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(".sha256");
    PathBuf::from(s)
}

fn part_path(file: &Path, n: usize) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(format!(".part{n:03}"));
    PathBuf::from(s)
}

fn tar_append(b: &mut tar::Builder<impl Write>, path: &str, data: &[u8]) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o444);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, data)
        .map_err(|e| Error::io_op(format!("writing archive entry {path}"), e))
}

/// Exports the chosen history to `opts.out` (see the module doc).
///
/// # Errors
/// `Usage` for a bad selection or an output inside the store; `Conflict` when the output (or
/// its sidecar or parts) exists; `Corrupt` when an object to export fails its hash.
pub fn archive(store: &Store, opts: &ArchiveOptions) -> Result<ArchiveReport> {
    if opts.all != opts.specs.is_empty() {
        return Err(Error::Usage(
            "archive needs checkpoints/branches to export, or --all (not both)".into(),
        ));
    }
    let out = crate::store::absolute(&opts.out)?;
    if out.starts_with(store.root()) {
        return Err(Error::Usage(format!(
            "--out {} is inside the store; write the archive elsewhere",
            out.display()
        )));
    }
    let dir = out
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::Usage(format!("--out {}: no directory", out.display())))?;
    let base_name = file_name_of(&out)?;
    for p in [out.clone(), sidecar_path(&out), part_path(&out, 0)] {
        if fs::symlink_metadata(&p).is_ok() {
            return Err(Error::Conflict(format!(
                "{} already exists; archives are never overwritten",
                p.display()
            )));
        }
    }
    let temp_prefix = format!(".{base_name}.ckptfs-tmp-{}.", std::process::id());
    let args =
        serde_json::json!({"specs": opts.specs, "all": opts.all, "out": out, "split": opts.split});
    store.mutate("archive", args, |m| {
        m.set_phase(serde_json::json!({"temp_dir": dir, "temp_prefix": temp_prefix}))?;
        let sel = select(store, opts)?;
        let result = write_archive(
            store,
            &sel,
            &out,
            &dir,
            &base_name,
            &temp_prefix,
            opts.split,
        );
        if result.is_err() {
            for p in crate::fs::list_dir(&dir).unwrap_or_default() {
                if file_name_of(&p).is_ok_and(|n| n.starts_with(&temp_prefix)) {
                    let _ignored_cleanup = fs::remove_file(&p);
                }
            }
        }
        let report = result?;
        let summary = serde_json::json!({"file": report.file, "sha256": report.sha256,
            "bytes": report.bytes, "parts": report.parts, "checkpoints": report.checkpoints,
            "objects": report.objects});
        Ok((report, summary))
    })
}

fn write_archive(
    store: &Store,
    sel: &Selection,
    out: &Path,
    dir: &Path,
    base_name: &str,
    temp_prefix: &str,
    split: Option<u64>,
) -> Result<ArchiveReport> {
    // Objects reachable from the chosen checkpoints: trees (None) and chunks (their length,
    // which the read holds them to).
    let mut objects: BTreeMap<ObjectId, Option<u32>> = BTreeMap::new();
    let mut stack: Vec<ObjectId> = sel
        .checkpoints
        .values()
        .flat_map(|c| c.roots.values().map(|r| r.tree))
        .collect();
    while let Some(t) = stack.pop() {
        if objects.insert(t, None).is_some() {
            continue;
        }
        let tree = store.read_tree(&t)?;
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks } => {
                    for c in chunks {
                        objects.entry(c.id).or_insert(Some(c.len));
                    }
                }
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    let mut manifest = Manifest {
        format: ARCHIVE_FORMAT.into(),
        version: ARCHIVE_VERSION,
        created: crate::text::time::format_utc(crate::text::time::now_ns()),
        roots: store.config().roots.clone(),
        compression: store.config().compression.clone(),
        chunker: store.config().chunker.clone(),
        checkpoints: sel.checkpoints.keys().copied().collect(),
        branches: sel.branches.clone(),
        labels: sel.labels.clone(),
        objects: objects.len() as u64,
        object_bytes: 0,
    };
    for id in objects.keys() {
        manifest.object_bytes += store.object_file_size(id).unwrap_or(0);
    }
    let writer = PartWriter {
        dir: dir.to_path_buf(),
        base_name: base_name.to_string(),
        temp_prefix: temp_prefix.to_string(),
        split,
        parts: Vec::new(),
        cur: None,
        whole: Sha256::new(),
        whole_len: 0,
    };
    let mut enc = zstd::stream::write::Encoder::new(writer, ZSTD_LEVEL)
        .map_err(|e| Error::io_op("starting zstd", e))?;
    enc.include_checksum(true)
        .map_err(|e| Error::io_op("starting zstd", e))?;
    let mut tb = tar::Builder::new(enc);
    let mjson = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::Invalid(format!("encoding manifest: {e}")))?;
    tar_append(&mut tb, MANIFEST_NAME, &mjson)?;
    for id in sel.checkpoints.keys() {
        let p = store.checkpoint_path(id);
        let data = fs::read(&p).map_err(|e| Error::io(&p, e))?;
        tar_append(&mut tb, &format!("checkpoints/{id}"), &data)?;
    }
    let progress = Progress::items("archive", "objects", Some(objects.len() as u64));
    for (id, len) in &objects {
        let data = match len {
            Some(len) => store.read_chunk(&crate::store::tree::Chunk { id: *id, len: *len })?,
            None => store.read_object(id)?,
        };
        tar_append(&mut tb, &format!("objects/{id}"), &data)?;
        progress.add_items(1);
        progress.add_bytes(data.len() as u64);
    }
    progress.finish();
    let enc = tb
        .into_inner()
        .map_err(|e| Error::io_op("finishing the tar stream", e))?;
    let mut w = enc
        .finish()
        .map_err(|e| Error::io_op("finishing the zstd stream", e))?;
    w.flush()
        .map_err(|e| Error::io_op("writing the archive", e))?;
    if w.parts.is_empty() {
        w.open_part()
            .map_err(|e| Error::io_op("writing the archive", e))?;
    }
    drop(w.cur.take());
    let single = w.split.is_none();
    let whole = hex(&w.whole.finalize_reset());
    let mut parts = Vec::new();
    for (n, (tmp, h, len)) in w.parts.drain(..).enumerate() {
        atomic::sync_path(&tmp)?;
        let dest = if single {
            out.to_path_buf()
        } else {
            part_path(out, n)
        };
        parts.push((tmp, dest, hex(&h.finalize()), len));
    }
    for (tmp, dest, _, _) in &parts {
        atomic::rename(tmp, dest)?;
    }
    atomic::sync_path(dir)?;
    let mut side = String::new();
    let mut part_digests = Vec::new();
    for (_, dest, h, len) in &parts {
        if !single {
            side.push_str(&format!("{h}  {}\n", file_name_of(dest)?));
        }
        part_digests.push(PartDigest {
            path: dest.clone(),
            sha256: h.clone(),
            bytes: *len,
        });
    }
    side.push_str(&format!("{whole}  {}\n", w.base_name));
    let sidecar = sidecar_path(out);
    if !atomic::write_atomic_new(&sidecar, side.as_bytes(), 0o644)? {
        return Err(Error::Conflict(format!(
            "{} appeared while the archive was written",
            sidecar.display()
        )));
    }
    Ok(ArchiveReport {
        file: out.to_path_buf(),
        sha256: whole,
        bytes: w.whole_len,
        parts: part_digests,
        sidecar,
        checkpoints: sel.checkpoints.len(),
        objects: manifest.objects,
        object_bytes: manifest.object_bytes,
        branches: sel.branches.keys().cloned().collect(),
        labels: sel.labels.keys().cloned().collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Reads and checks every entry of an archive stream (zstd + tar), calling `visit` for each
/// object and checkpoint. Returns the manifest.
///
/// # Errors
/// `Invalid` for a stream that is not a ckptfs archive or has a refused entry; `Corrupt` for an
/// object or record that does not match its name.
pub fn read_archive(
    input: impl Read,
    visit: &mut dyn FnMut(ArchiveItem) -> Result<()>,
) -> Result<Manifest> {
    let dec = zstd::stream::read::Decoder::new(input)
        .map_err(|e| Error::Invalid(format!("not a ckptfs archive (no zstd stream: {e})")))?;
    let mut ar = tar::Archive::new(dec);
    let entries = ar
        .entries()
        .map_err(|e| Error::Invalid(format!("not a ckptfs archive ({e})")))?;
    let mut manifest: Option<Manifest> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| {
            Error::Invalid(format!(
                "archive is not a valid zstd-compressed tar stream ({e})"
            ))
        })?;
        let path_bytes = entry.path_bytes().into_owned();
        let path = String::from_utf8(path_bytes.clone()).map_err(|_| {
            Error::Invalid(format!(
                "archive entry {:?} is not UTF-8; refused",
                String::from_utf8_lossy(&path_bytes)
            ))
        })?;
        check_entry_path(&path)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is not a regular file; refused"
            )));
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| Error::Invalid(format!("archive entry {path:?}: bad size ({e})")))?;
        if size > MAX_ENTRY {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is {size} bytes, more than any ckptfs object; refused"
            )));
        }
        // The header's size is the archive's word: grow with what is actually read.
        let mut data = Vec::with_capacity((size as usize).min(1 << 20));
        entry
            .by_ref()
            .take(MAX_ENTRY + 1)
            .read_to_end(&mut data)
            .map_err(|e| Error::Invalid(format!("archive entry {path:?} cannot be read ({e})")))?;
        if data.len() as u64 != size {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is truncated"
            )));
        }
        if path == MANIFEST_NAME {
            if manifest.is_some() {
                return Err(Error::Invalid("archive has two manifests".into()));
            }
            manifest = Some(parse_manifest(&data)?);
            continue;
        }
        if manifest.is_none() {
            return Err(Error::Invalid(format!(
                "not a ckptfs archive (first entry is {path:?}, not {MANIFEST_NAME})"
            )));
        }
        if let Some(hex) = path.strip_prefix("objects/") {
            let id = ObjectId::parse(hex)?;
            if ObjectId::of(&data) != id {
                return Err(Error::Corrupt(format!(
                    "archive object {id} does not match its hash"
                )));
            }
            visit(ArchiveItem::Object { id, data })?;
        } else if let Some(hex) = path.strip_prefix("checkpoints/") {
            let id = ObjectId::parse(hex)?;
            let record = Checkpoint::decode(&id, &data)?;
            visit(ArchiveItem::Checkpoint { id, data, record })?;
        }
    }
    manifest.ok_or_else(|| Error::Invalid("not a ckptfs archive (no manifest)".into()))
}

/// Accepts only `MANIFEST.json`, `objects/<64 hex>` and `checkpoints/<64 hex>`.
pub fn check_entry_path(path: &str) -> Result<()> {
    let ok = path == MANIFEST_NAME
        || [("objects/"), ("checkpoints/")].iter().any(|pre| {
            path.strip_prefix(pre).is_some_and(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            })
        });
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "archive entry {path:?} is not allowed (only {MANIFEST_NAME}, objects/<id>, \
             checkpoints/<id>; absolute paths and '..' are refused); nothing imported"
        )))
    }
}

/// Largest MANIFEST.json accepted (about 200k checkpoint ids).
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;

/// A refused manifest field: one line naming it.
fn bad_field(field: &str, problem: impl std::fmt::Display) -> Error {
    Error::Invalid(format!(
        "archive manifest: {field}: {problem}; nothing imported"
    ))
}

/// Decodes and checks MANIFEST.json, every field, as far as it can without the target store
/// (see [`check_manifest_against`] for the rest): roots named and placed as `init` accepts
/// them ([`crate::store::check_roots`]), chunker parameters a store may have, branch and label
/// names valid, branch states known, sizes bounded.
///
/// # Errors
/// `Invalid` naming the field at fault.
pub fn parse_manifest(data: &[u8]) -> Result<Manifest> {
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(bad_field(
            MANIFEST_NAME,
            format!("{} bytes, more than {MAX_MANIFEST_BYTES}", data.len()),
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(data)
        .map_err(|e| Error::Invalid(format!("archive manifest is not JSON ({e})")))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(ARCHIVE_FORMAT) {
        return Err(Error::Invalid(format!(
            "not a ckptfs archive (manifest format is not {ARCHIVE_FORMAT:?})"
        )));
    }
    let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
    if version == 0 || version > u64::from(ARCHIVE_VERSION) {
        return Err(Error::Invalid(format!(
            "archive format version {version} is not supported by this ckptfs (knows {ARCHIVE_VERSION})"
        )));
    }
    let m = manifest_fields(&v)?;
    if m.created.len() > 64 {
        return Err(bad_field("created", "longer than a timestamp"));
    }
    for (name, rc) in &m.roots {
        crate::store::refs::check_name("root", name).map_err(|e| bad_field("roots", e))?;
        crate::store::check_root_path(name, &rc.path)
            .map_err(|e| bad_field(&format!("roots.{name}.path"), e))?;
        if rc.exclude.len() > MAX_EXCLUDES || rc.exclude.iter().any(|p| p.len() > 4096) {
            return Err(bad_field(
                &format!("roots.{name}.exclude"),
                format!("more than {MAX_EXCLUDES} rules, or a rule over 4096 bytes"),
            ));
        }
    }
    if m.compression != "none" && m.compression != "zstd" {
        return Err(bad_field(
            "compression",
            format!("unknown compression {:?}", m.compression),
        ));
    }
    m.chunker.check().map_err(|e| bad_field("chunker", e))?;
    let mut listed = HashSet::new();
    for id in &m.checkpoints {
        if !listed.insert(id) {
            return Err(bad_field("checkpoints", format!("{id} is listed twice")));
        }
    }
    for (name, b) in &m.branches {
        crate::store::refs::check_name("branch", name).map_err(|e| bad_field("branches", e))?;
        if !BRANCH_STATES.contains(&b.state.as_str()) {
            return Err(bad_field(
                &format!("branches.{name}.state"),
                format!("{:?} is not one of {}", b.state, BRANCH_STATES.join(", ")),
            ));
        }
    }
    for name in m.labels.keys() {
        crate::store::refs::check_name("label", name).map_err(|e| bad_field("labels", e))?;
        if m.branches.contains_key(name) {
            return Err(bad_field(
                &format!("labels.{name}"),
                "is also a branch name in the archive",
            ));
        }
    }
    if m.object_bytes > m.objects.saturating_mul(MAX_ENTRY) {
        return Err(bad_field(
            "object_bytes",
            format!(
                "{} bytes cannot be {} objects of at most {MAX_ENTRY}",
                m.object_bytes, m.objects
            ),
        ));
    }
    Ok(m)
}

/// The manifest's fields, each decoded on its own so an error names the field.
fn manifest_fields(v: &serde_json::Value) -> Result<Manifest> {
    fn field<T: serde::de::DeserializeOwned>(v: &serde_json::Value, name: &str) -> Result<T> {
        let x = v.get(name).cloned().unwrap_or(serde_json::Value::Null);
        serde_json::from_value(x).map_err(|e| bad_field(name, e))
    }
    let mut branches = BTreeMap::new();
    match v.get("branches") {
        Some(serde_json::Value::Object(map)) => {
            for (name, b) in map {
                let b: Branch = serde_json::from_value(b.clone())
                    .map_err(|e| bad_field(&format!("branches.{name}"), e))?;
                branches.insert(name.clone(), b);
            }
        }
        _ => return Err(bad_field("branches", "not an object")),
    }
    Ok(Manifest {
        format: field(v, "format")?,
        version: field(v, "version")?,
        created: field(v, "created")?,
        roots: field(v, "roots")?,
        compression: field(v, "compression")?,
        chunker: field(v, "chunker")?,
        checkpoints: field(v, "checkpoints")?,
        branches,
        labels: field(v, "labels")?,
        objects: field(v, "objects")?,
        object_bytes: field(v, "object_bytes")?,
    })
}

/// Most exclude rules a root of an archive may bring.
const MAX_EXCLUDES: usize = 1024;
/// The states a branch record may have.
const BRANCH_STATES: &[&str] = &["active", "archived"];

/// The roots the target store at `target` would have after importing `m` (its own, the
/// archive's it lacks, relocated ones moved), checked as `init` checks roots.
///
/// # Errors
/// `Invalid` naming the manifest's root at fault (`Usage` for a bad `--relocate`).
fn check_manifest_against(
    m: &Manifest,
    target: &Path,
    existing: Option<&Store>,
    relocate: &BTreeMap<String, PathBuf>,
) -> Result<BTreeMap<String, RootConfig>> {
    let mut roots = existing.map_or_else(BTreeMap::new, |s| s.config().roots.clone());
    for (name, rc) in &m.roots {
        roots.entry(name.clone()).or_insert_with(|| rc.clone());
    }
    for (name, path) in relocate {
        crate::store::check_root_path(name, path).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("--relocate {name}: {m}")),
            other => other,
        })?;
        if let Some(rc) = roots.get_mut(name) {
            rc.path = path.clone();
        }
    }
    crate::store::check_roots(target, &roots).map_err(|e| {
        let msg = match e {
            Error::Usage(m) | Error::Invalid(m) => m,
            other => other.to_string(),
        };
        // A relocated root is the user's own choice: a usage error; else the archive's.
        match relocate
            .keys()
            .find(|n| msg.starts_with(&format!("root {n}")))
        {
            Some(n) => Error::Usage(format!("--relocate {n}: {msg}")),
            None => bad_field("roots", msg),
        }
    })?;
    Ok(roots)
}

/// The files of an archive: FILE itself, or FILE.part000, FILE.part001... in order.
fn archive_files(given: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let s = given.to_string_lossy();
    let base_str = if let Some(b) = s.strip_suffix(".sha256") {
        b.to_string()
    } else if let Some((b, n)) = s.rsplit_once(".part") {
        if n.len() == 3 && n.bytes().all(|c| c.is_ascii_digit()) {
            b.to_string()
        } else {
            s.to_string()
        }
    } else {
        s.to_string()
    };
    let base = crate::store::absolute(Path::new(&base_str))?;
    if base.is_file() {
        return Ok((base.clone(), vec![base]));
    }
    let mut parts = Vec::new();
    while part_path(&base, parts.len()).is_file() {
        parts.push(part_path(&base, parts.len()));
    }
    if parts.is_empty() {
        return Err(Error::NotFound(format!(
            "archive {} (nor {})",
            base.display(),
            part_path(&base, 0).display()
        )));
    }
    Ok((base, parts))
}

struct Chain {
    files: Vec<PathBuf>,
    next: usize,
    cur: Option<File>,
}

impl Read for Chain {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.cur.is_none() {
                let Some(p) = self.files.get(self.next) else {
                    return Ok(0);
                };
                self.cur = Some(open_part(p)?);
                self.next += 1;
            }
            let n = self.cur.as_mut().map_or(Ok(0), |f| f.read(buf))?;
            if n > 0 {
                return Ok(n);
            }
            self.cur = None;
        }
    }
}

fn chain(files: &[PathBuf]) -> Chain {
    Chain {
        files: files.to_vec(),
        next: 0,
        cur: None,
    }
}

fn sha256_file(p: &Path) -> Result<String> {
    let mut f = open_part(p).map_err(|e| Error::io(p, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(p, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Largest sidecar read (one line per part).
const MAX_SIDECAR_BYTES: u64 = 1 << 20;

/// Opens one file of an archive: non-blocking (a FIFO in its place does not hang), and it
/// must be a regular file.
fn open_part(p: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            p.display()
        )));
    }
    Ok(f)
}

/// Checks the digests of an archive's files; returns the whole digest.
fn check_digests(base: &Path, files: &[PathBuf], expected: Option<&str>) -> Result<String> {
    let sidecar = sidecar_path(base);
    let mut want: HashMap<String, String> = HashMap::new();
    let text =
        crate::store::object::read_regular_file(&sidecar, MAX_SIDECAR_BYTES, true, "sidecar")
            .and_then(|t| {
                t.map(|t| {
                    String::from_utf8(t).map_err(|_| {
                        Error::Invalid(format!("{} is not UTF-8 text", sidecar.display()))
                    })
                })
                .transpose()
            });
    match text {
        Ok(Some(text)) => {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let (h, name) = line.split_once("  ").ok_or_else(|| {
                    Error::Invalid(format!("{}: bad line {line:?}", sidecar.display()))
                })?;
                want.insert(name.to_string(), h.to_ascii_lowercase());
            }
        }
        Ok(None) if expected.is_some() => {}
        Ok(None) => {
            return Err(Error::NotFound(format!(
                "{} (the archive's SHA-256 sidecar; an archive without it may be incomplete). \
                 Give the digest with --sha256 HEX to import anyway",
                sidecar.display()
            )))
        }
        Err(e) => return Err(e),
    }
    let base_name = file_name_of(base)?;
    let whole_want = match expected {
        Some(h) => h.to_ascii_lowercase(),
        None => want.get(&base_name).cloned().ok_or_else(|| {
            Error::Invalid(format!(
                "{} has no digest for {base_name}",
                sidecar.display()
            ))
        })?,
    };
    let split = files.len() > 1 || files.first().is_some_and(|f| f != base);
    if split && expected.is_none() {
        let listed = want.keys().filter(|k| **k != base_name).count();
        if listed != files.len() {
            return Err(Error::Corrupt(format!(
                "archive {} should have {listed} parts, found {}; nothing imported",
                base.display(),
                files.len()
            )));
        }
        for f in files {
            let name = file_name_of(f)?;
            let got = sha256_file(f)?;
            match want.get(&name) {
                Some(w) if *w == got => {}
                Some(w) => {
                    return Err(Error::Corrupt(format!(
                        "archive part {} does not match its SHA-256 (expected {w}, got {got}): \
                         truncated or corrupted; nothing imported",
                        f.display()
                    )))
                }
                None => {
                    return Err(Error::Corrupt(format!(
                        "archive part {} is not listed in {}; nothing imported",
                        f.display(),
                        sidecar.display()
                    )))
                }
            }
        }
    }
    let mut h = Sha256::new();
    let mut r = chain(files);
    let mut buf = vec![0u8; 1 << 20];
    let size: u64 = files
        .iter()
        .filter_map(|f| fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let progress = Progress::bytes("unarchive check", "parts", Some(size));
    progress.add_items(files.len() as u64);
    loop {
        let n = r
            .read(&mut buf)
            .map_err(|e| Error::io_op(format!("reading {}", base.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress.add_bytes(n as u64);
    }
    progress.finish();
    let got = hex(&h.finalize());
    if got != whole_want {
        return Err(Error::Corrupt(format!(
            "archive {} does not match its SHA-256 (expected {whole_want}, got {got}): \
             truncated or corrupted; nothing imported",
            base.display()
        )));
    }
    Ok(got)
}

/// What a full read of an archive found (nothing written).
struct Scan {
    manifest: Manifest,
    /// Every object with its length.
    objects: HashMap<ObjectId, u64>,
    /// Objects that decode as trees -> their children: (id, None) for a tree, (id, Some(len))
    /// for a chunk of that length.
    trees: HashMap<ObjectId, Vec<(ObjectId, Option<u32>)>>,
    /// Some tree records ctimes and inode numbers (store format 2).
    stat_trees: bool,
    /// Some tree records hardlinks (store format 3).
    link_trees: bool,
    checkpoints: BTreeMap<ObjectId, Checkpoint>,
}

fn scan(files: &[PathBuf]) -> Result<Scan> {
    let mut objects = HashMap::new();
    let mut trees = HashMap::new();
    let mut checkpoints = BTreeMap::new();
    let mut stat_trees = false;
    let progress = Progress::items("unarchive scan", "objects", None);
    let mut link_trees = false;
    let manifest = read_archive(chain(files), &mut |item| {
        match item {
            ArchiveItem::Object { id, data } => {
                progress.add_items(1);
                progress.add_bytes(data.len() as u64);
                if let Ok(t) = Tree::decode(&data) {
                    let kids = t
                        .entries
                        .iter()
                        .flat_map(|e| match &e.kind {
                            EntryKind::File { chunks } => {
                                chunks.iter().map(|c| (c.id, Some(c.len))).collect()
                            }
                            EntryKind::Dir { tree, .. } => vec![(*tree, None)],
                            EntryKind::Symlink { .. } => vec![],
                        })
                        .collect::<Vec<_>>();
                    trees.insert(id, kids);
                    stat_trees |= crate::store::tree::records_stat(&data);
                    link_trees |= crate::store::tree::records_links(&data);
                }
                if objects.insert(id, data.len() as u64).is_some() {
                    return Err(Error::Invalid(format!(
                        "archive holds object {id} twice; nothing imported"
                    )));
                }
            }
            ArchiveItem::Checkpoint { id, record, .. } => {
                if checkpoints.insert(id, record).is_some() {
                    return Err(Error::Invalid(format!(
                        "archive holds checkpoint {id} twice; nothing imported"
                    )));
                }
            }
        }
        Ok(())
    })?;
    progress.finish();
    let scan = Scan {
        manifest,
        objects,
        trees,
        stat_trees,
        link_trees,
        checkpoints,
    };
    check_complete(&scan)?;
    Ok(scan)
}

/// Every listed checkpoint is present and every object it reaches is in the archive.
fn check_complete(s: &Scan) -> Result<()> {
    for id in &s.manifest.checkpoints {
        if !s.checkpoints.contains_key(id) {
            return Err(Error::Corrupt(format!(
                "archive manifest lists checkpoint {id} but the archive does not hold it"
            )));
        }
    }
    for (n, id) in &s.manifest.labels {
        if !s.checkpoints.contains_key(id) {
            return Err(Error::Corrupt(format!(
                "archive label {n} points at checkpoint {id} that it does not hold"
            )));
        }
    }
    for (n, b) in &s.manifest.branches {
        if let Some(h) = b.head {
            if !s.checkpoints.contains_key(&h) {
                return Err(Error::Corrupt(format!(
                    "archive branch {n} has head {h} that it does not hold"
                )));
            }
        }
    }
    if s.manifest.objects != s.objects.len() as u64 {
        return Err(bad_field(
            "objects",
            format!(
                "says {} objects, the archive holds {}",
                s.manifest.objects,
                s.objects.len()
            ),
        ));
    }
    if s.manifest.checkpoints.len() != s.checkpoints.len() {
        return Err(bad_field(
            "checkpoints",
            format!(
                "lists {} checkpoints, the archive holds {}",
                s.manifest.checkpoints.len(),
                s.checkpoints.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut stack: Vec<(ObjectId, Option<u32>)> = s
        .checkpoints
        .values()
        .flat_map(|c| c.roots.values().map(|r| (r.tree, None)))
        .collect();
    while let Some((id, chunk_len)) = stack.pop() {
        if !seen.insert((id, chunk_len)) {
            continue;
        }
        let Some(&len) = s.objects.get(&id) else {
            return Err(Error::Corrupt(format!(
                "archive is incomplete: object {id} is needed but missing; nothing imported"
            )));
        };
        match chunk_len {
            Some(want) if u64::from(want) != len => {
                return Err(Error::Corrupt(format!(
                    "archive object {id} is {len} bytes, the tree says {want}; nothing imported"
                )))
            }
            Some(_) => {}
            None => {
                let kids = s.trees.get(&id).ok_or_else(|| {
                    Error::Corrupt(format!("archive object {id} should be a tree but is not"))
                })?;
                stack.extend(kids.iter().copied());
            }
        }
    }
    Ok(())
}

/// Options of `unarchive`.
#[derive(Clone, Debug, Default)]
pub struct UnarchiveOptions {
    pub file: PathBuf,
    pub store: PathBuf,
    /// NAME -> new absolute path of a root.
    pub relocate: BTreeMap<String, PathBuf>,
    /// Expected whole-archive SHA-256 when there is no sidecar.
    pub sha256: Option<String>,
}

/// Imports an archive (see the module doc).
///
/// # Errors
/// `Corrupt`/`Invalid` for a bad archive, `Conflict` for refs that clash with the target;
/// nothing is imported in those cases.
pub fn unarchive(opts: &UnarchiveOptions) -> Result<UnarchiveReport> {
    let (base, files) = archive_files(&opts.file)?;
    let digest = check_digests(&base, &files, opts.sha256.as_deref())?;
    let scan = scan(&files).map_err(|e| match e {
        Error::Corrupt(m) if !m.contains("nothing imported") => {
            Error::Corrupt(format!("{m}; nothing imported"))
        }
        Error::Invalid(m) if !m.contains("nothing imported") => {
            Error::Invalid(format!("{m}; nothing imported"))
        }
        other => other,
    })?;
    let target = crate::store::absolute(&opts.store)?;
    let m = &scan.manifest;
    for name in opts.relocate.keys() {
        if !m.roots.contains_key(name) {
            let known: Vec<&str> = m.roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "--relocate {name}: the archive has no root {name} (roots: {})",
                known.join(", ")
            )));
        }
    }
    // Everything is checked before anything is written: the manifest against the target
    // (roots as `init` checks them, refs), then the store is created or opened for writing.
    let existing = target.join(crate::store::CONFIG_FILE).exists();
    let current = if existing {
        let s = Store::open(&target)?;
        check_ref_conflicts(&s, m)?;
        Some(s)
    } else {
        None
    };
    let merged = check_manifest_against(m, &target, current.as_ref(), &opts.relocate)?;
    let mut roots = m.roots.clone();
    for (name, path) in &opts.relocate {
        if let Some(rc) = roots.get_mut(name) {
            rc.path = path.clone();
        }
    }
    let (store, created) = match current {
        Some(s) => (s, false),
        None => {
            let s = Store::init(
                &target,
                &InitOptions {
                    roots: roots.clone(),
                    zstd: m.compression == "zstd",
                    no_default_excludes: true,
                },
            )?;
            (s, true)
        }
    };
    let mut report = UnarchiveReport {
        store: store.root().to_path_buf(),
        created_store: created,
        sha256: digest.clone(),
        relocated: opts.relocate.clone(),
        ..Default::default()
    };
    let mut config = store.config().clone();
    config.roots = merged;
    if created {
        config.chunker = m.chunker.clone();
    }
    // A version-1 store taking trees that record ctimes and inode numbers becomes version 2
    // (3 for trees that record hardlinks) before any of them lands, so older builds refuse it
    // instead of failing on those trees.
    let needed = match (scan.link_trees, scan.stat_trees) {
        (true, _) => 3,
        (false, true) => 2,
        (false, false) => 1,
    };
    let upgrade = needed > store.config().version;
    if upgrade {
        config.version = needed;
        report.upgraded_to = Some(config.version);
    }
    let config_changed = config != *store.config();
    let args = serde_json::json!({"file": base, "sha256": digest, "relocate": opts.relocate});
    store.mutate("unarchive", args, |_| {
        check_ref_conflicts(&store, m)?;
        if upgrade {
            let mut c = store.config().clone();
            c.version = config.version;
            store.write_config_file(&c)?;
        }
        // 1. Objects (re-hashed by read_archive, deduplicated by the batch).
        let batch = ObjectBatch::new(&store);
        let mut present = 0u64;
        let mut records: Vec<(ObjectId, Vec<u8>)> = Vec::new();
        let progress = Progress::items("unarchive", "objects", Some(scan.objects.len() as u64));
        let result = read_archive(chain(&files), &mut |item| {
            match item {
                ArchiveItem::Object { id, data } => {
                    progress.add_items(1);
                    progress.add_bytes(data.len() as u64);
                    if store.has_object(&id) {
                        present += 1;
                    }
                    batch.ensure_with_id(id, &data)?;
                }
                ArchiveItem::Checkpoint { id, data, .. } => records.push((id, data)),
            }
            Ok(())
        });
        if let Err(e) = result {
            batch.abandon();
            return Err(e);
        }
        batch.commit()?;
        progress.finish();
        report.objects_new = batch.new_objects();
        report.objects_present = present;
        // 2. Records, once every object is durable.
        for (id, data) in &records {
            if store.checkpoint_path(id).exists() {
                report.checkpoints_present += 1;
            } else {
                atomic::write_atomic_new(&store.checkpoint_path(id), data, 0o444)?;
                report.checkpoints_new += 1;
            }
        }
        // 3. STORE.json roots (relocated or added), 4. refs.
        if config_changed {
            store.write_config_file(&config)?;
        }
        for (name, b) in &m.branches {
            if store.read_branch(name)?.is_none() {
                store.write_branch(name, b)?;
            }
            report.branches.push(name.clone());
        }
        for (name, id) in &m.labels {
            store.create_label(name, id)?;
            report.labels.push(name.clone());
        }
        let summary = serde_json::json!({"sha256": report.sha256,
            "checkpoints_new": report.checkpoints_new, "objects_new": report.objects_new,
            "branches": report.branches, "labels": report.labels, "relocated": report.relocated});
        Ok(((), summary))
    })?;
    Ok(report)
}

/// Refuses labels or branches that exist in the target with another value.
fn check_ref_conflicts(store: &Store, m: &Manifest) -> Result<()> {
    for (name, id) in &m.labels {
        if let Some(cur) = store.read_label(name)? {
            if cur != *id {
                return Err(Error::Conflict(format!(
                    "label {name} exists in {} with another checkpoint ({}); nothing imported",
                    store.root().display(),
                    cur.short()
                )));
            }
        }
        if store.read_branch(name)?.is_some() {
            return Err(Error::Conflict(format!(
                "archive label {name} is a branch name in {}; nothing imported",
                store.root().display()
            )));
        }
    }
    for (name, b) in &m.branches {
        if let Some(cur) = store.read_branch(name)? {
            if cur.head != b.head {
                return Err(Error::Conflict(format!(
                    "branch {name} exists in {} with another head ({}); rename or delete it \
                     there first; nothing imported",
                    store.root().display(),
                    cur.head.map_or("none".into(), |h| h.short())
                )));
            }
        }
    }
    Ok(())
}
