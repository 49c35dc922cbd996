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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

mod export;
pub use export::*;

mod manifest;
pub use manifest::*;

mod import;
pub use import::*;

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
    /// Roots STORE.json did not have before (every root of a store this import created):
    /// directories a `capture` of the store now reads.
    pub roots_added: BTreeMap<String, PathBuf>,
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

// ---------------------------------------------------------------------------------------------
// Reading

/// Options of `unarchive`.
#[derive(Clone, Debug, Default)]
pub struct UnarchiveOptions {
    pub file: PathBuf,
    pub store: PathBuf,
    /// NAME -> new absolute path of a root.
    pub relocate: BTreeMap<String, PathBuf>,
    /// Roots of the archive an existing store gains at the path the archive records
    /// (`--add-root`); any other root the store lacks is refused unless relocated.
    pub add_roots: BTreeSet<String>,
    /// Expected whole-archive SHA-256 when there is no sidecar.
    pub sha256: Option<String>,
}
