//! The upper layer's files and symlinks: read (or reused by stat key) through the shared
//! reader, metacopy-only copies recorded from their lower source, and the stat cache carried.

use super::*;

/// An upper file: reused from the stat cache when unchanged, taken from the lower file when
/// only its metadata was copied up, else a job for the reading engine.
pub(super) fn upper_file(
    ctx: &mut Ctx<'_>,
    lower: Option<&Tree>,
    c: UpperChild<'_, '_>,
) -> Result<Looked> {
    if c.meta.nlink > 1 {
        ctx.links
            .upper
            .insert(c.rel_bytes.clone(), (c.meta.dev, c.meta.ino));
    }
    // Unchanged since the last checkpoint (stat key equal, so xattrs too): reused as it is,
    // whatever kind of copy it is, without another syscall.
    let unchanged = ctx
        .old
        .get(&c.rel_bytes)
        .is_some_and(|k| k.key == stat_key(&c.meta));
    let x = if unchanged {
        None
    } else {
        match split_xattrs(|want| c.dir.xattrs_of_where(c.os_name, want)) {
            Ok(x) => Some(x),
            Err(e) if is_replaced(&e) => return Ok(Looked::Replaced),
            Err(e) => return Err(e),
        }
    };
    if let Some(l) = c.lower {
        ctx.delta.add(totals_of(ctx.store, l)?, -1);
    }
    let (cached, previous, previous_snapshot) = split_cached(ctx.old.remove(&c.rel_bytes), &c.meta);
    // The lower file this one was copied up from, by name or by its redirect (a renamed
    // file); overlayfs shows the copy with that file's inode number.
    let source = match &x {
        Some(x) if x.origin || x.metacopy => copy_source(ctx, lower, c.lower, x)?,
        _ => None,
    };
    let origin = x.as_ref().is_some_and(|x| x.origin);
    if let Some(x) = x.filter(|x| x.metacopy) {
        return metacopy_file(ctx, c, x.user, source, origin).map(Looked::Node);
    }
    let job = FileJob {
        // Copied up since the last checkpoint: the lower file is the previous version.
        previous: match c.lower {
            Some(Entry {
                kind: EntryKind::File { chunks },
                ..
            }) if cached.is_none() && previous.is_empty() => chunks.clone(),
            _ => previous,
        },
        cached,
        previous_snapshot,
        owner: (c.meta.mode() & 0o7777, c.meta.uid(), c.meta.gid()),
        size: c.meta.len(),
        on_change: ctx.on_change,
        top: Arc::clone(&ctx.top),
        walked: c.meta,
        abs: c.abs,
        rel: c.rel_bytes,
    };
    ctx.jobs.push(job);
    // (None for a cached file: its stat cache entry keeps what it recorded.)
    ctx.sources.push(source.map(|s| (s, origin)));
    Ok(Looked::Node(MNode::File(ctx.jobs.len() - 1)))
}

/// A metadata-only copy-up (chmod, chown, utimes, rename): the upper file is a hole with the
/// new metadata; its bytes are still those of `source`, the lower file: content ids reused,
/// nothing read.
pub(super) fn metacopy_file(
    ctx: &mut Ctx<'_>,
    c: UpperChild<'_, '_>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    source: Option<Entry>,
    origin: bool,
) -> Result<MNode> {
    let Some(Entry {
        kind: EntryKind::File { chunks },
        size,
        ..
    }) = source.clone()
    else {
        return Err(Error::Corrupt(format!(
            "{}: a metadata-only copy whose data is not in the base checkpoint",
            c.abs.display()
        )));
    };
    ctx.delta.files += 1;
    ctx.delta.bytes += size as i64;
    let m = &c.meta;
    let mut entry = entry_of(
        &c.name,
        EntryKind::File {
            chunks: chunks.clone(),
        },
        size,
        m,
        xattrs,
    );
    if let Some(from) = &source {
        (entry.ino, entry.ctime_ns) = shown_stat(&entry, from, origin);
    }
    let cached = Cached {
        key: stat_key(m),
        chunks,
        xattrs: entry.xattrs.clone(),
        ino: entry.ino,
        ctime_ns: entry.ctime_ns,
        snapshot: None,
    };
    ctx.cached_ready.push((c.rel_bytes, cached));
    Ok(MNode::Ready(entry))
}

/// An upper symlink: complete as it is (its target and xattrs are read through its held
/// directory, and stored; it is never followed).
pub(super) fn upper_symlink(ctx: &mut Ctx<'_>, c: UpperChild<'_, '_>) -> Result<Looked> {
    let read = split_xattrs(|want| c.dir.xattrs_of_where(c.os_name, want))
        .and_then(|x| Ok((x.user, c.dir.read_link(c.os_name)?)));
    let (xattrs, target) = match read {
        Ok(v) => v,
        Err(e) if is_replaced(&e) => return Ok(Looked::Replaced),
        Err(e) => return Err(e),
    };
    if let Some(l) = c.lower {
        ctx.delta.add(totals_of(ctx.store, l)?, -1);
    }
    ctx.delta.symlinks += 1;
    remember_other(ctx, c.rel_bytes, &c.meta);
    Ok(Looked::Node(MNode::Ready(symlink_entry(
        &c.name, target, &c.meta, xattrs,
    ))))
}

/// The children of a merged directory, in name order: upper entries win (a whiteout, `None`,
/// hides the lower entry); lower entries the upper does not name are kept as they are.
pub(super) fn overlay_children(
    lower: Option<&Tree>,
    upper_nodes: Vec<(Vec<u8>, Option<MNode>)>,
) -> Vec<(Vec<u8>, MNode)> {
    let mut children = Vec::new();
    let mut lower_iter = lower.map_or(&[][..], |t| &t.entries[..]).iter().peekable();
    for (name, node) in upper_nodes {
        while let Some(l) = lower_iter.next_if(|l| l.name < name) {
            children.push((l.name.clone(), MNode::Keep(l.clone())));
        }
        lower_iter.next_if(|l| l.name == name);
        if let Some(node) = node {
            children.push((name, node));
        }
    }
    children.extend(lower_iter.map(|l| (l.name.clone(), MNode::Keep(l.clone()))));
    children
}

/// Caches the stat key of an upper symlink or whiteout.
pub(super) fn remember_other(ctx: &mut Ctx<'_>, rel: Vec<u8>, m: &Stat) {
    let key = other_key(m);
    if ctx.settled(&key) {
        ctx.new_upper.others.insert(rel, key);
    }
}

/// Whether the upper directory `rel` and everything under it still have the stat keys the
/// last checkpoint cached (each directory is checked once per merge). A directory's key
/// changes when an entry is added, removed or renamed in it and when its own metadata or
/// xattrs change; a file's when its content, metadata or xattrs change; so equal keys all the
/// way down mean the subtree merges to the same tree as before.
pub(super) fn is_clean(ctx: &mut Ctx<'_>, rel: &[u8], m: &Stat) -> Result<bool> {
    if let Some(&c) = ctx.clean.get(rel) {
        return Ok(c);
    }
    let c = check_clean(ctx, rel, m)?;
    ctx.clean.insert(rel.to_vec(), c);
    Ok(c)
}

pub(super) fn check_clean(ctx: &mut Ctx<'_>, rel: &[u8], m: &Stat) -> Result<bool> {
    // Same key, same names: no readdir.
    let names = match ctx.old_upper.dirs.get(rel) {
        Some(d) if d.key == stat_key(m) => d.names.clone(),
        _ => return Ok(false),
    };
    let rel_path = Path::new(OsStr::from_bytes(rel));
    for name in names {
        let name = OsStr::from_bytes(&name);
        let child_rel = rel_path.join(name);
        if ctx.exclude.excluded(&child_rel, name) {
            continue;
        }
        let crel = child_rel.as_os_str().as_bytes();
        // Cached nowhere (a special file, say): it cannot compare equal; no stat needed.
        let cached = ctx.old.contains_key(crel)
            || ctx.old_upper.dirs.contains_key(crel)
            || ctx.old_upper.others.contains_key(crel);
        if !cached {
            return Ok(false);
        }
        let Some(cm) = ctx.lstat_rel(crel)? else {
            return Ok(false);
        };
        let same = match cm.kind() {
            Kind::Dir => is_clean(ctx, crel, &cm)?,
            Kind::File => ctx.old.get(crel).is_some_and(|c| c.key == stat_key(&cm)),
            _ => ctx.old_upper.others.get(crel) == Some(&other_key(&cm)),
        };
        if !same {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copies the cache entries of everything under the directories taken whole into this
/// merge's caches (they were not walked, so nothing else records them).
pub(super) fn carry_reused(ctx: &mut Ctx<'_>, files: &mut StatCache) {
    if ctx.reused.is_empty() {
        return;
    }
    let reused = &ctx.reused;
    let under = |p: &[u8]| {
        p.iter()
            .enumerate()
            .any(|(i, &b)| b == b'/' && reused.contains(&p[..i]))
    };
    for (p, c) in ctx.old.drain() {
        if under(&p) {
            files.insert(p, c);
        }
    }
    for (p, d) in ctx.old_upper.dirs.drain() {
        if under(&p) {
            ctx.new_upper.dirs.insert(p, d);
        }
    }
    for (p, k) in ctx.old_upper.others.drain() {
        if under(&p) {
            ctx.new_upper.others.insert(p, k);
        }
    }
}
