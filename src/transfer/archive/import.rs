//! Importing an archive: its parts and digests checked, a first pass that scans every entry
//! and checks the archive is complete, then objects, records, roots and refs written into
//! the target store (nothing written when any check fails).

use super::*;

/// The files of an archive: FILE itself, or FILE.part000, FILE.part001... in order.
pub(super) fn archive_files(given: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    let s = given.to_string_lossy();
    let base_str = if let Some(b) = s.strip_suffix(".sha256") {
        b.to_string()
    } else if let Some((b, n)) = s.rsplit_once(".part") {
        if n.len() == 3 && n.bytes().all(|c| c.is_ascii_digit()) {
            b.to_string()
        } else {
            s.to_string()
        }
    } else {
        s.to_string()
    };
    let base = crate::store::absolute(Path::new(&base_str))?;
    if base.is_file() {
        return Ok((base.clone(), vec![base]));
    }
    let mut parts = Vec::new();
    while part_path(&base, parts.len()).is_file() {
        parts.push(part_path(&base, parts.len()));
    }
    if parts.is_empty() {
        // Something is there, but not a file (a device, a FIFO, a directory): say what.
        if let Ok(m) = std::fs::metadata(&base) {
            return Err(Error::Usage(format!(
                "archive {}: not a regular file ({})",
                base.display(),
                crate::fs::safe::Kind::of_mode(std::os::unix::fs::MetadataExt::mode(&m)).describe()
            )));
        }
        return Err(Error::NotFound(format!(
            "archive {} (nor {})",
            base.display(),
            part_path(&base, 0).display()
        )));
    }
    Ok((base, parts))
}

pub(super) struct Chain {
    files: Vec<PathBuf>,
    next: usize,
    cur: Option<File>,
}

impl Read for Chain {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.cur.is_none() {
                let Some(p) = self.files.get(self.next) else {
                    return Ok(0);
                };
                self.cur = Some(open_part(p)?);
                self.next += 1;
            }
            let n = self.cur.as_mut().map_or(Ok(0), |f| f.read(buf))?;
            if n > 0 {
                return Ok(n);
            }
            self.cur = None;
        }
    }
}

pub(super) fn chain(files: &[PathBuf]) -> Chain {
    Chain {
        files: files.to_vec(),
        next: 0,
        cur: None,
    }
}

pub(super) fn sha256_file(p: &Path) -> Result<String> {
    let mut f = open_part(p).map_err(|e| Error::io(p, e))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| Error::io(p, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

/// Largest sidecar read (one line per part).
pub(super) const MAX_SIDECAR_BYTES: u64 = 1 << 20;

/// Opens one file of an archive: non-blocking (a FIFO in its place does not hang), and it
/// must be a regular file.
pub(super) fn open_part(p: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            p.display()
        )));
    }
    Ok(f)
}

/// Checks the digests of an archive's files; returns the whole digest.
pub(super) fn check_digests(
    base: &Path,
    files: &[PathBuf],
    expected: Option<&str>,
) -> Result<String> {
    let sidecar = sidecar_path(base);
    let mut want: HashMap<String, String> = HashMap::new();
    let text =
        crate::store::object::read_regular_file(&sidecar, MAX_SIDECAR_BYTES, true, "sidecar")
            .and_then(|t| {
                t.map(|t| {
                    String::from_utf8(t).map_err(|_| {
                        Error::Invalid(format!("{} is not UTF-8 text", sidecar.display()))
                    })
                })
                .transpose()
            });
    match text {
        Ok(Some(text)) => {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let (h, name) = line.split_once("  ").ok_or_else(|| {
                    Error::Invalid(format!("{}: bad line {line:?}", sidecar.display()))
                })?;
                want.insert(name.to_string(), h.to_ascii_lowercase());
            }
        }
        Ok(None) if expected.is_some() => {}
        Ok(None) => {
            return Err(Error::NotFound(format!(
                "{} (the archive's SHA-256 sidecar; an archive without it may be incomplete). \
                 Give the digest with --sha256 HEX to import anyway",
                sidecar.display()
            )))
        }
        Err(e) => return Err(e),
    }
    let base_name = file_name_of(base)?;
    let whole_want = match expected {
        Some(h) => h.to_ascii_lowercase(),
        None => want.get(&base_name).cloned().ok_or_else(|| {
            Error::Invalid(format!(
                "{} has no digest for {base_name}",
                sidecar.display()
            ))
        })?,
    };
    let split = files.len() > 1 || files.first().is_some_and(|f| f != base);
    if split && expected.is_none() {
        let listed = want.keys().filter(|k| **k != base_name).count();
        if listed != files.len() {
            return Err(Error::Corrupt(format!(
                "archive {} should have {listed} parts, found {}; nothing imported",
                base.display(),
                files.len()
            )));
        }
        for f in files {
            let name = file_name_of(f)?;
            let got = sha256_file(f)?;
            match want.get(&name) {
                Some(w) if *w == got => {}
                Some(w) => {
                    return Err(Error::Corrupt(format!(
                        "archive part {} does not match its SHA-256 (expected {w}, got {got}): \
                         truncated or corrupted; nothing imported",
                        f.display()
                    )))
                }
                None => {
                    return Err(Error::Corrupt(format!(
                        "archive part {} is not listed in {}; nothing imported",
                        f.display(),
                        sidecar.display()
                    )))
                }
            }
        }
    }
    let mut h = Sha256::new();
    let mut r = chain(files);
    let mut buf = vec![0u8; 1 << 20];
    let size: u64 = files
        .iter()
        .filter_map(|f| fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let progress = Progress::bytes("unarchive check", "parts", Some(size));
    progress.add_items(files.len() as u64);
    loop {
        let n = r
            .read(&mut buf)
            .map_err(|e| Error::io_op(format!("reading {}", base.display()), e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        progress.add_bytes(n as u64);
    }
    progress.finish();
    let got = hex(&h.finalize());
    if got != whole_want {
        return Err(Error::Corrupt(format!(
            "archive {} does not match its SHA-256 (expected {whole_want}, got {got}): \
             truncated or corrupted; nothing imported",
            base.display()
        )));
    }
    Ok(got)
}

/// What a full read of an archive found (nothing written).
pub(super) struct Scan {
    manifest: Manifest,
    /// Every object with its length.
    objects: HashMap<ObjectId, u64>,
    /// Objects that decode as trees -> their children: (id, None) for a tree, (id, Some(len))
    /// for a chunk of that length.
    trees: HashMap<ObjectId, Vec<(ObjectId, Option<u32>)>>,
    /// Some tree records ctimes and inode numbers (store format 2).
    stat_trees: bool,
    /// Some tree records hardlinks (store format 3).
    link_trees: bool,
    checkpoints: BTreeMap<ObjectId, Checkpoint>,
}

pub(super) fn scan(files: &[PathBuf]) -> Result<Scan> {
    let mut objects = HashMap::new();
    let mut trees = HashMap::new();
    let mut checkpoints = BTreeMap::new();
    let mut stat_trees = false;
    let progress = Progress::items("unarchive scan", "objects", None);
    let mut link_trees = false;
    let manifest = read_archive(chain(files), &mut |item| {
        match item {
            ArchiveItem::Object { id, data } => {
                progress.add_items(1);
                progress.add_bytes(data.len() as u64);
                if let Ok(t) = Tree::decode(&data) {
                    let kids = t
                        .entries
                        .iter()
                        .flat_map(|e| match &e.kind {
                            EntryKind::File { chunks } => {
                                chunks.iter().map(|c| (c.id, Some(c.len))).collect()
                            }
                            EntryKind::Dir { tree, .. } => vec![(*tree, None)],
                            EntryKind::Symlink { .. } => vec![],
                        })
                        .collect::<Vec<_>>();
                    trees.insert(id, kids);
                    stat_trees |= crate::store::tree::records_stat(&data);
                    link_trees |= crate::store::tree::records_links(&data);
                }
                if objects.insert(id, data.len() as u64).is_some() {
                    return Err(Error::Invalid(format!("archive holds object {id} twice")));
                }
            }
            ArchiveItem::Checkpoint { id, record, .. } => {
                if checkpoints.insert(id, record).is_some() {
                    return Err(Error::Invalid(format!(
                        "archive holds checkpoint {id} twice"
                    )));
                }
            }
        }
        Ok(())
    })?;
    progress.finish();
    let scan = Scan {
        manifest,
        objects,
        trees,
        stat_trees,
        link_trees,
        checkpoints,
    };
    check_complete(&scan)?;
    Ok(scan)
}

/// Every listed checkpoint is present and every object it reaches is in the archive.
pub(super) fn check_complete(s: &Scan) -> Result<()> {
    for id in &s.manifest.checkpoints {
        if !s.checkpoints.contains_key(id) {
            return Err(Error::Corrupt(format!(
                "archive manifest lists checkpoint {id} but the archive does not hold it"
            )));
        }
    }
    for (n, id) in &s.manifest.labels {
        if !s.checkpoints.contains_key(id) {
            return Err(Error::Corrupt(format!(
                "archive label {n} points at checkpoint {id} that it does not hold"
            )));
        }
    }
    for (n, b) in &s.manifest.branches {
        if let Some(h) = b.head {
            if !s.checkpoints.contains_key(&h) {
                return Err(Error::Corrupt(format!(
                    "archive branch {n} has head {h} that it does not hold"
                )));
            }
        }
    }
    if s.manifest.objects != s.objects.len() as u64 {
        return Err(bad_field(
            "objects",
            format!(
                "says {} objects, the archive holds {}",
                s.manifest.objects,
                s.objects.len()
            ),
        ));
    }
    if s.manifest.checkpoints.len() != s.checkpoints.len() {
        return Err(bad_field(
            "checkpoints",
            format!(
                "lists {} checkpoints, the archive holds {}",
                s.manifest.checkpoints.len(),
                s.checkpoints.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut stack: Vec<(ObjectId, Option<u32>)> = s
        .checkpoints
        .values()
        .flat_map(|c| c.roots.values().map(|r| (r.tree, None)))
        .collect();
    while let Some((id, chunk_len)) = stack.pop() {
        if !seen.insert((id, chunk_len)) {
            continue;
        }
        let Some(&len) = s.objects.get(&id) else {
            return Err(Error::Corrupt(format!(
                "archive is incomplete: object {id} is needed but missing"
            )));
        };
        match chunk_len {
            Some(want) if u64::from(want) != len => {
                return Err(Error::Corrupt(format!(
                    "archive object {id} is {len} bytes, the tree says {want}"
                )))
            }
            Some(_) => {}
            None => {
                let kids = s.trees.get(&id).ok_or_else(|| {
                    Error::Corrupt(format!("archive object {id} should be a tree but is not"))
                })?;
                stack.extend(kids.iter().copied());
            }
        }
    }
    Ok(())
}

/// Every root `--relocate` or `--add-root` names must be one of the archive's.
fn check_named_roots(m: &Manifest, opts: &UnarchiveOptions) -> Result<()> {
    let named = opts.relocate.keys().map(|n| ("--relocate", n));
    for (flag, name) in named.chain(opts.add_roots.iter().map(|n| ("--add-root", n))) {
        if !m.roots.contains_key(name) {
            let known: Vec<&str> = m.roots.keys().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "{flag} {name}: the archive has no root {name} (roots: {})",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Imports an archive (see the module doc).
///
/// # Errors
/// `Corrupt`/`Invalid` for a bad archive, `Conflict` for refs that clash with the target;
/// nothing is imported in those cases.
pub fn unarchive(opts: &UnarchiveOptions) -> Result<UnarchiveReport> {
    let (base, files) = archive_files(&opts.file)?;
    let digest = check_digests(&base, &files, opts.sha256.as_deref())?;
    let scan = scan(&files).map_err(nothing_imported)?;
    let target = crate::store::absolute(&opts.store)?;
    let m = &scan.manifest;
    check_named_roots(m, opts)?;
    // Everything is checked before anything is written: the manifest against the target
    // (roots as `init` checks them, refs), then the store is created or opened for writing.
    let existing = target.join(crate::store::CONFIG_FILE).exists();
    let current = if existing {
        let s = crate::remote::open_store(&target)?;
        check_ref_conflicts(&s, m)?;
        Some(s)
    } else {
        None
    };
    let merged = check_manifest_against(
        m,
        &target,
        current.as_ref(),
        &opts.relocate,
        &opts.add_roots,
    )?;
    let roots_added: BTreeMap<String, PathBuf> = merged
        .iter()
        .filter(|(n, _)| {
            current
                .as_ref()
                .is_none_or(|s| !s.config().roots.contains_key(*n))
        })
        .map(|(n, rc)| (n.clone(), rc.path.clone()))
        .collect();
    let mut roots = m.roots.clone();
    for (name, path) in &opts.relocate {
        if let Some(rc) = roots.get_mut(name) {
            rc.path = path.clone();
        }
    }
    let (store, created) = match current {
        Some(s) => (s, false),
        None => {
            let s = Store::init(
                &target,
                &InitOptions {
                    roots: roots.clone(),
                    zstd: m.compression == "zstd",
                    no_default_excludes: true,
                },
            )?;
            (s, true)
        }
    };
    let mut report = UnarchiveReport {
        store: store.root().to_path_buf(),
        created_store: created,
        sha256: digest.clone(),
        relocated: opts.relocate.clone(),
        roots_added,
        ..Default::default()
    };
    let mut config = store.config().clone();
    config.roots = merged;
    if created {
        config.chunker = m.chunker.clone();
    }
    // A version-1 store taking trees that record ctimes and inode numbers becomes version 2
    // (3 for trees that record hardlinks) before any of them lands, so older builds refuse it
    // instead of failing on those trees.
    let needed = match (scan.link_trees, scan.stat_trees) {
        (true, _) => 3,
        (false, true) => 2,
        (false, false) => 1,
    };
    let upgrade = needed > store.config().version;
    if upgrade {
        config.version = needed;
        report.upgraded_to = Some(config.version);
    }
    let config_changed = config != *store.config();
    let args = serde_json::json!({"file": base, "sha256": digest, "relocate": opts.relocate,
        "add_roots": opts.add_roots});
    store.mutate("unarchive", args, |_| {
        check_ref_conflicts(&store, m)?;
        if upgrade {
            let mut c = store.config().clone();
            c.version = config.version;
            store.write_config_file(&c)?;
        }
        // 1. Objects (re-hashed by read_archive, deduplicated by the batch).
        let batch = ObjectBatch::new(&store);
        let mut present = 0u64;
        let mut records: Vec<(ObjectId, Vec<u8>)> = Vec::new();
        let progress = Progress::items("unarchive", "objects", Some(scan.objects.len() as u64));
        let result = read_archive(chain(&files), &mut |item| {
            match item {
                ArchiveItem::Object { id, data } => {
                    progress.add_items(1);
                    progress.add_bytes(data.len() as u64);
                    if store.has_object(&id) {
                        present += 1;
                    }
                    batch.ensure_with_id(id, &data)?;
                }
                ArchiveItem::Checkpoint { id, data, .. } => records.push((id, data)),
            }
            Ok(())
        });
        if let Err(e) = result {
            batch.abandon();
            return Err(e);
        }
        batch.commit()?;
        progress.finish();
        report.objects_new = batch.new_objects();
        report.objects_present = present;
        // 2. Records, once every object is durable.
        for (id, data) in &records {
            if store.checkpoint_path(id).exists() {
                report.checkpoints_present += 1;
            } else {
                atomic::write_atomic_new(&store.checkpoint_path(id), data, 0o444)?;
                report.checkpoints_new += 1;
            }
        }
        // 3. STORE.json roots (relocated or added), 4. refs.
        if config_changed {
            store.write_config_file(&config)?;
        }
        for (name, b) in &m.branches {
            if store.read_branch(name)?.is_none() {
                store.write_branch(name, b)?;
            }
            report.branches.push(name.clone());
        }
        for (name, id) in &m.labels {
            store.create_label(name, id)?;
            report.labels.push(name.clone());
        }
        let summary = serde_json::json!({"sha256": report.sha256,
            "checkpoints_new": report.checkpoints_new, "objects_new": report.objects_new,
            "branches": report.branches, "labels": report.labels, "relocated": report.relocated,
            "roots_added": report.roots_added});
        Ok(((), summary))
    })?;
    Ok(report)
}

/// Refuses labels or branches that exist in the target with another value.
pub(super) fn check_ref_conflicts(store: &Store, m: &Manifest) -> Result<()> {
    for (name, id) in &m.labels {
        if let Some(cur) = store.read_label(name)? {
            if cur != *id {
                return Err(Error::Conflict(format!(
                    "label {name} exists in {} with another checkpoint ({}); nothing imported",
                    store.root().display(),
                    cur.short()
                )));
            }
        }
        if store.read_branch(name)?.is_some() {
            return Err(Error::Conflict(format!(
                "archive label {name} is a branch name in {}; nothing imported",
                store.root().display()
            )));
        }
    }
    for (name, b) in &m.branches {
        if let Some(cur) = store.read_branch(name)? {
            if cur.head != b.head {
                return Err(Error::Conflict(format!(
                    "branch {name} exists in {} with another head ({}); rename or delete it \
                     there first; nothing imported",
                    store.root().display(),
                    cur.head.map_or("none".into(), |h| h.short())
                )));
            }
        }
    }
    Ok(())
}
