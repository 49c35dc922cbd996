//! Forgotten checkpoints on a remote: `forgotten/<name>` holds the sealed tombstone of a
//! checkpoint `forget` took out of history (`<name>` is the same HMAC of its id as its
//! record's), so the remote's history steps over it as a store's does, and `gc --remote`
//! removes its record and what only it reached.
//!
//! A store's tombstones (`refs/forgotten/`) reach the remote with the next `push` or
//! `gc --remote` of that store ([`publish`]); a forget is history-wide, as restic's `forget`
//! acts on the repository. Tombstones are never removed (they are small, and they keep another
//! machine's push from bringing the record back). A checkpoint a remote ref names directly
//! is never treated as forgotten there: the ref wins (another machine's head).

use std::collections::{HashMap, HashSet};

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::remote::Remote;
use crate::store::refs::Tombstone;
use crate::store::Store;

/// What the sealed tombstone is, for its AEAD (its name binds it to its id, checked on read).
const AAD: &[u8] = b"forgotten";

/// The remote's tombstones, by the name of their checkpoint.
#[derive(Clone, Debug, Default)]
pub struct Forgotten {
    pub by_name: HashMap<String, Tombstone>,
}

impl Forgotten {
    /// The tombstone of `id`, if it is forgotten on the remote.
    pub fn get(&self, remote: &Remote, id: &ObjectId) -> Option<&Tombstone> {
        self.by_name.get(&remote.keys.name_of(id))
    }
}

pub fn key_of(remote: &Remote, id: &ObjectId) -> String {
    format!("forgotten/{}", remote.keys.name_of(id))
}

/// Every tombstone on the remote, each checked (tag, and its name against its id).
///
/// # Errors
/// Unreachable server; a tombstone that fails authentication or names another checkpoint.
pub fn list(remote: &Remote) -> Result<Forgotten> {
    let mut out = Forgotten::default();
    for (key, _) in remote.backend.list("forgotten/")? {
        let Some(name) = key.strip_prefix("forgotten/") else {
            continue;
        };
        let Some(d) = remote.backend.get(&key)? else {
            continue;
        };
        let what = format!("remote {} {key}", remote.name);
        let plain = remote.keys.open(AAD, &d, &what)?;
        let t: Tombstone =
            serde_json::from_slice(&plain).map_err(|e| Error::Corrupt(format!("{what}: {e}")))?;
        if remote.keys.name_of(&t.id) != name {
            return Err(Error::Corrupt(format!(
                "{what} names checkpoint {} (moved there?)",
                t.id
            )));
        }
        out.by_name.insert(name.to_string(), t);
    }
    Ok(out)
}

/// The store's tombstones the remote lacks and should get: the record is gone here (a record
/// wins over its tombstone), the remote holds the record (else there is nothing to forget
/// there), and no remote ref names it. Sorted by id.
///
/// # Errors
/// I/O reading the store's tombstones; server errors.
pub fn pending(
    store: &Store,
    remote: &Remote,
    on_remote: &Forgotten,
    remote_records: &HashSet<String>,
    ref_heads: &HashSet<ObjectId>,
) -> Result<Vec<Tombstone>> {
    let mut out = Vec::new();
    for id in store.list_tombstones()? {
        if on_remote.get(remote, &id).is_some()
            || !remote_records.contains(&remote.record_key(&id))
            || store.checkpoint_path(&id).exists()
        {
            continue;
        }
        if ref_heads.contains(&id) {
            log::warn!(
                "checkpoint {} is forgotten here but a ref of remote {} names it; kept there",
                id.short(),
                remote.name
            );
            continue;
        }
        if let Some(t) = store.read_tombstone(&id)? {
            out.push(t);
        }
    }
    Ok(out)
}

/// Uploads tombstones (under the remote lock, before anything relies on them).
///
/// # Errors
/// Server errors.
pub fn publish(remote: &Remote, tombs: &[Tombstone]) -> Result<()> {
    let mut items = Vec::new();
    for t in tombs {
        let json = serde_json::to_vec(t)
            .map_err(|e| Error::Invalid(format!("encoding tombstone {}: {e}", t.id)))?;
        items.push((key_of(remote, &t.id), remote.keys.seal(AAD, &json)?));
    }
    remote.backend.put_many(items)
}

/// The remote's tombstones plus `extra` (pending ones, counted as published).
pub fn with(mut f: Forgotten, remote: &Remote, extra: &[Tombstone]) -> Forgotten {
    for t in extra {
        f.by_name.insert(remote.keys.name_of(&t.id), t.clone());
    }
    f
}

/// The remote's ref heads (branches and labels).
///
/// # Errors
/// Server errors.
pub fn ref_heads(remote: &Remote) -> Result<HashSet<ObjectId>> {
    let mut heads: HashSet<ObjectId> = remote.list_refs("branches")?.into_values().collect();
    heads.extend(remote.list_refs("labels")?.into_values());
    Ok(heads)
}
