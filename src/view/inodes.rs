//! Inode numbers and the inode table. A number is a hash of (parent inode, name), so it is
//! the same across walks and remounts and never derived from content; the table holds only the
//! inodes the kernel references, with their lookup counts, so memory follows what the kernel
//! caches rather than what has been walked.

use sha2::{Digest, Sha256};

use super::{lock, Content, Ino, Namespace, Node, View, ROOT_INO};
use crate::error::{Error, Result};
use crate::store::tree::Entry;

/// Inode numbers below this are reserved; hashed numbers are moved above it.
const FIRST_HASHED_INO: Ino = 1 << 10;

/// An inode the kernel references, and how many lookups it has not yet forgotten.
pub(super) struct Slot {
    pub(super) node: Node,
    pub(super) lookups: u64,
}

/// The inode number of stored entry `e` whose [`child_ino`] is `hashed`: its low 32 bits
/// replaced by the inode number the entry had when captured, if recorded. Tools that cache
/// stat data compare those bits (git's index keeps `st_ino` as 32 bits), so a restored tree
/// looks unchanged to them; the high bits, from the path, keep numbers distinct across the
/// checkpoints of one view.
pub fn entry_ino(hashed: Ino, e: &Entry) -> Ino {
    if e.ino == 0 {
        return hashed;
    }
    let high = hashed & 0x7fff_ffff_0000_0000;
    // Never in the reserved range, even with all-zero high bits (2^-31 odds).
    let high = if high == 0 { 1 << 32 } else { high };
    high | (e.ino & 0xffff_ffff)
}

/// The inode number of `name` in directory `parent`: stable across walks and remounts.
pub fn child_ino(parent: Ino, name: &[u8]) -> Ino {
    let mut h = Sha256::new();
    h.update(parent.to_le_bytes());
    h.update(name);
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    let ino = u64::from_le_bytes(b) & (u64::MAX >> 1);
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
                if slot.node.parent != node.parent || slot.node.name != node.name {
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
                inodes.remove(&ino);
            }
        }
    }
}
