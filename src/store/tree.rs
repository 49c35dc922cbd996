//! Trees: the canonical binary encoding of one directory's entries.
//!
//! ```text
//! tree    = ("CKT1" | "CKT2" | "CKT3") u32:count entry*  (entries strictly sorted by name)
//! entry   = u16:namelen name u8:kind u32:mode u32:uid u32:gid i64:mtime_ns u64:size
//!           [i64:ctime_ns u64:ino]                (CKT2 and CKT3)
//!           [u32:nlink]                           (CKT3 only)
//!           u16:nxattr (u16:len name u32:len value)*  payload
//! payload = file:    u32:nchunks (id[32] u32:len)*   (sum of len == size)
//!           dir:     id[32] u32:subdirs              (subdirs = number of child dirs)
//!           symlink: u32:len target
//! ```
//! `ctime_ns` and `ino` are what the entry had when it was captured: views present them, so
//! tools that cache stat data (git's index) find a restored tree unchanged. A tree whose
//! entries all lack them (0: written before CKT2, or built without a source file) is encoded
//! as CKT1, so such trees keep their ids. Integers are little-endian.
//!
//! **Hardlinks** (CKT3): a file whose inode has several names in its root records `nlink`,
//! the number of those names (2 or more; 0 for every other entry, never 1), and every name
//! records the same `ino` and the same content and metadata: the entries of one root with one
//! `ino` and `nlink` > 0 are one file (a *link group*). A tree is CKT3 only when one of its
//! entries is linked, so trees without links keep their CKT2/CKT1 encoding and ids; only a
//! store of format version 3 holds CKT3 trees.
//!
//! Trees come from stores and archives made elsewhere, so decoding treats them as hostile and
//! rejects: names that are empty, `.`, `..`, longer than 255 bytes, or contain `/` or NUL;
//! unsorted or duplicate names; a file whose chunks are not all 1..=[`MAX_CHUNK_LEN`] bytes
//! (an empty file has no chunk) or do not add up to its size; a symlink target that is empty,
//! holds NUL or is longer than [`MAX_SYMLINK_TARGET`]; xattrs beyond the kernel's limits
//! ([`MAX_XATTR_NAME`], [`MAX_XATTR_VALUE`], [`MAX_XATTR_LIST`]); a directory claiming more
//! entries than a tree can hold; and trailing bytes. So a tree can never make a view or a
//! restore step outside its directory, and no length it states is trusted beyond those bounds
//! (readers hold each chunk object to its stated length, see `Store::read_chunk`).

use crate::error::{Error, Result};
use crate::id::{ObjectId, ID_LEN};

/// The deepest directory nesting any walk accepts, in a stored tree (a root's entries are at
/// depth 1) or on disk (capture, the workspace's upper layer, restore). Deeper input is refused
/// with one line naming the path or tree and this bound, never followed until the stack runs
/// out. Why 1024: a chain that deep of one-byte names still has paths within PATH_MAX (4096
/// bytes) below a root of some depth, which the parts of capture and restore that name files
/// by path need; git's `core.maxTreeDepth` (4096, 2048 on Windows) is of the same order, and
/// real trees (node_modules included) stay far below it.
pub const MAX_TREE_DEPTH: usize = 1024;

/// Refuses `depth` past [`MAX_TREE_DEPTH`]; `what` names the directory or tree at fault.
///
/// # Errors
/// `Invalid` naming `what` and the bound.
pub fn check_depth(depth: usize, what: impl FnOnce() -> String) -> Result<()> {
    if depth > MAX_TREE_DEPTH {
        return Err(Error::Invalid(format!(
            "{}: directories nested deeper than {MAX_TREE_DEPTH} levels are not supported",
            what()
        )));
    }
    Ok(())
}

const MAGIC: &[u8; 4] = b"CKT1";
/// Largest chunk: the largest chunker `max` a store may be configured with.
pub const MAX_CHUNK_LEN: u32 = 64 << 20;
/// Largest encoded tree any reader accepts (a directory of about two million entries).
pub const MAX_TREE_BYTES: u64 = 256 << 20;
/// Longest symlink target (`PATH_MAX`, counting the NUL the kernel adds).
pub const MAX_SYMLINK_TARGET: usize = 4096;
/// Longest xattr name (`XATTR_NAME_MAX`).
pub const MAX_XATTR_NAME: usize = 255;
/// Largest xattr value (`XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 64 << 10;
/// Largest xattr name list of one file, each name with its NUL (`XATTR_LIST_MAX`).
pub const MAX_XATTR_LIST: usize = 64 << 10;
/// Smallest encoded entry (CKT1, a one-byte name, no xattrs, an empty file: no chunks):
/// bounds the entry count a tree of a given size can claim.
const MIN_ENTRY_BYTES: usize = 2 + 1 + 1 + 4 * 3 + 8 + 8 + 2 + 4;
/// Entries carry their captured ctime and inode number.
const MAGIC2: &[u8; 4] = b"CKT2";
/// Entries also carry their link count (hardlinks).
const MAGIC3: &[u8; 4] = b"CKT3";

/// A chunk of a file's content.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Chunk {
    pub id: ObjectId,
    pub len: u32,
}

/// What an entry is, with its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    File { chunks: Vec<Chunk> },
    Dir { tree: ObjectId, subdirs: u32 },
    Symlink { target: Vec<u8> },
}

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub kind: EntryKind,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime_ns: i64,
    /// File size; for a directory the number of entries; for a symlink the target length.
    pub size: u64,
    /// Extended attributes, sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// `st_ctime` when captured; 0 when not recorded (views then show the mtime).
    pub ctime_ns: i64,
    /// `st_ino` when captured; 0 when not recorded.
    pub ino: u64,
    /// For a file with several names in its root: how many (all of them record the same
    /// `ino`, content and metadata). 0 for everything else (never 1).
    pub nlink: u32,
}

impl Entry {
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, EntryKind::Dir { .. })
    }
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            EntryKind::File { .. } => "file",
            EntryKind::Dir { .. } => "dir",
            EntryKind::Symlink { .. } => "symlink",
        }
    }
    /// Full `st_mode` including the file type bits.
    pub fn st_mode(&self) -> u32 {
        let t = match self.kind {
            EntryKind::File { .. } => libc::S_IFREG,
            EntryKind::Dir { .. } => libc::S_IFDIR,
            EntryKind::Symlink { .. } => libc::S_IFLNK,
        };
        t | (self.mode & 0o7777)
    }
}

/// A decoded directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tree {
    pub entries: Vec<Entry>,
}

/// Whether an encoded tree records ctimes and inode numbers (`CKT2`): only stores of format
/// version 2 and later may hold such trees.
pub fn records_stat(encoded: &[u8]) -> bool {
    encoded.starts_with(MAGIC2) || encoded.starts_with(MAGIC3)
}

/// Whether an encoded tree records hardlinks (`CKT3`): only stores of format version 3 and
/// later may hold such trees.
pub fn records_links(encoded: &[u8]) -> bool {
    encoded.starts_with(MAGIC3)
}

/// Checks one entry name as stored in a tree.
pub fn check_entry_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0)
    {
        return Err(Error::Corrupt(format!(
            "tree entry name {:?} is not a valid file name",
            String::from_utf8_lossy(name)
        )));
    }
    if name.len() > 255 {
        return Err(Error::Corrupt(format!(
            "tree entry name longer than 255 bytes: {:?}",
            String::from_utf8_lossy(&name[..40])
        )));
    }
    Ok(())
}

/// Every name in any of `trees`, sorted, once (the walk over two or three versions of a
/// directory).
pub fn names_in<'t>(trees: &[&'t Tree]) -> std::collections::BTreeSet<&'t [u8]> {
    trees
        .iter()
        .flat_map(|t| t.entries.iter().map(|e| e.name.as_slice()))
        .collect()
}

impl Tree {
    /// Looks up an entry by name (binary search: entries are sorted).
    pub fn get(&self, name: &[u8]) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Canonical encoding. Entries must already be sorted by name.
    pub fn encode(&self) -> Vec<u8> {
        let links = self.entries.iter().any(|e| e.nlink != 0);
        let stat = links || self.entries.iter().any(|e| e.ctime_ns != 0 || e.ino != 0);
        let mut out = Vec::with_capacity(64 + self.entries.len() * 112);
        out.extend_from_slice(match (links, stat) {
            (true, _) => MAGIC3,
            (false, true) => MAGIC2,
            (false, false) => MAGIC,
        });
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            encode_entry(e, stat, links, &mut out);
        }
        out
    }

    /// Decodes and validates a tree.
    ///
    /// # Errors
    /// `Corrupt` describing the first defect.
    pub fn decode(data: &[u8]) -> Result<Tree> {
        if data.len() as u64 > MAX_TREE_BYTES {
            return Err(Error::Corrupt(format!(
                "tree object is {} bytes, more than any tree ({MAX_TREE_BYTES})",
                data.len()
            )));
        }
        let mut r = Reader { data, pos: 0 };
        let (stat, links) = match r.take(4)? {
            m if m == MAGIC => (false, false),
            m if m == MAGIC2 => (true, false),
            m if m == MAGIC3 => (true, true),
            _ => return Err(Error::Corrupt("tree object has a bad magic".into())),
        };
        let count = r.u32()? as usize;
        // Refuse counts the data cannot hold (so the capacity below is bounded by the input).
        if count > data.len() / MIN_ENTRY_BYTES {
            return Err(Error::Corrupt(format!(
                "tree entry count {count} exceeds what its {} bytes can hold",
                data.len()
            )));
        }
        let mut entries: Vec<Entry> = Vec::with_capacity(count);
        for _ in 0..count {
            let e = decode_entry(&mut r, stat, links)?;
            if let Some(prev) = entries.last() {
                if prev.name >= e.name {
                    return Err(Error::Corrupt(format!(
                        "tree entries not strictly sorted at {:?}",
                        String::from_utf8_lossy(&e.name)
                    )));
                }
            }
            entries.push(e);
        }
        if r.pos != data.len() {
            return Err(Error::Corrupt("trailing bytes after tree entries".into()));
        }
        Ok(Tree { entries })
    }

    /// [`Tree::decode`] of the object `id`: the error names the tree.
    ///
    /// # Errors
    /// `Corrupt` naming the tree and its first defect.
    pub fn decode_object(id: &ObjectId, data: &[u8]) -> Result<Tree> {
        Tree::decode(data).map_err(|e| match e {
            Error::Corrupt(m) => Error::Corrupt(format!("tree {id}: {m}")),
            other => other,
        })
    }
}

/// Appends the encoding of one entry, with its ctime and inode number when `stat` (CKT2),
/// and its link count too when `links` (CKT3).
fn encode_entry(e: &Entry, stat: bool, links: bool, out: &mut Vec<u8>) {
    out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
    out.extend_from_slice(&e.name);
    let (kind, _) = kind_code(&e.kind);
    out.push(kind);
    out.extend_from_slice(&e.mode.to_le_bytes());
    out.extend_from_slice(&e.uid.to_le_bytes());
    out.extend_from_slice(&e.gid.to_le_bytes());
    out.extend_from_slice(&e.mtime_ns.to_le_bytes());
    out.extend_from_slice(&e.size.to_le_bytes());
    if stat {
        out.extend_from_slice(&e.ctime_ns.to_le_bytes());
        out.extend_from_slice(&e.ino.to_le_bytes());
    }
    if links {
        out.extend_from_slice(&e.nlink.to_le_bytes());
    }
    out.extend_from_slice(&(e.xattrs.len() as u16).to_le_bytes());
    for (k, v) in &e.xattrs {
        out.extend_from_slice(&(k.len() as u16).to_le_bytes());
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(v);
    }
    match &e.kind {
        EntryKind::File { chunks } => {
            out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
            for c in chunks {
                out.extend_from_slice(&c.id.0);
                out.extend_from_slice(&c.len.to_le_bytes());
            }
        }
        EntryKind::Dir { tree, subdirs } => {
            out.extend_from_slice(&tree.0);
            out.extend_from_slice(&subdirs.to_le_bytes());
        }
        EntryKind::Symlink { target } => {
            out.extend_from_slice(&(target.len() as u32).to_le_bytes());
            out.extend_from_slice(target);
        }
    }
}

fn kind_code(k: &EntryKind) -> (u8, ()) {
    match k {
        EntryKind::File { .. } => (1, ()),
        EntryKind::Dir { .. } => (2, ()),
        EntryKind::Symlink { .. } => (3, ()),
    }
}

/// A bounds-checked little-endian reader.
pub struct Reader<'a> {
    pub data: &'a [u8],
    pub pos: usize,
}

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| Error::Corrupt("truncated tree data".into()))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    pub fn id(&mut self) -> Result<ObjectId> {
        Ok(ObjectId(self.array::<ID_LEN>()?))
    }
}

/// Decodes and validates one entry (with ctime and inode number when `stat`: CKT2; and its
/// link count when `links`: CKT3).
fn decode_entry(r: &mut Reader<'_>, stat: bool, links: bool) -> Result<Entry> {
    let nlen = r.u16()? as usize;
    let name = r.take(nlen)?.to_vec();
    check_entry_name(&name)?;
    let kind = r.u8()?;
    let mode = r.u32()?;
    if mode & !0o7777 != 0 {
        return Err(Error::Corrupt(
            "tree entry mode has non-permission bits".into(),
        ));
    }
    let uid = r.u32()?;
    let gid = r.u32()?;
    let mtime_ns = r.i64()?;
    let size = r.u64()?;
    let (ctime_ns, ino) = if stat { (r.i64()?, r.u64()?) } else { (0, 0) };
    let nlink = if links { r.u32()? } else { 0 };
    let entry = || String::from_utf8_lossy(&name).into_owned();
    // Only files have several names; 1 is written as 0 (one encoding per tree); a group is
    // named by its inode number, so a linked entry must record one.
    if nlink == 1 || (nlink > 1 && (kind != 1 || ino == 0)) {
        return Err(Error::Corrupt(format!(
            "{:?}: link count {nlink} is impossible for it",
            entry()
        )));
    }
    let nx = r.u16()? as usize;
    let mut xattrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(nx.min(64));
    let mut list_len = 0usize;
    for _ in 0..nx {
        let kl = r.u16()? as usize;
        let k = r.take(kl)?.to_vec();
        let vl = r.u32()? as usize;
        if k.is_empty() || k.contains(&0) || k.len() > MAX_XATTR_NAME {
            return Err(Error::Corrupt(format!(
                "{:?}: invalid xattr name (empty, NUL or over {MAX_XATTR_NAME} bytes)",
                entry()
            )));
        }
        if vl > MAX_XATTR_VALUE {
            return Err(Error::Corrupt(format!(
                "{:?}: xattr value of {vl} bytes, more than {MAX_XATTR_VALUE}",
                entry()
            )));
        }
        list_len += k.len() + 1;
        if list_len > MAX_XATTR_LIST {
            return Err(Error::Corrupt(format!(
                "{:?}: xattr names exceed {MAX_XATTR_LIST} bytes",
                entry()
            )));
        }
        let v = r.take(vl)?.to_vec();
        if xattrs.last().is_some_and(|(pk, _)| *pk >= k) {
            return Err(Error::Corrupt(format!(
                "{:?}: xattrs not sorted or repeated",
                entry()
            )));
        }
        xattrs.push((k, v));
    }
    let kind = match kind {
        1 => {
            let n = r.u32()? as usize;
            if n > (r.data.len() - r.pos) / (ID_LEN + 4) {
                return Err(Error::Corrupt(format!(
                    "file {:?}: chunk count {n} exceeds the tree's size",
                    entry()
                )));
            }
            let mut chunks = Vec::with_capacity(n);
            let mut total = 0u64;
            for i in 0..n {
                let id = r.id()?;
                let len = r.u32()?;
                if len == 0 || len > MAX_CHUNK_LEN {
                    return Err(Error::Corrupt(format!(
                        "file {:?}: chunk {i} has length {len} (chunks are 1 to {MAX_CHUNK_LEN} \
                         bytes; an empty file has none)",
                        entry()
                    )));
                }
                total += u64::from(len);
                chunks.push(Chunk { id, len });
            }
            if total != size {
                return Err(Error::Corrupt(format!(
                    "file {:?}: chunk lengths add up to {total}, its size is {size}",
                    entry()
                )));
            }
            EntryKind::File { chunks }
        }
        2 => {
            let tree = r.id()?;
            let subdirs = r.u32()?;
            // size = the entry count of its tree, a u32; subdirs are some of those entries.
            if size > u64::from(u32::MAX) || u64::from(subdirs) > size {
                return Err(Error::Corrupt(format!(
                    "directory {:?}: {size} entries, {subdirs} subdirectories is impossible",
                    entry()
                )));
            }
            EntryKind::Dir { tree, subdirs }
        }
        3 => {
            let n = r.u32()? as usize;
            if n > MAX_SYMLINK_TARGET || size > MAX_SYMLINK_TARGET as u64 {
                return Err(Error::Corrupt(format!(
                    "symlink {:?}: target longer than {MAX_SYMLINK_TARGET} bytes",
                    entry()
                )));
            }
            let target = r.take(n)?.to_vec();
            if target.is_empty() || target.contains(&0) {
                return Err(Error::Corrupt(format!(
                    "symlink {:?}: target is empty or contains NUL",
                    entry()
                )));
            }
            EntryKind::Symlink { target }
        }
        k => {
            return Err(Error::Corrupt(format!(
                "{:?}: unknown tree entry kind {k}",
                entry()
            )))
        }
    };
    Ok(Entry {
        name,
        kind,
        mode,
        uid,
        gid,
        mtime_ns,
        size,
        xattrs,
        ctime_ns,
        ino,
        nlink,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> Entry {
        Entry {
            name: name.as_bytes().to_vec(),
            kind: EntryKind::File {
                chunks: vec![Chunk {
                    id: ObjectId::of(b"x"),
                    len: 1,
                }],
            },
            mode: 0o644,
            uid: 0,
            gid: 0,
            mtime_ns: 5,
            size: 1,
            xattrs: vec![(b"user.a".to_vec(), b"1".to_vec())],
            ctime_ns: 0,
            ino: 0,
            nlink: 0,
        }
    }

    #[test]
    fn link_counts_make_ckt3_and_impossible_ones_are_refused() {
        let mut a = file("a");
        let mut b = file("b");
        for e in [&mut a, &mut b] {
            e.ino = 77;
            e.nlink = 2;
        }
        let t = Tree {
            entries: vec![a.clone(), b, file("c")],
        };
        let enc = t.encode();
        assert_eq!(&enc[..4], MAGIC3);
        assert!(records_links(&enc) && records_stat(&enc));
        assert_eq!(Tree::decode(&enc).unwrap(), t);
        // Without links the encoding is CKT2 as before.
        let mut plain = t.clone();
        for e in &mut plain.entries {
            e.nlink = 0;
        }
        assert_eq!(&plain.encode()[..4], MAGIC2);
        for bad in [1u32, 3] {
            let mut e = a.clone();
            e.nlink = bad;
            if bad == 3 {
                e.ino = 0;
            }
            let enc = Tree { entries: vec![e] }.encode();
            assert!(Tree::decode(&enc).is_err(), "nlink {bad} accepted");
        }
    }

    #[test]
    fn captured_ctime_and_inode_survive_and_old_trees_keep_their_encoding() {
        let old = Tree {
            entries: vec![file("a"), file("b")],
        };
        let enc = old.encode();
        assert_eq!(&enc[..4], MAGIC, "a tree without stat data must stay CKT1");
        assert_eq!(Tree::decode(&enc).unwrap(), old);
        let mut b = file("b");
        b.ctime_ns = 1_700_000_000_123_456_789;
        b.ino = 0x1_2345_6789;
        let new = Tree {
            entries: vec![file("a"), b],
        };
        let enc2 = new.encode();
        assert_eq!(&enc2[..4], MAGIC2);
        assert_eq!(enc2.len(), enc.len() + 2 * 16);
        let back = Tree::decode(&enc2).unwrap();
        assert_eq!(back, new);
        assert_eq!(back.entries[1].ino, 0x1_2345_6789);
        assert_eq!(back.entries[1].ctime_ns, 1_700_000_000_123_456_789);
        for n in 0..enc2.len() {
            assert!(Tree::decode(&enc2[..n]).is_err());
        }
    }

    #[test]
    fn round_trip() {
        let t = Tree {
            entries: vec![file("a"), file("b c\n")],
        };
        assert_eq!(Tree::decode(&t.encode()).unwrap(), t);
    }

    #[test]
    fn rejects_bad_names_and_order() {
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            let t = Tree {
                entries: vec![file(bad)],
            };
            assert!(Tree::decode(&t.encode()).is_err(), "{bad:?} accepted");
        }
        let t = Tree {
            entries: vec![file("b"), file("a")],
        };
        assert!(Tree::decode(&t.encode()).is_err());
        let t = Tree {
            entries: vec![file("a"), file("a")],
        };
        assert!(Tree::decode(&t.encode()).is_err());
    }

    #[test]
    fn rejects_lengths_no_tree_means_and_names_the_tree() {
        let id = ObjectId::of(b"x");
        let chunks = |lens: &[u32]| EntryKind::File {
            chunks: lens.iter().map(|&len| Chunk { id, len }).collect(),
        };
        let with = |kind: EntryKind, size: u64, xattrs: Vec<(Vec<u8>, Vec<u8>)>| Tree {
            entries: vec![Entry {
                kind,
                size,
                xattrs,
                ..file("a")
            }],
        };
        let symlink = |n: usize| EntryKind::Symlink {
            target: vec![b'x'; n],
        };
        let dir = |subdirs| EntryKind::Dir { tree: id, subdirs };
        let over = MAX_CHUNK_LEN + 1;
        let refused = [
            (with(chunks(&[36, 0, 0]), 36, vec![]), "length 0"),
            (with(chunks(&[0]), 0, vec![]), "length 0"),
            (with(chunks(&[over]), u64::from(over), vec![]), "length"),
            (with(chunks(&[200]), 124, vec![]), "add up"),
            (
                with(symlink(MAX_SYMLINK_TARGET + 1), 5000, vec![]),
                "longer",
            ),
            (with(dir(3), 2, vec![]), "impossible"),
            (
                with(chunks(&[]), 0, vec![(vec![b'n'; 256], vec![])]),
                "xattr name",
            ),
            (
                with(
                    chunks(&[]),
                    0,
                    vec![(b"user.a".to_vec(), vec![0; MAX_XATTR_VALUE + 1])],
                ),
                "xattr value",
            ),
        ];
        let tree_id = ObjectId::of(b"some tree");
        for (tree, words) in refused {
            let err = Tree::decode_object(&tree_id, &tree.encode())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&tree_id.to_hex()) && err.contains(words),
                "{err}"
            );
        }
        // An empty file has no chunk; the largest chunk and symlink target are fine.
        for ok in [
            with(chunks(&[]), 0, vec![]),
            with(
                chunks(&[MAX_CHUNK_LEN, 1]),
                u64::from(MAX_CHUNK_LEN) + 1,
                vec![],
            ),
            with(
                symlink(MAX_SYMLINK_TARGET),
                MAX_SYMLINK_TARGET as u64,
                vec![],
            ),
        ] {
            assert_eq!(Tree::decode(&ok.encode()).unwrap(), ok);
        }
    }

    #[test]
    fn rejects_truncation_and_garbage() {
        let enc = Tree {
            entries: vec![file("a")],
        }
        .encode();
        for n in 0..enc.len() {
            assert!(Tree::decode(&enc[..n]).is_err());
        }
        let mut more = enc.clone();
        more.push(0);
        assert!(Tree::decode(&more).is_err());
    }
}
