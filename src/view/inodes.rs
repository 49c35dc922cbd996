//! Inode numbers and the inode table. Each node has two numbers (docs/inodes.md):
//! - its **node id**, the kernel's handle: a hash of (parent node id, name), so the same across
//!   walks and remounts, distinct across checkpoints (the kernel must never take one
//!   checkpoint's version of a file or directory for another's), never derived from content;
//! - its **shown number** (`st_ino`), the file's identity: the inode number its tree recorded,
//!   the same in every checkpoint ([`shown_ino`]).
//!
//! The table holds the inodes the kernel references, with their lookup counts, so memory
//! follows what the kernel caches rather than what has been walked; a bounded set of
//! forgotten ones answers the kernel's file-handle lookups (`.` of a node id).

use sha2::{Digest, Sha256};

use super::{lock, Content, Ino, Namespace, Node, View, ROOT_INO};
use crate::error::{Error, Result};

/// Node ids below this are reserved; hashed ids are moved above it.
const FIRST_HASHED_INO: Ino = 1 << 10;

/// Shown numbers stay below this: overlayfs with `xino=on` and one lower filesystem keeps the
/// top two bits of `st_ino` for the layer (bit 63: the lower) and shows a lower number that
/// uses them with a number of its own, different at every mount.
pub const SHOWN_INO_LIMIT: Ino = 1 << 62;

/// Shown numbers made from a path (entries whose tree recorded no inode number) lie in
/// [2^61, 2^62): above the numbers local filesystems hand out.
const PATH_INO_BASE: Ino = 1 << 61;

/// An inode the kernel references, and how many lookups it has not yet forgotten.
pub(super) struct Slot {
    pub(super) node: Node,
    pub(super) lookups: u64,
}

/// How many forgotten nodes a view keeps to answer the kernel's `LOOKUP(node id, ".")`: it
/// sends one to decode a file handle of an inode it evicted (overlayfs keeps handles of the
/// lower files it copied up, `trusted.overlay.origin`, and decodes them after a cache drop).
/// About 200 bytes each.
pub(super) const GHOSTS: usize = 1 << 18;

/// The `st_ino` shown for an entry whose tree recorded `recorded` (0: none) and whose path key
/// is `key`. The recorded number is the file's identity: a capture records what the file
/// had, and a workspace checkpoint keeps the number of the lower file a copy came from, so a
/// file shows one number in every checkpoint, as long as it lives. Numbers a workspace shows
/// for lower files carry overlayfs's layer bits, dropped here, so the shown number of a
/// file that went through a workspace is the one it had in the view below it.
pub fn shown_ino(recorded: u64, key: u64) -> Ino {
    let stripped = recorded & (SHOWN_INO_LIMIT - 1);
    if stripped != 0 {
        return stripped;
    }
    PATH_INO_BASE | (key & (PATH_INO_BASE - 1))
}

/// The path key of `name` in a directory whose key is `parent` (see [`Node::key`]).
pub fn path_key(parent: u64, name: &[u8]) -> u64 {
    hash64(&[&parent.to_le_bytes(), name])
}

/// The path key of the top directory of root `root`.
pub(super) fn root_key(root: &str) -> u64 {
    hash64(&[b"ckptfs root ", root.as_bytes()])
}

fn hash64(parts: &[&[u8]]) -> u64 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// The node id of every name of the linked file recorded with inode number `recorded` in the
/// checkpoint root whose node id is `root`.
pub fn link_ino(root: Ino, recorded: u64) -> Ino {
    let ino = hash64(&[b"link", &root.to_le_bytes(), &recorded.to_le_bytes()]) & (u64::MAX >> 1);
    ino.max(FIRST_HASHED_INO)
}

/// The node id of `name` in directory `parent`: stable across walks and remounts, and
/// distinct across checkpoints (the path from the top of a browse view names one).
pub fn child_ino(parent: Ino, name: &[u8]) -> Ino {
    let ino = hash64(&[&parent.to_le_bytes(), name]) & (u64::MAX >> 1);
    if ino < FIRST_HASHED_INO {
        ino + FIRST_HASHED_INO
    } else {
        ino
    }
}

impl View {
    /// Number of inodes the kernel currently references (plus the root).
    pub fn inode_count(&self) -> usize {
        lock(&self.inodes).len()
    }

    /// The path of an inode below the mount, for log lines.
    pub fn path_of(&self, ino: Ino) -> String {
        let inodes = lock(&self.inodes);
        let mut parts: Vec<String> = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO && parts.len() < 4096 {
            match inodes.get(&cur) {
                Some(s) => {
                    parts.push(String::from_utf8_lossy(&s.node.name).into_owned());
                    cur = s.node.parent;
                }
                None => {
                    parts.push(format!("<inode {cur}>"));
                    break;
                }
            }
        }
        parts.reverse();
        let rel = parts.join("/");
        match &self.namespace {
            Namespace::Checkpoint { id, root } => format!("{}:{root}/{rel}", id.short()),
            Namespace::Browse => format!("/{rel}"),
        }
    }

    pub(super) fn path_with(&self, parent: Ino, name: &[u8]) -> String {
        let p = self.path_of(parent);
        let sep = if p.ends_with('/') { "" } else { "/" };
        format!("{p}{sep}{}", String::from_utf8_lossy(name))
    }

    /// Registers a node the kernel now references (one lookup count).
    ///
    /// # Errors
    /// `Corrupt` (EIO) on an inode-number collision between two different names (2^-63 odds
    /// per pair); logged.
    pub fn remember(&self, node: &Node) -> Result<()> {
        if node.attr.ino == ROOT_INO {
            return Ok(());
        }
        let mut inodes = lock(&self.inodes);
        if let Content::Checkpoint(id) = &node.content {
            if !inodes.contains_key(&node.attr.ino) {
                // Pinned before the kernel hears of it, so gc never finds it reachable and
                // unpinned; a pin that cannot be written fails the lookup.
                self.hold_in_pin(id, true)?;
            }
        }
        match inodes.get_mut(&node.attr.ino) {
            Some(slot) => {
                let another_name = node.attr.nlink > 1
                    && node.attr.kind == super::Kind::File
                    && slot.node.attr == node.attr;
                if !another_name && (slot.node.parent != node.parent || slot.node.name != node.name)
                {
                    drop(inodes);
                    let msg = format!(
                        "inode number collision between {} and {}",
                        self.path_of(node.attr.ino),
                        self.path_with(node.parent, &node.name)
                    );
                    log::error!("{msg}");
                    return Err(Error::Corrupt(msg));
                }
                // Browse entries can change (a branch moved): keep the newest.
                slot.node = node.clone();
                slot.lookups += 1;
            }
            None => {
                inodes.insert(
                    node.attr.ino,
                    Slot {
                        node: node.clone(),
                        lookups: 1,
                    },
                );
            }
        }
        Ok(())
    }

    /// The kernel dropped `n` references to `ino`.
    pub fn forget(&self, ino: Ino, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut inodes = lock(&self.inodes);
        if let Some(slot) = inodes.get_mut(&ino) {
            slot.lookups = slot.lookups.saturating_sub(n);
            if slot.lookups == 0 {
                if let Content::Checkpoint(id) = &slot.node.content {
                    // Nothing the kernel holds can reach it through this view any more.
                    if let Err(e) = self.hold_in_pin(id, false) {
                        log::warn!("unpinning checkpoint {}: {e}", id.short());
                    }
                }
                if let Some(slot) = inodes.remove(&ino) {
                    lock(&self.ghosts).put(ino, slot.node);
                }
            }
        }
    }

    /// The path of node `ino` below the mount (known or recently forgotten nodes only).
    pub fn path_below(&self, ino: Ino) -> Option<std::path::PathBuf> {
        use std::os::unix::ffi::OsStrExt;
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT_INO {
            let n = self.node_or_ghost(cur).ok()?;
            parts.push(n.name.clone());
            cur = n.parent;
            if parts.len() > 4096 {
                return None;
            }
        }
        Some(
            parts
                .iter()
                .rev()
                .map(|p| std::ffi::OsStr::from_bytes(p))
                .collect(),
        )
    }

    /// A node the kernel holds or recently forgot (for file-handle lookups).
    ///
    /// # Errors
    /// `Stale` when it is neither (the kernel then answers ESTALE for the handle).
    pub fn node_or_ghost(&self, ino: Ino) -> Result<Node> {
        match self.node(ino) {
            Ok(n) => Ok(n),
            Err(Error::NotFound(_)) => lock(&self.ghosts)
                .get(&ino)
                .cloned()
                .ok_or_else(|| Error::NotFound(format!("node id {ino} (forgotten)"))),
            Err(e) => Err(e),
        }
    }
}
