//! Rolling a restore back (a failure here, or `recover` after a crash): every target back as it
//! was, touching only what the restore made or moved (the identities in its RUNNING marker).

use super::*;

/// The actions of rolling back the restore recorded in a RUNNING marker's phase (either
/// form: a [`RestoreMarker`], or one [`RestorePhase`] of an older ckptfs).
///
/// # Errors
/// I/O on the directories involved.
pub fn roll_back_marker(phase: &serde_json::Value) -> Result<Vec<String>> {
    let (targets, done) = match serde_json::from_value::<RestoreMarker>(phase.clone()) {
        Ok(m) => (m.targets, m.done),
        Err(_) => match serde_json::from_value::<RestorePhase>(phase.clone()) {
            Ok(p) => (vec![p], false),
            Err(_) => return Ok(Vec::new()),
        },
    };
    let mut actions = Vec::new();
    for p in targets.iter().rev() {
        actions.extend(roll_back(p, !done)?);
    }
    Ok(actions)
}

/// The parent of the target of `p`, held: beneath its root when it is in one.
pub(super) fn open_parent(p: &RestorePhase) -> Result<Dir> {
    match (&p.within, &p.parent_rel) {
        (Some(top), Some(rel)) => {
            let top = Dir::open(top)?;
            if rel.as_os_str().is_empty() {
                Ok(top)
            } else {
                top.open_dir(rel)
            }
        }
        _ => {
            let parent = p
                .dir
                .parent()
                .ok_or_else(|| Error::Invalid(format!("{} has no parent", p.dir.display())))?;
            Dir::open(parent)
        }
    }
}

/// Rolls one target back through its parent, held: with `undo_swap`, a staged tree already
/// renamed to DIR (by its recorded identity) goes back into the staging directory; the
/// staging directory is removed; the original goes back to DIR from aside when DIR is
/// missing. The parent may be an agent's, so nothing is followed, and only what the restore
/// made or moved is touched: the staging directory must be a real directory with the
/// recorded identity (or, recorded before it was created, empty), and the aside entry must
/// be the one moved there.
///
/// # Errors
/// I/O on the directories involved.
pub fn roll_back(p: &RestorePhase, undo_swap: bool) -> Result<Vec<String>> {
    let mut actions = Vec::new();
    let parent = match open_parent(p) {
        Ok(d) => d,
        Err(Error::NotFound(_)) => {
            actions.push(format!(
                "the parent of the restore target {} is gone; nothing to roll back",
                p.dir.display()
            ));
            return Ok(actions);
        }
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            actions.push(format!(
                "the parent of the restore target {} is gone; nothing to roll back",
                p.dir.display()
            ));
            return Ok(actions);
        }
        Err(e) => return Err(e),
    };
    let dir = p.dir.file_name();
    if let Some(staging) = p.staging.file_name() {
        if let Some(st) = parent.stat(staging)? {
            if is_staging(&parent, staging, &st, p.staging_id.as_ref())? {
                if let (true, true, Some(dir), Some(id)) =
                    (undo_swap, p.swapped, dir, p.staged_id.as_ref())
                {
                    if parent.stat(dir)?.is_some_and(|d| id.matches(&d)) {
                        let sd = parent.open_dir(staging)?;
                        if sd.stat_self()?.same_object(&st) {
                            parent.rename(dir, &sd, OsStr::new(STAGED_TREE), false)?;
                            actions.push(format!(
                                "took the restored {} back out (the restore did not finish)",
                                p.dir.display()
                            ));
                        }
                    }
                }
                parent.remove_all(staging)?;
                actions.push(format!(
                    "removed the restore staging directory {}",
                    p.staging.display()
                ));
            } else {
                actions.push(format!(
                    "left {} alone: it is {}, not the staging directory the restore made",
                    p.staging.display(),
                    if st.is_dir() {
                        "another directory"
                    } else {
                        st.kind().describe()
                    }
                ));
            }
        }
    }
    let aside = p.aside.as_deref();
    if let (Some(aside), Some(dir)) = (aside, dir) {
        let aside_parent = if p.aside_in_store {
            aside.parent().map(Dir::open).transpose()?
        } else {
            None
        };
        let from = aside_parent.as_ref().unwrap_or(&parent);
        if let (Some(name), None) = (aside.file_name(), parent.stat(dir)?) {
            if let Some(st) = from.stat(name)? {
                if p.aside_id.as_ref().is_none_or(|id| id.matches(&st)) {
                    from.rename(name, &parent, dir, false)?;
                    parent.sync()?;
                    actions.push(format!(
                        "put the original {} back (it had been moved to {})",
                        p.dir.display(),
                        aside.display()
                    ));
                } else {
                    actions.push(format!(
                        "left {} alone: it is not what the restore moved aside from {}",
                        aside.display(),
                        p.dir.display()
                    ));
                }
            }
        }
    } else if let (true, None, Some(dir)) = (p.removed_empty, aside, dir) {
        if parent.stat(dir)?.is_none() {
            parent.create_dir(dir, 0o755)?;
            actions.push(format!("recreated the empty {}", p.dir.display()));
        }
    }
    if actions.is_empty() {
        actions.push(format!(
            "restore to {} had completed or not started; nothing to roll back",
            p.dir.display()
        ));
    }
    Ok(actions)
}

/// Whether `name` (lstat `st`) in `parent` is the staging directory a restore made: a real
/// directory (never a symlink), owned by us, with the recorded identity; recorded before it
/// existed, it can only be empty.
pub(super) fn is_staging(
    parent: &Dir,
    name: &OsStr,
    st: &Stat,
    id: Option<&EntryId>,
) -> Result<bool> {
    if !st.is_dir() || st.uid != nix::unistd::geteuid().as_raw() {
        return Ok(false);
    }
    match id {
        Some(id) => Ok(id.matches(st)),
        None => {
            let d = parent.open_dir(name)?;
            Ok(d.stat_self()?.same_object(st) && d.entries()?.is_empty())
        }
    }
}
