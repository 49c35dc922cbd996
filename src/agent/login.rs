//! The agent's login, borrowed for one turn: the operator's file (`--auth-source`) is copied
//! into the agent's home under the agent's own name for it (Codex `auth.json`, Claude Code
//! `.credentials.json`), mode 0600 and owned by the user the agent runs as, and removed as
//! soon as the turn's processes are gone, before anything is recorded. The store's default
//! exclude rules keep both names out of every checkpoint besides (a runner killed mid-turn
//! leaves the file; the next `agent turn` removes it first). Its bytes are never logged.
//!
//! The home is a tree the agent writes: every operation here goes through `fs::safe` (the
//! home's directory fd, no symlink followed, a file already there at the login's name is
//! removed, not written through).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::safe::{self, Dir};

/// The most a login file may hold.
pub const MAX_LOGIN: u64 = 1 << 20;

/// A login copied into the home for a turn.
#[derive(Clone, Debug)]
pub struct Borrowed {
    /// The home (a root's path: the workspace mount of it).
    pub home: PathBuf,
    /// The login's name in it.
    pub name: String,
}

impl Borrowed {
    /// The login's path (for messages).
    pub fn path(&self) -> PathBuf {
        self.home.join(&self.name)
    }
}

/// Reads the operator's login file `source` (a path the operator names, followed; a regular
/// file of at most [`MAX_LOGIN`] bytes).
///
/// # Errors
/// `Usage` naming the file when it is missing, not a regular file or too large.
pub fn read_source(source: &Path) -> Result<Vec<u8>> {
    let (f, st) = safe::open_regular_path(source, true)
        .map_err(|e| Error::Usage(format!("--auth-source {}: {e}", source.display())))?
        .ok_or_else(|| Error::Usage(format!("--auth-source {}: no such file", source.display())))?;
    if st.len() > MAX_LOGIN {
        return Err(Error::Usage(format!(
            "--auth-source {}: more than {MAX_LOGIN} bytes",
            source.display()
        )));
    }
    let mut data = Vec::new();
    f.take(MAX_LOGIN + 1)
        .read_to_end(&mut data)
        .map_err(|e| Error::io(source, e))?;
    Ok(data)
}

/// Removes what is at the login's name in `home` (a leftover of a killed turn, or anything
/// the agent put there), without following it.
///
/// # Errors
/// Opening the home or removing the entry.
pub fn remove(home: &Path, name: &str) -> Result<bool> {
    let dir = Dir::open(home)?;
    let n = OsStr::new(name);
    match dir.stat(n)? {
        None => Ok(false),
        Some(st) if st.is_dir() => dir.remove_all(n).map(|()| true),
        Some(_) => dir.remove_file(n).map(|()| true),
    }
}

/// Copies `data` into `home` as `name`: what is there is removed first, the new file is
/// created exclusively (mode 0600), written, synced and given to `owner` (uid, gid).
///
/// # Errors
/// Opening the home, removing, creating, writing or chowning.
pub fn put(home: &Path, name: &str, data: &[u8], owner: Option<(u32, u32)>) -> Result<Borrowed> {
    remove(home, name)?;
    let dir = Dir::open(home)?;
    let n = OsStr::new(name);
    let mut f = dir.create_file(n, 0o600)?;
    let path = home.join(name);
    f.write_all(data).map_err(|e| Error::io(&path, e))?;
    if let Some((uid, gid)) = owner {
        safe::set_owner_fd(&f, &path, uid, gid)?;
    }
    f.sync_all().map_err(|e| Error::io(&path, e))?;
    Ok(Borrowed {
        home: home.to_path_buf(),
        name: name.to_string(),
    })
}

/// A login to lend for one turn: put in place when the agent starts, removed when it is done.
#[derive(Clone, Debug)]
pub struct Lender {
    home: PathBuf,
    name: String,
    data: Vec<u8>,
    lent: bool,
}

impl Lender {
    /// The login `data` (read from the operator's file), to go to `home/name`.
    pub fn new(home: &Path, name: &str, data: Vec<u8>) -> Lender {
        Lender {
            home: home.to_path_buf(),
            name: name.to_string(),
            data,
            lent: false,
        }
    }

    /// Puts the login in place for `owner` (uid, gid).
    ///
    /// # Errors
    /// As [`put`], in one line.
    pub fn lend(&mut self, owner: (u32, u32)) -> std::result::Result<(), String> {
        put(&self.home, &self.name, &self.data, Some(owner))
            .map_err(|e| format!("lending the login: {e}"))?;
        self.lent = true;
        Ok(())
    }

    /// Removes the login (whatever is at its name), once lent.
    ///
    /// # Errors
    /// As [`remove`], in one line.
    pub fn take_back(&mut self) -> std::result::Result<(), String> {
        if self.lent {
            remove(&self.home, &self.name).map_err(|e| format!("removing the lent login: {e}"))?;
            self.lent = false;
        }
        Ok(())
    }
}

impl Drop for Lender {
    fn drop(&mut self) {
        if let Err(e) = self.take_back() {
            log::warn!("{e}");
        }
    }
}
