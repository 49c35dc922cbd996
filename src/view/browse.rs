//! The browse namespace: `checkpoints/<id>/<root>`, and `labels/`, `branches/`, `by-time/`
//! and `latest` as symlinks into it (see the layout in the module doc of `view`). Everything
//! here but `checkpoints/<id>` and below can change, so those nodes are volatile.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{
    dir_attr, lock, not_found, root_dir_node, Attr, Content, Ino, Kind, Node, View, ROOT_INO,
};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::store::checkpoint::Checkpoint;
use crate::store::refs::check_name;
use crate::store::Store;
use crate::text::time::format_utc;

/// The synthetic directories of the browse namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrowseDir {
    Checkpoints,
    Labels,
    Branches,
    ByTime,
}

impl BrowseDir {
    pub(super) const ALL: [(&'static [u8], BrowseDir); 4] = [
        (b"branches", BrowseDir::Branches),
        (b"by-time", BrowseDir::ByTime),
        (b"checkpoints", BrowseDir::Checkpoints),
        (b"labels", BrowseDir::Labels),
    ];
}

fn hex_name(name: &[u8]) -> Option<ObjectId> {
    let s = std::str::from_utf8(name).ok()?;
    if s.len() != 64 || s.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    ObjectId::parse(s).ok()
}

fn store_owner(store: &Store) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(store.root())
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((0, 0))
}

/// The top directory of a browse view, owned like the store.
pub(super) fn root_node(store: &Store, created_ns: i64) -> Node {
    let (uid, gid) = store_owner(store);
    Node {
        parent: ROOT_INO,
        name: Arc::from(&b""[..]),
        key: ROOT_INO,
        root: ROOT_INO,
        attr: dir_attr(ROOT_INO, 0o555, uid, gid, created_ns, 4),
        content: Content::BrowseRoot,
        entry: None,
        volatile: true,
    }
}

impl View {
    /// A checkpoint record, read once per view.
    pub(super) fn checkpoint(&self, id: &ObjectId) -> Result<Arc<Checkpoint>> {
        if let Some(c) = lock(&self.checkpoints).get(id) {
            return Ok(c.clone());
        }
        let c = Arc::new(self.store.read_checkpoint(id)?);
        lock(&self.checkpoints).insert(*id, c.clone());
        Ok(c)
    }

    fn symlink_node(&self, parent: Ino, name: Arc<[u8]>, ino: Ino, target: String) -> Node {
        let (uid, gid) = store_owner(&self.store);
        let target: Arc<[u8]> = Arc::from(target.into_bytes().into_boxed_slice());
        Node {
            parent,
            name,
            key: ino,
            root: ino,
            attr: Attr {
                ino,
                st_ino: ino,
                kind: Kind::Symlink,
                perm: 0o777,
                uid,
                gid,
                mtime_ns: self.created_ns,
                ctime_ns: self.created_ns,
                size: target.len() as u64,
                nlink: 1,
            },
            content: Content::Symlink(target),
            entry: None,
            volatile: true,
        }
    }

    fn latest(&self) -> Result<Option<ObjectId>> {
        let mut best: Option<(i64, ObjectId)> = None;
        for id in self.store.list_checkpoints()? {
            let c = self.checkpoint(&id)?;
            if best.is_none_or(|(t, bid)| (c.time_ns, id) > (t, bid)) {
                best = Some((c.time_ns, id));
            }
        }
        Ok(best.map(|(_, id)| id))
    }

    pub(super) fn browse_root_child(&self, parent: Ino, name: Arc<[u8]>, ino: Ino) -> Result<Node> {
        if &*name == b"latest" {
            let id = self.latest()?.ok_or_else(|| not_found(&name))?;
            return Ok(self.symlink_node(parent, name, ino, format!("checkpoints/{id}")));
        }
        let which = BrowseDir::ALL
            .iter()
            .find(|(n, _)| *n == &*name)
            .map(|(_, w)| *w)
            .ok_or_else(|| not_found(&name))?;
        let subdirs = match which {
            BrowseDir::Checkpoints => self.store.list_checkpoints()?.len() as u64,
            _ => 0,
        };
        let (uid, gid) = store_owner(&self.store);
        Ok(Node {
            parent,
            name,
            key: ino,
            root: ino,
            attr: dir_attr(ino, 0o555, uid, gid, self.created_ns, subdirs),
            content: Content::BrowseDir(which),
            entry: None,
            volatile: true,
        })
    }

    /// `by-time` names: `YYYY-MM-DDTHH:MM:SS`, with `~2`, `~3`... for later checkpoints in
    /// the same second.
    pub fn by_time_names(&self) -> Result<BTreeMap<String, ObjectId>> {
        let mut all = Vec::new();
        for id in self.store.list_checkpoints()? {
            all.push((self.checkpoint(&id)?.time_ns, id));
        }
        all.sort();
        let mut out = BTreeMap::new();
        let mut prev = String::new();
        let mut n = 1;
        for (t, id) in all {
            let base = format_utc(t);
            if base == prev {
                n += 1;
                out.insert(format!("{base}~{n}"), id);
            } else {
                n = 1;
                out.insert(base.clone(), id);
                prev = base;
            }
        }
        Ok(out)
    }

    pub(super) fn browse_child(
        &self,
        which: BrowseDir,
        dir: &Node,
        name: Arc<[u8]>,
        ino: Ino,
    ) -> Result<Node> {
        let parent = dir.attr.ino;
        let as_str = std::str::from_utf8(&name).ok();
        match which {
            BrowseDir::Checkpoints => {
                let id = hex_name(&name).ok_or_else(|| not_found(&name))?;
                let c = match self.checkpoint(&id) {
                    Ok(c) => c,
                    Err(Error::NotFound(_)) => return Err(not_found(&name)),
                    Err(e) => return Err(e),
                };
                let (uid, gid) = store_owner(&self.store);
                Ok(Node {
                    parent,
                    name,
                    key: ino,
                    root: ino,
                    attr: dir_attr(ino, 0o555, uid, gid, c.time_ns, c.roots.len() as u64),
                    content: Content::Checkpoint(id),
                    entry: None,
                    volatile: false,
                })
            }
            BrowseDir::Labels => {
                let n = as_str
                    .filter(|n| check_name("label", n).is_ok())
                    .ok_or_else(|| not_found(&name))?;
                let id = self.store.read_label(n)?.ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
            BrowseDir::Branches => {
                let n = as_str
                    .filter(|n| check_name("branch", n).is_ok())
                    .ok_or_else(|| not_found(&name))?;
                let b = self.store.read_branch(n)?.ok_or_else(|| not_found(&name))?;
                let id = b.head.ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
            BrowseDir::ByTime => {
                let n = as_str.ok_or_else(|| not_found(&name))?;
                let names = self.by_time_names()?;
                let id = names.get(n).ok_or_else(|| not_found(&name))?;
                Ok(self.symlink_node(parent, name, ino, format!("../checkpoints/{id}")))
            }
        }
    }

    /// Root `name` of checkpoint `id` (`checkpoints/<id>/<name>`), whose inode is `ino`.
    pub(super) fn checkpoint_child(
        &self,
        id: &ObjectId,
        parent: Ino,
        name: Arc<[u8]>,
        ino: Ino,
    ) -> Result<Node> {
        let c = self.checkpoint(id)?;
        let root = std::str::from_utf8(&name).map_err(|_| not_found(&name))?;
        let rec = c.roots.get(root).ok_or_else(|| not_found(&name))?;
        self.check_bare_root(id, root, rec)?;
        Ok(root_dir_node(ino, parent, name.clone(), root, rec))
    }

    /// The names listed in a synthetic directory of the browse namespace.
    pub(super) fn synthetic_names(&self, dir: &Node) -> Result<Vec<Vec<u8>>> {
        Ok(match &dir.content {
            Content::BrowseRoot => {
                let mut v: Vec<Vec<u8>> = BrowseDir::ALL.iter().map(|(n, _)| n.to_vec()).collect();
                v.push(b"latest".to_vec());
                v
            }
            Content::BrowseDir(BrowseDir::Checkpoints) => self
                .store
                .list_checkpoints()?
                .iter()
                .map(|id| id.to_hex().into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::Labels) => self
                .store
                .list_labels()?
                .into_iter()
                .map(|(n, _)| n.into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::Branches) => self
                .store
                .list_branches()?
                .into_iter()
                .filter(|(_, b)| b.head.is_some())
                .map(|(n, _)| n.into_bytes())
                .collect(),
            Content::BrowseDir(BrowseDir::ByTime) => self
                .by_time_names()?
                .into_keys()
                .map(String::into_bytes)
                .collect(),
            Content::Checkpoint(id) => self
                .checkpoint(id)?
                .roots
                .keys()
                .map(|k| k.clone().into_bytes())
                .collect(),
            Content::Dir(_) | Content::File | Content::Symlink(_) => Vec::new(),
        })
    }
}
