//! The upper layer's directories: each one walked through a held fd (replaced ones retried),
//! clean ones reused from the base tree, changed ones merged with the lower directory.

use super::*;

/// Merges the held upper directory `dir` (`rel` from the root) with its lower directory
/// `lower`: each upper entry is turned into a node (`merge_child`), then the lower entries the
/// upper does not name are kept as they are (`overlay_children`).
pub(super) fn merge_dir(
    ctx: &mut Ctx<'_>,
    lower: Option<&Tree>,
    dir: &Dir,
    rel: &Path,
    meta: Stat,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<MDir> {
    ctx.dirs_merged += 1;
    let names = dir.entries()?;
    let all_names: Vec<Vec<u8>> = names.iter().map(|n| n.as_bytes().to_vec()).collect();
    let mut upper_nodes: Vec<(Vec<u8>, Option<MNode>)> = Vec::with_capacity(names.len());
    for name in &names {
        let child_rel = rel.join(name);
        if ctx.exclude.excluded(&child_rel, name) {
            continue; // excluded (e.g. credentials): never checkpointed
        }
        let rel_bytes = child_rel.as_os_str().as_bytes();
        let nb = name.as_bytes();
        let mut looks = 1;
        let looked = loop {
            let Some(meta) = ctx.lstat_in(dir, name, rel_bytes)? else {
                break Looked::Gone;
            };
            let child = UpperChild {
                dir,
                os_name: name,
                lower: lower.and_then(|t| t.get(nb)),
                rel_bytes: rel_bytes.to_vec(),
                name: nb.to_vec(),
                abs: dir.display_path(name),
                rel: child_rel.clone(),
                meta,
            };
            match merge_child(ctx, lower, child)? {
                Looked::Replaced if looks < REPLACED_RETRIES => {
                    log::debug!(
                        "{} was replaced since its lstat; looking again",
                        dir.display_path(name).display()
                    );
                    looks += 1;
                }
                Looked::Replaced => {
                    return Err(Error::Invalid(format!(
                        "{} kept being replaced while being checkpointed ({REPLACED_RETRIES} attempts); retry",
                        dir.display_path(name).display()
                    )))
                }
                other => break other,
            }
        };
        match looked {
            Looked::Node(n) => upper_nodes.push((nb.to_vec(), Some(n))),
            Looked::Hidden => upper_nodes.push((nb.to_vec(), None)),
            Looked::Gone | Looked::Replaced => {}
        }
    }
    Ok(MDir {
        meta,
        xattrs,
        children: overlay_children(lower, upper_nodes),
        rel: rel.as_os_str().as_bytes().to_vec(),
        names: all_names,
        walk_delta: Totals::default(),
        lower_ino: 0,
    })
}

/// Whether an error on an entry says it is no longer what the walk saw: gone, a symlink or
/// not a directory now (`safe::is_swapped`), or not a symlink (`readlink`'s EINVAL).
pub(super) fn is_replaced(e: &Error) -> bool {
    is_swapped(e)
        || matches!(e, Error::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOENT) | Some(libc::EINVAL)))
}

/// Opens the subdirectory `name` of `dir` that the walk `lstat`ed as `walked`; `None` when it
/// is not that directory any more (replaced, removed, swapped for a symlink).
pub(super) fn open_walked_dir(dir: &Dir, name: &OsStr, walked: &Stat) -> Result<Option<Dir>> {
    let sub = match dir.open_dir(name) {
        Ok(d) => d,
        Err(e) if is_replaced(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(sub.stat_self()?.same_object(walked).then_some(sub))
}

/// What one upper entry merges to; updates the totals for what it replaces (not for an entry
/// found `Replaced`, which is looked at again).
pub(super) fn merge_child(
    ctx: &mut Ctx<'_>,
    lower: Option<&Tree>,
    c: UpperChild<'_, '_>,
) -> Result<Looked> {
    if c.lower.is_some_and(|l| l.nlink > 1) {
        // A name of a linked lower file hidden or replaced: its group lost a name.
        ctx.links.hidden_linked = true;
    }
    if is_whiteout(&c.meta) {
        if let Some(l) = c.lower {
            ctx.delta.add(totals_of(ctx.store, l)?, -1);
        }
        remember_other(ctx, c.rel_bytes, &c.meta);
        return Ok(Looked::Hidden);
    }
    match c.meta.kind() {
        Kind::Dir if is_clean(ctx, &c.rel_bytes, &c.meta)? => {
            Ok(Looked::Node(reuse_clean_dir(ctx, c)?))
        }
        Kind::Dir => merge_changed_dir(ctx, lower, c),
        Kind::File => upper_file(ctx, lower, c),
        Kind::Symlink => upper_symlink(ctx, c),
        kind if ctx.report_special => {
            ctx.special.push((c.rel, kind));
            Ok(Looked::Hidden)
        }
        _ => Err(special_file_error(&c.abs, &c.meta)),
    }
}

/// A directory nothing under which changed since the last checkpoint: its tree and totals are
/// the ones recorded then, without reading its xattrs or its lower tree.
pub(super) fn reuse_clean_dir(ctx: &mut Ctx<'_>, c: UpperChild<'_, '_>) -> Result<MNode> {
    let Some(d) = ctx.old_upper.dirs.remove(&c.rel_bytes) else {
        return Err(Error::Invalid(
            "internal: clean directory not cached".into(),
        ));
    };
    ctx.delta.add(Totals::from_array(d.delta), 1);
    let mut entry = dir_entry(
        &c.name,
        d.tree,
        d.subdirs,
        d.entries,
        &c.meta,
        d.xattrs.clone(),
    );
    // The number the workspace shows: the lower directory's it continues, as the merge that
    // cached it found (by its name, or its redirect; none when opaque), else its own. Its key
    // is unchanged, so are its opaque and redirect xattrs and the base it was merged over.
    if d.ino != 0 {
        entry.ino = d.ino;
    }
    ctx.new_upper.dirs.insert(c.rel_bytes.clone(), d);
    ctx.reused.insert(c.rel_bytes);
    Ok(MNode::Ready(entry))
}

/// A directory something changed under: merged again, over the lower directory it continues
/// (none when opaque, the one its redirect names when renamed). It is opened from its parent
/// first, and must be the directory the walk saw.
pub(super) fn merge_changed_dir(
    ctx: &mut Ctx<'_>,
    lower: Option<&Tree>,
    c: UpperChild<'_, '_>,
) -> Result<Looked> {
    check_depth(c.rel.components().count(), || {
        ctx.top.display_path(&c.rel).display().to_string()
    })?;
    let Some(sub) = open_walked_dir(c.dir, c.os_name, &c.meta)? else {
        return Ok(Looked::Replaced);
    };
    let before = ctx.delta;
    let Xattrs {
        opaque,
        redirect,
        user,
        ..
    } = split_xattrs(|want| sub.xattrs_self_where(want))?;
    let lower_ino = continued_dir_ino(ctx, lower, c.lower, opaque, redirect.as_deref())?;
    let source = dir_source(ctx, lower, c.lower, opaque, redirect.as_deref())?;
    // Same directory continued: only its new/removed children change totals.
    let continued = matches!(c.lower, Some(l) if l.is_dir() && !opaque && redirect.is_none());
    match c.lower {
        Some(_) if continued => {}
        Some(l) => ctx.delta.add(totals_of(ctx.store, l)?, -1),
        None => {}
    }
    if !continued {
        ctx.delta.dirs += 1;
    }
    log::trace!("{}: changed under it, merged again", c.rel.display());
    let mut merged = merge_dir(ctx, source.as_ref(), &sub, &c.rel, c.meta, user)?;
    merged.walk_delta = ctx.delta.since(before);
    merged.lower_ino = lower_ino;
    Ok(Looked::Node(MNode::Dir(Box::new(merged))))
}

/// The recorded inode number of the lower directory an upper one continues (as
/// [`dir_source`] finds it), 0 for none.
pub(super) fn continued_dir_ino(
    ctx: &Ctx<'_>,
    lower: Option<&Tree>,
    lower_same: Option<&Entry>,
    opaque: bool,
    redirect: Option<&[u8]>,
) -> Result<u64> {
    if opaque {
        return Ok(0);
    }
    let entry = match redirect {
        None => lower_same.cloned(),
        Some(r) if r.starts_with(b"/") => {
            let r = r.strip_suffix(b"/").unwrap_or(r);
            match r.iter().rposition(|&c| c == b'/') {
                Some(i) => lower_at(ctx, &r[..i])?.and_then(|t| t.get(&r[i + 1..]).cloned()),
                None => None,
            }
        }
        Some(r) => lower.and_then(|t| t.get(r)).cloned(),
    };
    Ok(entry.filter(Entry::is_dir).map_or(0, |e| e.ino))
}

/// The lower directory an upper directory merges over: none when it is opaque; the one its
/// redirect names (absolute from the root, or a sibling) when it was renamed, whose subtree
/// then counts here (its old place holds a whiteout); else the lower one of the same name.
pub(super) fn dir_source(
    ctx: &mut Ctx<'_>,
    lower: Option<&Tree>,
    lower_same: Option<&Entry>,
    opaque: bool,
    redirect: Option<&[u8]>,
) -> Result<Option<Tree>> {
    if opaque {
        return Ok(None);
    }
    let Some(r) = redirect else {
        return match lower_same {
            Some(Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            }) => Ok(Some(load_tree(ctx.store, tree)?)),
            _ => Ok(None),
        };
    };
    let t = if r.starts_with(b"/") {
        lower_at(ctx, r)?
    } else {
        match lower.and_then(|t| t.get(r)) {
            Some(Entry {
                kind: EntryKind::Dir { tree, .. },
                ..
            }) => Some(load_tree(ctx.store, tree)?),
            _ => None,
        }
    };
    if let Some(t) = &t {
        for c in &t.entries {
            ctx.delta.add(totals_of(ctx.store, c)?, 1);
        }
    }
    Ok(t)
}
