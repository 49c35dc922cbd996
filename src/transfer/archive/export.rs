//! Writing an archive: the selection of checkpoints, then a tar of zstd objects, records
//! and MANIFEST.json, cut into parts when asked, with its SHA-256 sidecar.

use super::*;

pub(super) fn select(store: &Store, opts: &ArchiveOptions) -> Result<Selection> {
    let mut sel = Selection {
        checkpoints: BTreeMap::new(),
        branches: BTreeMap::new(),
        labels: BTreeMap::new(),
    };
    let all_labels = store.list_labels()?;
    let add_history = |sel: &mut Selection, head: ObjectId| -> Result<()> {
        let mut cur = Some(head);
        while let Some(id) = cur {
            if sel.checkpoints.contains_key(&id) {
                break;
            }
            match store.read_checkpoint(&id) {
                Ok(c) => {
                    cur = c.parents.first().copied();
                    sel.checkpoints.insert(id, c);
                }
                // Older history pruned by gc: the archive starts here.
                Err(Error::NotFound(_)) if id != head => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    if opts.all {
        for id in store.list_checkpoints()? {
            let c = store.read_checkpoint(&id)?;
            sel.checkpoints.insert(id, c);
        }
        for (n, b) in store.list_branches()? {
            sel.branches.insert(n, b);
        }
    } else {
        for spec in &opts.specs {
            let as_name = crate::store::refs::check_name("label", spec).is_ok();
            if as_name {
                if let Some(id) = store.read_label(spec)? {
                    let c = store.read_checkpoint(&id)?;
                    sel.checkpoints.insert(id, c);
                    continue;
                }
                if let Some(b) = store.read_branch(spec)? {
                    if let Some(h) = b.head {
                        add_history(&mut sel, h)?;
                    }
                    sel.branches.insert(spec.clone(), b);
                    continue;
                }
            }
            let id = store.resolve(spec)?;
            let c = store.read_checkpoint(&id)?;
            sel.checkpoints.insert(id, c);
        }
    }
    for (n, id) in all_labels {
        if sel.checkpoints.contains_key(&id) {
            sel.labels.insert(n, id);
        }
    }
    Ok(sel)
}

/// Writes parts: temp files `.<FILE>.ckptfs-tmp-<pid>.<n>` beside FILE, renamed at the end.
pub(super) struct PartWriter {
    dir: PathBuf,
    base_name: String,
    temp_prefix: String,
    split: Option<u64>,
    parts: Vec<(PathBuf, Sha256, u64)>,
    cur: Option<File>,
    whole: Sha256,
    whole_len: u64,
}

impl PartWriter {
    pub(super) fn open_part(&mut self) -> io::Result<()> {
        atomic::fault_point("write")?;
        let n = self.parts.len();
        let p = self.dir.join(format!("{}{n}", self.temp_prefix));
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)?;
        self.cur = Some(f);
        self.parts.push((p, Sha256::new(), 0));
        Ok(())
    }
}

impl Write for PartWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let full = match (self.split, self.parts.last()) {
            (_, None) => true,
            (Some(s), Some(p)) => p.2 >= s,
            (None, Some(_)) => false,
        };
        if full || self.cur.is_none() {
            self.open_part()?;
        }
        let room = match (self.split, self.parts.last()) {
            (Some(s), Some(p)) => (s - p.2).min(buf.len() as u64) as usize,
            _ => buf.len(),
        };
        let n = self
            .cur
            .as_mut()
            .ok_or_else(|| io::Error::other("no open archive part"))?
            .write(&buf[..room])?;
        if let Some(p) = self.parts.last_mut() {
            p.1.update(&buf[..n]);
            p.2 += n as u64;
        }
        self.whole.update(&buf[..n]);
        self.whole_len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.cur {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

pub(super) fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

pub(super) fn part_path(file: &Path, n: usize) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(format!(".part{n:03}"));
    PathBuf::from(s)
}

pub(super) fn tar_append(b: &mut tar::Builder<impl Write>, path: &str, data: &[u8]) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o444);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, path, data)
        .map_err(|e| Error::io_op(format!("writing archive entry {path}"), e))
}

/// Exports the chosen history to `opts.out` (see the module doc).
///
/// # Errors
/// `Usage` for a bad selection or an output inside the store; `Conflict` when the output (or
/// its sidecar or parts) exists; `Corrupt` when an object to export fails its hash.
pub fn archive(store: &Store, opts: &ArchiveOptions) -> Result<ArchiveReport> {
    if opts.all != opts.specs.is_empty() {
        return Err(Error::Usage(
            "archive needs checkpoints/branches to export, or --all (not both)".into(),
        ));
    }
    let out = crate::store::absolute(&opts.out)?;
    if out.starts_with(store.root()) {
        return Err(Error::Usage(format!(
            "--out {} is inside the store; write the archive elsewhere",
            out.display()
        )));
    }
    let dir = out
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| Error::Usage(format!("--out {}: no directory", out.display())))?;
    let base_name = file_name_of(&out)?;
    for p in [out.clone(), sidecar_path(&out), part_path(&out, 0)] {
        if fs::symlink_metadata(&p).is_ok() {
            return Err(Error::Conflict(format!(
                "{} already exists; archives are never overwritten",
                p.display()
            )));
        }
    }
    let temp_prefix = format!(".{base_name}.ckptfs-tmp-{}.", std::process::id());
    let args =
        serde_json::json!({"specs": opts.specs, "all": opts.all, "out": out, "split": opts.split});
    store.mutate("archive", args, |m| {
        m.set_phase(serde_json::json!({"temp_dir": dir, "temp_prefix": temp_prefix}))?;
        let sel = select(store, opts)?;
        let result = write_archive(
            store,
            &sel,
            &out,
            &dir,
            &base_name,
            &temp_prefix,
            opts.split,
        );
        if result.is_err() {
            for p in crate::fs::list_dir(&dir).unwrap_or_default() {
                if file_name_of(&p).is_ok_and(|n| n.starts_with(&temp_prefix)) {
                    let _ignored_cleanup = fs::remove_file(&p);
                }
            }
        }
        let report = result?;
        let summary = serde_json::json!({"file": report.file, "sha256": report.sha256,
            "bytes": report.bytes, "parts": report.parts, "checkpoints": report.checkpoints,
            "objects": report.objects});
        Ok((report, summary))
    })
}

pub(super) fn write_archive(
    store: &Store,
    sel: &Selection,
    out: &Path,
    dir: &Path,
    base_name: &str,
    temp_prefix: &str,
    split: Option<u64>,
) -> Result<ArchiveReport> {
    // Objects reachable from the chosen checkpoints: trees (None) and chunks (their length,
    // which the read holds them to).
    let mut objects: BTreeMap<ObjectId, Option<u32>> = BTreeMap::new();
    let mut stack: Vec<ObjectId> = sel
        .checkpoints
        .values()
        .flat_map(|c| c.roots.values().map(|r| r.tree))
        .collect();
    while let Some(t) = stack.pop() {
        if objects.insert(t, None).is_some() {
            continue;
        }
        let tree = store.read_tree(&t)?;
        for e in &tree.entries {
            match &e.kind {
                EntryKind::File { chunks } => {
                    for c in chunks {
                        objects.entry(c.id).or_insert(Some(c.len));
                    }
                }
                EntryKind::Dir { tree, .. } => stack.push(*tree),
                EntryKind::Symlink { .. } => {}
            }
        }
    }
    let mut manifest = Manifest {
        format: ARCHIVE_FORMAT.into(),
        version: ARCHIVE_VERSION,
        created: crate::text::time::format_utc(crate::text::time::now_ns()),
        roots: store.config().roots.clone(),
        compression: store.config().compression.clone(),
        chunker: store.config().chunker.clone(),
        checkpoints: sel.checkpoints.keys().copied().collect(),
        branches: sel.branches.clone(),
        labels: sel.labels.clone(),
        objects: objects.len() as u64,
        object_bytes: 0,
    };
    for id in objects.keys() {
        manifest.object_bytes += store.object_file_size(id).unwrap_or(0);
    }
    let writer = PartWriter {
        dir: dir.to_path_buf(),
        base_name: base_name.to_string(),
        temp_prefix: temp_prefix.to_string(),
        split,
        parts: Vec::new(),
        cur: None,
        whole: Sha256::new(),
        whole_len: 0,
    };
    let mut enc = zstd::stream::write::Encoder::new(writer, ZSTD_LEVEL)
        .map_err(|e| Error::io_op("starting zstd", e))?;
    enc.include_checksum(true)
        .map_err(|e| Error::io_op("starting zstd", e))?;
    let mut tb = tar::Builder::new(enc);
    let mjson = serde_json::to_vec_pretty(&manifest)
        .map_err(|e| Error::Invalid(format!("encoding manifest: {e}")))?;
    tar_append(&mut tb, MANIFEST_NAME, &mjson)?;
    for id in sel.checkpoints.keys() {
        let p = store.checkpoint_path(id);
        let data = fs::read(&p).map_err(|e| Error::io(&p, e))?;
        tar_append(&mut tb, &format!("checkpoints/{id}"), &data)?;
    }
    let progress = Progress::items("archive", "objects", Some(objects.len() as u64));
    for (id, len) in &objects {
        let data = match len {
            Some(len) => store.read_chunk(&crate::store::tree::Chunk { id: *id, len: *len })?,
            None => store.read_object(id)?,
        };
        tar_append(&mut tb, &format!("objects/{id}"), &data)?;
        progress.add_items(1);
        progress.add_bytes(data.len() as u64);
    }
    progress.finish();
    let enc = tb
        .into_inner()
        .map_err(|e| Error::io_op("finishing the tar stream", e))?;
    let mut w = enc
        .finish()
        .map_err(|e| Error::io_op("finishing the zstd stream", e))?;
    w.flush()
        .map_err(|e| Error::io_op("writing the archive", e))?;
    if w.parts.is_empty() {
        w.open_part()
            .map_err(|e| Error::io_op("writing the archive", e))?;
    }
    drop(w.cur.take());
    let single = w.split.is_none();
    let whole = hex(&w.whole.finalize_reset());
    let mut parts = Vec::new();
    for (n, (tmp, h, len)) in w.parts.drain(..).enumerate() {
        atomic::sync_path(&tmp)?;
        let dest = if single {
            out.to_path_buf()
        } else {
            part_path(out, n)
        };
        parts.push((tmp, dest, hex(&h.finalize()), len));
    }
    for (tmp, dest, _, _) in &parts {
        atomic::rename(tmp, dest)?;
    }
    atomic::sync_path(dir)?;
    let mut side = String::new();
    let mut part_digests = Vec::new();
    for (_, dest, h, len) in &parts {
        if !single {
            side.push_str(&format!("{h}  {}\n", file_name_of(dest)?));
        }
        part_digests.push(PartDigest {
            path: dest.clone(),
            sha256: h.clone(),
            bytes: *len,
        });
    }
    side.push_str(&format!("{whole}  {}\n", w.base_name));
    let sidecar = sidecar_path(out);
    if !atomic::write_atomic_new(&sidecar, side.as_bytes(), 0o644)? {
        return Err(Error::Conflict(format!(
            "{} appeared while the archive was written",
            sidecar.display()
        )));
    }
    Ok(ArchiveReport {
        file: out.to_path_buf(),
        sha256: whole,
        bytes: w.whole_len,
        parts: part_digests,
        sidecar,
        checkpoints: sel.checkpoints.len(),
        objects: manifest.objects,
        object_bytes: manifest.object_bytes,
        branches: sel.branches.keys().cloned().collect(),
        labels: sel.labels.keys().cloned().collect(),
    })
}
