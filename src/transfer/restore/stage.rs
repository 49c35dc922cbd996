//! Staging (the apply half of a restore): every object checked before any target is touched,
//! then the tree materialized under held directory fds in a fresh staging directory, holes
//! kept; then swapped in, what was there moved aside.

use super::*;

/// Reads and hashes every tree and chunk below `tree` (chunks on all cores), the chunk bytes
/// read shown in `progress` (its total raised by them); returns the bytes a restore of `tree`
/// writes (each file as often as it occurs, a linked file once).
pub(super) fn check_objects_shown(
    store: &Store,
    tree: &ObjectId,
    progress: &Progress,
) -> Result<u64> {
    let mut chunks = HashSet::new();
    let mut stack = vec![*tree];
    // Each distinct tree is read once; its file bytes are summed bottom-up, memoized. A
    // linked file (`nlink > 1`) is written once whatever its names (`Links`, by inode
    // number): its bytes count once, apart.
    let mut trees: HashMap<ObjectId, (u64, Vec<ObjectId>)> = HashMap::new();
    let mut linked: HashMap<u64, u64> = HashMap::new();
    while let Some(t) = stack.pop() {
        if trees.contains_key(&t) {
            continue;
        }
        let tree = store.read_tree(&t)?;
        let mut own = 0u64;
        let mut subs = Vec::new();
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks: c } => {
                    chunks.extend(c.iter().copied());
                    if e.nlink > 1 {
                        linked.insert(e.ino, e.size);
                    } else {
                        own += e.size;
                    }
                }
                EntryKind::Dir { tree, .. } => {
                    stack.push(*tree);
                    subs.push(*tree);
                }
                EntryKind::Symlink { .. } => {}
            }
        }
        trees.insert(t, (own, subs));
    }
    let total = tree_bytes(tree, &trees, &mut HashMap::new()) + linked.values().sum::<u64>();
    let list: Vec<Chunk> = chunks.into_iter().collect();
    progress.add_total(list.iter().map(|c| u64::from(c.len)).sum());
    let err: Mutex<Option<Error>> = Mutex::new(None);
    store.read_chunks_parallel(&list, |chunk, read| match read {
        Ok(_) => {
            progress.add_bytes(u64::from(chunk.len));
            progress.add_items(1);
            true
        }
        Err(e) => {
            err.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
            false
        }
    });
    match err.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(total),
    }
}

/// The bytes of the files below `t`, shared subtrees counted each time they occur.
pub(super) fn tree_bytes(
    t: &ObjectId,
    trees: &HashMap<ObjectId, (u64, Vec<ObjectId>)>,
    memo: &mut HashMap<ObjectId, u64>,
) -> u64 {
    if let Some(&b) = memo.get(t) {
        return b;
    }
    let Some((own, subs)) = trees.get(t) else {
        return 0;
    };
    let b = subs.iter().fold(*own, |acc, s| {
        acc.saturating_add(tree_bytes(s, trees, memo))
    });
    memo.insert(*t, b);
    b
}

/// The first name restored of each linked file (by its recorded inode number): the held
/// directory it is in, and its name there. Later names become hard links to it.
#[derive(Default)]
pub struct Links(HashMap<u64, (Dir, OsString)>);

impl Links {
    /// The first name of linked file `ino` was renamed in its directory from `from` to `to`
    /// (a name made under a temporary name, then moved into place).
    pub fn renamed(&mut self, ino: u64, from: &OsStr, to: &OsStr) {
        if let Some((_, n)) = self.0.get_mut(&ino) {
            if n == from {
                *n = to.to_os_string();
            }
        }
    }
}

/// Materializes `tree` into the held directory `at`, which this restore created: each entry
/// created exclusively in it, its metadata given through its fd (a symlink: by its name in
/// `at`, not followed). Counts (files, bytes) into `counts`. Through `filter`: `rel` is
/// `at`'s path from the restored directory, `whole` that an include rule matched a directory
/// above (everything in it is restored). A directory none of whose entries is restored, and
/// which no include rule matched, is removed again. Returns whether anything was restored in
/// `at`. Linked files are written once, their other names linked (`links`).
#[allow(clippy::too_many_arguments)]
pub(super) fn materialize(
    store: &Store,
    tree: &ObjectId,
    at: &Dir,
    counts: &mut (u64, u64),
    filter: Option<&Filter>,
    rel: &Path,
    whole: bool,
    progress: &Progress,
    links: &mut Links,
) -> Result<bool> {
    let tree = store.read_tree(tree)?;
    let mut any = false;
    for e in &tree.entries {
        let name = OsStr::from_bytes(&e.name);
        let path = rel.join(name);
        let included = match filter {
            Some(f) if f.excluded(&path, name) => continue,
            Some(f) => whole || f.included(&path, name),
            None => true,
        };
        match &e.kind {
            EntryKind::Dir { tree, .. } => {
                // Bounded: a stored tree can nest deeper than any stack, and the staged copy
                // is removed again by a walk of its own.
                crate::store::tree::check_depth(path.components().count(), || {
                    path.display().to_string()
                })?;
                let sub = at.create_private_dir(name)?;
                let kept = materialize(
                    store, tree, &sub, counts, filter, &path, included, progress, links,
                )?;
                if included || kept {
                    apply_meta_fd(&sub, sub.path(), &Meta::of_entry(e))?;
                    any = true;
                } else {
                    drop(sub);
                    at.remove_dir(name)?;
                }
            }
            _ if !included => {}
            _ => {
                materialize_entry(store, e, at, name, counts, progress, links)?;
                any = true;
            }
        }
    }
    Ok(any)
}

/// Creates the file or symlink `e` as `name` in the held directory `at` (which this restore
/// created, or one others can write: `name` is created exclusively, a directory is checked
/// to be the one made), with its metadata; a later name of a linked file is a hard link to
/// the first.
pub fn materialize_entry(
    store: &Store,
    e: &Entry,
    at: &Dir,
    name: &OsStr,
    counts: &mut (u64, u64),
    progress: &Progress,
    links: &mut Links,
) -> Result<()> {
    match &e.kind {
        EntryKind::Dir { tree, .. } => {
            let sub = at.create_private_dir(name)?;
            materialize(
                store,
                tree,
                &sub,
                counts,
                None,
                Path::new(""),
                false,
                progress,
                links,
            )?;
            apply_meta_fd(&sub, sub.path(), &Meta::of_entry(e))
        }
        EntryKind::File { .. } if e.nlink > 1 => {
            if let Some((dir, first)) = links.0.get(&e.ino) {
                at.hard_link(dir, first, name)?;
            } else {
                write_file(store, e, at, name)?;
                counts.1 += e.size;
                progress.add_bytes(e.size);
                links
                    .0
                    .insert(e.ino, (at.try_clone()?, name.to_os_string()));
            }
            counts.0 += 1;
            progress.add_items(1);
            Ok(())
        }
        EntryKind::File { .. } => {
            write_file(store, e, at, name)?;
            counts.0 += 1;
            counts.1 += e.size;
            progress.add_items(1);
            progress.add_bytes(e.size);
            Ok(())
        }
        EntryKind::Symlink { target } => {
            at.create_symlink(target, name)?;
            apply_meta_at(at, name, true, &Meta::of_entry(e))
        }
    }
}

pub(super) fn write_file(store: &Store, e: &Entry, at: &Dir, name: &OsStr) -> Result<()> {
    let EntryKind::File { chunks } = &e.kind else {
        return Ok(());
    };
    let p = at.display_path(name);
    let mut f: File = at.create_file(name, 0o600)?;
    let mut hole = false;
    // The chunk found all zeros (a sparse file's holes repeat one): skipped unread after.
    let mut zero_chunk = None;
    for c in chunks {
        if zero_chunk == Some(c.id) {
            f.seek(SeekFrom::Current(i64::from(c.len)))
                .map_err(|err| Error::io(&p, err))?;
            hole = true;
            continue;
        }
        let data = store.read_chunk(c)?;
        if data.len() >= HOLE_BLOCK && data.iter().all(|&b| b == 0) {
            zero_chunk = Some(c.id);
        }
        for block in data.chunks(HOLE_BLOCK) {
            if block.len() == HOLE_BLOCK && block.iter().all(|&b| b == 0) {
                f.seek(SeekFrom::Current(HOLE_BLOCK as i64))
                    .map_err(|err| Error::io(&p, err))?;
                hole = true;
            } else {
                f.write_all(block).map_err(|err| Error::io(&p, err))?;
                hole = false;
            }
        }
    }
    if hole {
        f.set_len(e.size).map_err(|err| Error::io(&p, err))?;
    }
    // After the data: a write would clear the setuid bits and capabilities set here.
    apply_meta_fd(&f, &p, &Meta::of_entry(e))
}

/// Stages job `i`: a private staging directory beside its target, and in it the tree or
/// entry as `tree`.
pub(super) fn stage(
    store: &Store,
    jobs: &mut [Job<'_>],
    i: usize,
    filter: Option<&Filter>,
    record: &mut impl FnMut(&[Job<'_>], bool) -> Result<()>,
    progress: &Progress,
) -> Result<()> {
    let mut attempt = 0u32;
    let (name, staging) = loop {
        let name = OsString::from(staging_name(attempt));
        jobs[i].phase.staging = jobs[i].target.in_parent(&name);
        jobs[i].phase.staging_id = None;
        record(jobs, false)?;
        match jobs[i].target.parent.create_private_dir(&name) {
            Ok(dir) => break (name, dir),
            // Taken (by a leftover, or by someone guessing): another name.
            Err(Error::Io { source, .. })
                if source.raw_os_error() == Some(libc::EEXIST) && attempt < 8 =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    let id = staging.stat_self().map(|st| EntryId::of(&st));
    jobs[i].staging = Some((name, staging));
    jobs[i].phase.staging_id = Some(id?);
    record(jobs, false)?;
    let job = &mut jobs[i];
    let Some((_, staging)) = &job.staging else {
        return Ok(());
    };
    let tree_name = OsStr::new(STAGED_TREE);
    match &job.source {
        Source::Tree { tree, meta } => {
            let top = staging.create_private_dir(tree_name)?;
            materialize(
                store,
                tree,
                &top,
                &mut job.counts,
                filter,
                Path::new(""),
                false,
                progress,
                &mut Links::default(),
            )?;
            apply_meta_fd(&top, top.path(), meta)?;
        }
        Source::Entry(e) => {
            materialize_entry(
                store,
                e,
                staging,
                tree_name,
                &mut job.counts,
                progress,
                &mut Links::default(),
            )?;
        }
    }
    job.phase.staged_id = staging.stat(tree_name)?.map(|st| EntryId::of(&st));
    atomic::fault_point("syncfs").map_err(|e| Error::io(staging.path(), e))?;
    staging.sync_filesystem()?;
    record(jobs, false)
}

/// Swaps job `i` in: what is at its target moved aside (an empty directory, for a directory
/// restore, removed), then the staged tree renamed to the target.
pub(super) fn swap(
    store: &Store,
    jobs: &mut [Job<'_>],
    i: usize,
    record: &mut impl FnMut(&[Job<'_>], bool) -> Result<()>,
) -> Result<()> {
    let real = jobs[i].phase.dir.clone();
    let is_dir = matches!(jobs[i].kind(), "directory");
    let t = &jobs[i].target;
    if let Some(st) = t.parent.stat(&t.name)? {
        if is_dir && st.is_dir() && is_empty_dir(&t.parent, &t.name, &st)? {
            jobs[i].phase.removed_empty = true;
            record(jobs, false)?;
            let t = &jobs[i].target;
            t.parent.remove_dir(&t.name)?;
        } else {
            move_aside(store, jobs, i, &st, record)?;
        }
    }
    jobs[i].phase.swapped = true;
    record(jobs, false)?;
    atomic::fault_point("rename").map_err(|e| Error::io(&real, e))?;
    let job = &jobs[i];
    let Some((_, staging)) = &job.staging else {
        return Err(Error::Invalid(format!(
            "{}: nothing staged",
            real.display()
        )));
    };
    staging.rename(
        OsStr::new(STAGED_TREE),
        &job.target.parent,
        &job.target.name,
        false,
    )
}

/// Moves what is at job `i`'s target (stat `st`) aside: into the store's `displaced/` for an
/// in-place restore (beside the target when that is another filesystem), else beside it.
pub(super) fn move_aside(
    store: &Store,
    jobs: &mut [Job<'_>],
    i: usize,
    st: &Stat,
    record: &mut impl FnMut(&[Job<'_>], bool) -> Result<()>,
) -> Result<()> {
    let real = jobs[i].phase.dir.clone();
    jobs[i].phase.aside_id = Some(EntryId::of(st));
    if jobs[i].displaced.is_some() {
        let p =
            store.displaced_restore_path(&jobs[i].root, &jobs[i].path, crate::text::time::now_ns());
        let name = p.file_name().unwrap_or_default().to_os_string();
        jobs[i].phase.aside = Some(p);
        jobs[i].phase.aside_in_store = true;
        record(jobs, false)?;
        atomic::fault_point("rename").map_err(|e| Error::io(&real, e))?;
        let job = &jobs[i];
        let Some(dir) = &job.displaced else {
            return Ok(());
        };
        match job
            .target
            .parent
            .rename(&job.target.name, dir, &name, false)
        {
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EXDEV) => {
                log::warn!(
                    "{} is on another filesystem than the store: moved aside beside it",
                    real.display()
                );
            }
            other => return other,
        }
    }
    let aside = aside_name(&jobs[i].target.name);
    jobs[i].phase.aside = Some(jobs[i].target.in_parent(&aside));
    jobs[i].phase.aside_in_store = false;
    record(jobs, false)?;
    atomic::fault_point("rename").map_err(|e| Error::io(&real, e))?;
    let t = &jobs[i].target;
    t.parent.rename(&t.name, &t.parent, &aside, false)
}

/// `.ckptfs-restore-<pid>-<8 hex>`: fixed length, whatever DIR's name.
pub(super) fn staging_name(attempt: u32) -> String {
    let seed = format!(
        "{}-{}-{attempt}",
        std::process::id(),
        crate::text::time::now_ns()
    );
    let hex = ObjectId::of(seed.as_bytes()).to_hex();
    format!("{STAGING_PREFIX}{}-{}", std::process::id(), &hex[..8])
}

/// `DIR.ckptfs-aside-<time>-<pid>`, DIR's name cut so that the whole fits in `NAME_MAX`.
pub(super) fn aside_name(base: &OsStr) -> OsString {
    let suffix = format!(
        ".ckptfs-aside-{}-{}",
        crate::text::time::format_utc(crate::text::time::now_ns()).replace(':', ""),
        std::process::id()
    );
    let keep = NAME_MAX.saturating_sub(suffix.len());
    let mut name = base.as_bytes()[..base.len().min(keep)].to_vec();
    name.extend_from_slice(suffix.as_bytes());
    OsString::from_vec(name)
}

/// Whether `name` (stat `st`) in `dir` is an empty directory, looked at through its fd.
pub(super) fn is_empty_dir(dir: &Dir, name: &OsStr, st: &Stat) -> Result<bool> {
    let d = dir.open_dir(name)?;
    Ok(d.stat_self()?.same_object(st) && d.entries()?.is_empty())
}

/// Removes the staged tree (through the held staging directory), then the staging directory.
pub(super) fn discard_staging(target: &Target, name: &OsStr, staging: &Dir) {
    if let Err(e) = staging.remove_all(OsStr::new(STAGED_TREE)) {
        log::warn!(
            "could not remove the staged tree in {}: {e}",
            staging.path().display()
        );
    }
    remove_staging(target, name, staging);
}

/// Removes the (empty) staging directory, if its name still holds it: one renamed away or
/// replaced by someone else is left alone (it is empty, and nobody else can write in it).
pub(super) fn remove_staging(target: &Target, name: &OsStr, staging: &Dir) {
    let ours = match (target.parent.stat(name), staging.stat_self()) {
        (Ok(Some(entry)), Ok(held)) => entry.same_object(&held),
        _ => false,
    };
    let removed = if ours {
        target.parent.remove_dir(name)
    } else {
        Err(Error::Invalid(format!(
            "{} is no longer the staging directory (moved by someone else)",
            target.in_parent(name).display()
        )))
    };
    if let Err(e) = removed {
        log::warn!("left the empty staging directory of this restore: {e}");
    }
}
