//! Who COMMAND runs as under `turn` and `exec` (docs/runner.md, "Who the agent runs as").
//!
//! The agent is not root by default. When ckptfs runs as root, COMMAND runs as:
//!
//! - `--user USER` (a name or a uid from the user database): that user, its primary group and
//!   its supplementary groups (as `sudo -u USER` and `setpriv --init-groups` set them);
//! - `--as-root`: root, unchanged;
//! - neither: the owner of the workspace's first root (the mountpoint of the root first in
//!   name order, which is the only one in a one-root workspace); when that owner is root,
//!   the command is refused, asking for `--user` or `--as-root`.
//!
//! When ckptfs is not root, COMMAND runs as the invoking user (nothing switches); `--user`
//! may only name that user. On a switch HOME, USER and LOGNAME are set to the target user's
//! (as sudo does); the rest of the environment is kept. The switch happens after COMMAND's
//! process has joined the workspace's cgroup (writing `cgroup.procs` needs root) and before
//! it execs (`sys::spawn_in_cgroup`, [`drop_to`]).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;

use nix::unistd::{Gid, Uid, User};

use crate::error::{Error, Result};
use crate::fs::sys::Credentials;
use crate::store::Store;

/// What the command line asked for.
#[derive(Clone, Debug, Default)]
pub struct RunAsOptions {
    /// `--user USER`: a name or a numeric uid.
    pub user: Option<String>,
    /// `--as-root`.
    pub as_root: bool,
}

/// Who COMMAND runs as, resolved.
#[derive(Clone, Debug)]
pub struct RunAs {
    /// The uid COMMAND runs as (reported by `turn --json`).
    pub uid: u32,
    /// Set when the process must switch: the credentials and the environment to set.
    pub switch: Option<Switch>,
}

/// A switch of user before exec.
#[derive(Clone, Debug)]
pub struct Switch {
    pub credentials: Credentials,
    /// HOME, USER and LOGNAME of the target user.
    pub env: Vec<(&'static str, OsString)>,
}

impl RunAs {
    /// Sets the target user's HOME, USER and LOGNAME on `cmd` (nothing without a switch).
    pub fn set_env(&self, cmd: &mut std::process::Command) {
        if let Some(s) = &self.switch {
            for (k, v) in &s.env {
                cmd.env(k, v);
            }
        }
    }
}

/// The user `--user` names: a name, else a numeric uid.
fn lookup(spec: &str) -> Result<User> {
    let bad =
        |e: nix::Error| Error::Usage(format!("--user {spec}: reading the user database: {e}"));
    if let Some(u) = User::from_name(spec).map_err(bad)? {
        return Ok(u);
    }
    if let Ok(n) = spec.parse::<u32>() {
        if let Some(u) = User::from_uid(Uid::from_raw(n)).map_err(bad)? {
            return Ok(u);
        }
    }
    Err(Error::Usage(format!(
        "--user {spec}: no such user (a name or uid of the user database)"
    )))
}

/// The owner of the workspace's first root mountpoint.
fn workspace_owner(store: &Store, branch: &str) -> Result<(u32, u32, std::path::PathBuf)> {
    let st = crate::workspace::state(store, branch)?
        .ok_or_else(|| Error::NotFound(format!("mounted workspace of branch {branch}")))?;
    let (_, root) = st
        .roots
        .iter()
        .next()
        .ok_or_else(|| Error::Invalid(format!("workspace of branch {branch} has no root")))?;
    let md =
        std::fs::symlink_metadata(&root.mountpoint).map_err(|e| Error::io(&root.mountpoint, e))?;
    Ok((md.uid(), md.gid(), root.mountpoint.clone()))
}

/// A switch to `uid` and `gid` alone, the environment kept: an id of an ordinary account's
/// user namespace, which the user database does not describe (docs/rootless.md).
fn id_only(uid: u32, gid: u32) -> RunAs {
    RunAs {
        uid,
        switch: Some(Switch {
            credentials: Credentials {
                uid,
                gid,
                groups: vec![gid],
            },
            env: Vec::new(),
        }),
    }
}

/// The credentials and environment of a switch to `u`, with its supplementary groups.
fn switch_to(u: &User) -> Result<Switch> {
    let name = std::ffi::CString::new(u.name.as_bytes())
        .map_err(|_| Error::Invalid(format!("user {}: name holds a NUL byte", u.name)))?;
    let mut groups = nix::unistd::getgrouplist(&name, u.gid)
        .map_err(|e| Error::io_op(format!("supplementary groups of user {}", u.name), e.into()))?;
    // In a user namespace only the groups it maps can be set (the database is the machine's).
    groups.retain(|g| crate::fs::userns::is_gid_mapped(g.as_raw()));
    Ok(Switch {
        credentials: Credentials {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups: groups.iter().map(|g| g.as_raw()).collect(),
        },
        env: vec![
            ("HOME", u.dir.clone().into_os_string()),
            ("USER", OsString::from(&u.name)),
            ("LOGNAME", OsString::from(&u.name)),
        ],
    })
}

/// Resolves who COMMAND of `branch`'s workspace runs as (see the module doc).
///
/// # Errors
/// `Usage` for an unknown user, for `--user` with `--as-root`, for a switch asked of a
/// process that is not root, and (one line) for a root-owned workspace without either flag;
/// reading the workspace's state or its root.
pub fn resolve(store: &Store, branch: &str, o: &RunAsOptions) -> Result<RunAs> {
    if o.user.is_some() && o.as_root {
        return Err(Error::Usage("give --user or --as-root, not both".into()));
    }
    let me = Uid::current();
    if !me.is_root() {
        if o.as_root {
            return Err(Error::Usage(
                "--as-root: ckptfs is not running as root; COMMAND runs as you".into(),
            ));
        }
        if let Some(spec) = &o.user {
            if lookup(spec)?.uid != me {
                return Err(Error::Usage(format!(
                    "--user {spec}: only root can run COMMAND as another user; without root \
                     it runs as you"
                )));
            }
        }
        return Ok(RunAs {
            uid: me.as_raw(),
            switch: None,
        });
    }
    if o.as_root {
        return Ok(RunAs {
            uid: 0,
            switch: None,
        });
    }
    let user = match &o.user {
        // In a user namespace the database names the machine's ids, not the namespace's.
        // A name stands for its uid's number, which is a subordinate id there, as a
        // recorded owner's is (docs/rootless.md, "Identities").
        Some(spec) if crate::fs::userns::in_child_userns() => {
            let (uid, gid) = match spec.parse::<u32>() {
                Ok(n) => (n, n),
                Err(_) => {
                    let u = lookup(spec)?;
                    (u.uid.as_raw(), u.gid.as_raw())
                }
            };
            if uid == 0 || !crate::fs::userns::is_mapped(uid) {
                return Err(Error::Usage(format!(
                    "--user {spec}: not a subordinate uid mapped in the workspace's user \
                     namespace (1 to N, N the size of this account's /etc/subuid range)"
                )));
            }
            return Ok(id_only(uid, gid));
        }
        Some(spec) => {
            let u = lookup(spec)?;
            if u.uid.is_root() {
                return Err(Error::Usage(format!(
                    "--user {spec} is root: say --as-root to run COMMAND as root"
                )));
            }
            u
        }
        None => {
            let (owner, group, root) = workspace_owner(store, branch)?;
            if crate::fs::userns::in_child_userns()
                && (owner == crate::fs::userns::overflow_uid()
                    || !crate::fs::userns::is_mapped(owner))
            {
                return Err(Error::Invalid(format!(
                    "{} is owned by an id the workspace's user namespace does not map: give \
                     this account subordinate ids (as root: `usermod --add-subuids \
                     100000-165535 --add-subgids 100000-165535 USER`, then remount), or pass \
                     --as-root to run COMMAND as yourself (docs/rootless.md)",
                    root.display()
                )));
            }
            if owner == 0 {
                return Err(Error::Usage(format!(
                    "{} is owned by root: pass --user USER to run COMMAND as USER, or --as-root",
                    root.display()
                )));
            }
            if crate::fs::userns::in_child_userns() {
                return Ok(id_only(owner, group));
            }
            User::from_uid(Uid::from_raw(owner))
                .map_err(|e| Error::io_op("reading the user database", e.into()))?
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "{} is owned by uid {owner}, which the user database does not know: \
                         pass --user USER or --as-root",
                        root.display()
                    ))
                })?
        }
    };
    Ok(RunAs {
        uid: user.uid.as_raw(),
        switch: Some(switch_to(&user)?),
    })
}

/// Becomes the switch's user in this process (`exec`, after joining the cgroup): groups,
/// then gid, then uid, so nothing of root is left.
///
/// # Errors
/// The failing call.
pub fn drop_to(c: &Credentials) -> Result<()> {
    let groups: Vec<Gid> = c.groups.iter().map(|g| Gid::from_raw(*g)).collect();
    nix::unistd::setgroups(&groups).map_err(|e| Error::io_op("setgroups", e.into()))?;
    nix::unistd::setgid(Gid::from_raw(c.gid)).map_err(|e| Error::io_op("setgid", e.into()))?;
    nix::unistd::setuid(Uid::from_raw(c.uid)).map_err(|e| Error::io_op("setuid", e.into()))?;
    Ok(())
}
