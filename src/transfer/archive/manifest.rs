//! Reading an archive (every entry re-hashed) and checking its MANIFEST.json, field by
//! field, then against the target store.

use super::*;

/// Reads and checks every entry of an archive stream (zstd + tar), calling `visit` for each
/// object and checkpoint. Returns the manifest.
///
/// # Errors
/// `Invalid` for a stream that is not a ckptfs archive or has a refused entry; `Corrupt` for an
/// object or record that does not match its name.
pub fn read_archive(
    input: impl Read,
    visit: &mut dyn FnMut(ArchiveItem) -> Result<()>,
) -> Result<Manifest> {
    let dec = zstd::stream::read::Decoder::new(input)
        .map_err(|e| Error::Invalid(format!("not a ckptfs archive (no zstd stream: {e})")))?;
    let mut ar = tar::Archive::new(dec);
    let entries = ar
        .entries()
        .map_err(|e| Error::Invalid(format!("not a ckptfs archive ({e})")))?;
    let mut manifest: Option<Manifest> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| {
            Error::Invalid(format!(
                "archive is not a valid zstd-compressed tar stream ({e})"
            ))
        })?;
        let path_bytes = entry.path_bytes().into_owned();
        let path = String::from_utf8(path_bytes.clone()).map_err(|_| {
            Error::Invalid(format!(
                "archive entry {:?} is not UTF-8; refused",
                String::from_utf8_lossy(&path_bytes)
            ))
        })?;
        check_entry_path(&path)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is not a regular file; refused"
            )));
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| Error::Invalid(format!("archive entry {path:?}: bad size ({e})")))?;
        if size > MAX_ENTRY {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is {size} bytes, more than any ckptfs object; refused"
            )));
        }
        // The header's size is the archive's word: grow with what is actually read.
        let mut data = Vec::with_capacity((size as usize).min(1 << 20));
        entry
            .by_ref()
            .take(MAX_ENTRY + 1)
            .read_to_end(&mut data)
            .map_err(|e| Error::Invalid(format!("archive entry {path:?} cannot be read ({e})")))?;
        if data.len() as u64 != size {
            return Err(Error::Invalid(format!(
                "archive entry {path:?} is truncated"
            )));
        }
        if path == MANIFEST_NAME {
            if manifest.is_some() {
                return Err(Error::Invalid("archive has two manifests".into()));
            }
            manifest = Some(parse_manifest(&data)?);
            continue;
        }
        if manifest.is_none() {
            return Err(Error::Invalid(format!(
                "not a ckptfs archive (first entry is {path:?}, not {MANIFEST_NAME})"
            )));
        }
        if let Some(hex) = path.strip_prefix("objects/") {
            let id = ObjectId::parse(hex)?;
            if ObjectId::of(&data) != id {
                return Err(Error::Corrupt(format!(
                    "archive object {id} does not match its hash"
                )));
            }
            visit(ArchiveItem::Object { id, data })?;
        } else if let Some(hex) = path.strip_prefix("checkpoints/") {
            let id = ObjectId::parse(hex)?;
            let record = Checkpoint::decode(&id, &data)?;
            visit(ArchiveItem::Checkpoint { id, data, record })?;
        }
    }
    manifest.ok_or_else(|| Error::Invalid("not a ckptfs archive (no manifest)".into()))
}

/// Accepts only `MANIFEST.json`, `objects/<64 hex>` and `checkpoints/<64 hex>`.
pub fn check_entry_path(path: &str) -> Result<()> {
    let ok = path == MANIFEST_NAME
        || [("objects/"), ("checkpoints/")].iter().any(|pre| {
            path.strip_prefix(pre).is_some_and(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            })
        });
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "archive entry {path:?} is not allowed (only {MANIFEST_NAME}, objects/<id>, \
             checkpoints/<id>; absolute paths and '..' are refused)"
        )))
    }
}

/// Largest MANIFEST.json accepted (about 200k checkpoint ids).
pub const MAX_MANIFEST_BYTES: usize = 16 << 20;

/// A refused manifest field: one line naming it.
pub(super) fn bad_field(field: &str, problem: impl std::fmt::Display) -> Error {
    Error::Invalid(format!("archive manifest: {field}: {problem}"))
}

/// What an import refused before writing anything says at its end: bad or corrupt input
/// (`Invalid`, `Corrupt`) gets "; nothing imported"; other errors are left as they are. The
/// archive's checks leave the words out and the import adds them here, once.
pub(super) fn nothing_imported(e: Error) -> Error {
    match e {
        Error::Corrupt(m) => Error::Corrupt(format!("{m}; nothing imported")),
        Error::Invalid(m) => Error::Invalid(format!("{m}; nothing imported")),
        other => other,
    }
}

/// Decodes and checks MANIFEST.json, every field, as far as it can without the target store
/// (see [`check_manifest_against`] for the rest): roots named and placed as `init` accepts
/// them ([`crate::store::check_roots`]), chunker parameters a store may have, branch and label
/// names valid, branch states known, sizes bounded.
///
/// # Errors
/// `Invalid` naming the field at fault.
pub fn parse_manifest(data: &[u8]) -> Result<Manifest> {
    if data.len() > MAX_MANIFEST_BYTES {
        return Err(bad_field(
            MANIFEST_NAME,
            format!("{} bytes, more than {MAX_MANIFEST_BYTES}", data.len()),
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(data)
        .map_err(|e| Error::Invalid(format!("archive manifest is not JSON ({e})")))?;
    if v.get("format").and_then(|f| f.as_str()) != Some(ARCHIVE_FORMAT) {
        return Err(Error::Invalid(format!(
            "not a ckptfs archive (manifest format is not {ARCHIVE_FORMAT:?})"
        )));
    }
    let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
    if version == 0 || version > u64::from(ARCHIVE_VERSION) {
        return Err(Error::Invalid(format!(
            "archive format version {version} is not supported by this ckptfs (knows {ARCHIVE_VERSION})"
        )));
    }
    let m = manifest_fields(&v)?;
    if m.created.len() > 64 {
        return Err(bad_field("created", "longer than a timestamp"));
    }
    for (name, rc) in &m.roots {
        crate::store::refs::check_name("root", name).map_err(|e| bad_field("roots", e))?;
        crate::store::check_root_path(name, &rc.path)
            .map_err(|e| bad_field(&format!("roots.{name}.path"), e))?;
        if rc.exclude.len() > MAX_EXCLUDES || rc.exclude.iter().any(|p| p.len() > 4096) {
            return Err(bad_field(
                &format!("roots.{name}.exclude"),
                format!("more than {MAX_EXCLUDES} rules, or a rule over 4096 bytes"),
            ));
        }
    }
    if m.compression != "none" && m.compression != "zstd" {
        return Err(bad_field(
            "compression",
            format!("unknown compression {:?}", m.compression),
        ));
    }
    m.chunker.check().map_err(|e| bad_field("chunker", e))?;
    let mut listed = HashSet::new();
    for id in &m.checkpoints {
        if !listed.insert(id) {
            return Err(bad_field("checkpoints", format!("{id} is listed twice")));
        }
    }
    for (name, b) in &m.branches {
        crate::store::refs::check_name("branch", name).map_err(|e| bad_field("branches", e))?;
        if !BRANCH_STATES.contains(&b.state.as_str()) {
            return Err(bad_field(
                &format!("branches.{name}.state"),
                format!("{:?} is not one of {}", b.state, BRANCH_STATES.join(", ")),
            ));
        }
    }
    for name in m.labels.keys() {
        crate::store::refs::check_name("label", name).map_err(|e| bad_field("labels", e))?;
        if m.branches.contains_key(name) {
            return Err(bad_field(
                &format!("labels.{name}"),
                "is also a branch name in the archive",
            ));
        }
    }
    if m.object_bytes > m.objects.saturating_mul(MAX_ENTRY) {
        return Err(bad_field(
            "object_bytes",
            format!(
                "{} bytes cannot be {} objects of at most {MAX_ENTRY}",
                m.object_bytes, m.objects
            ),
        ));
    }
    Ok(m)
}

/// The manifest's fields, each decoded on its own so an error names the field.
pub(super) fn manifest_fields(v: &serde_json::Value) -> Result<Manifest> {
    fn field<T: serde::de::DeserializeOwned>(v: &serde_json::Value, name: &str) -> Result<T> {
        let x = v.get(name).cloned().unwrap_or(serde_json::Value::Null);
        serde_json::from_value(x).map_err(|e| bad_field(name, e))
    }
    let mut branches = BTreeMap::new();
    match v.get("branches") {
        Some(serde_json::Value::Object(map)) => {
            for (name, b) in map {
                let b: Branch = serde_json::from_value(b.clone())
                    .map_err(|e| bad_field(&format!("branches.{name}"), e))?;
                branches.insert(name.clone(), b);
            }
        }
        _ => return Err(bad_field("branches", "not an object")),
    }
    Ok(Manifest {
        format: field(v, "format")?,
        version: field(v, "version")?,
        created: field(v, "created")?,
        roots: field(v, "roots")?,
        compression: field(v, "compression")?,
        chunker: field(v, "chunker")?,
        checkpoints: field(v, "checkpoints")?,
        branches,
        labels: field(v, "labels")?,
        objects: field(v, "objects")?,
        object_bytes: field(v, "object_bytes")?,
    })
}

/// Most exclude rules a root of an archive may bring.
pub(super) const MAX_EXCLUDES: usize = 1024;

/// The states a branch record may have.
pub(super) const BRANCH_STATES: &[&str] = &["active", "archived"];

/// The roots the target store at `target` would have after importing `m` (its own, the
/// archive's it lacks, relocated ones moved), checked as `init` checks roots.
///
/// An existing store gains a root of the archive only when the user named it (`--add-root`
/// or `--relocate`): the archive is untrusted, and a root it brings is a directory the next
/// `capture` reads.
///
/// # Errors
/// `Invalid` naming the manifest's root at fault (`Usage` for a bad `--relocate`, or for a
/// root the existing store lacks and the user did not name).
pub(super) fn check_manifest_against(
    m: &Manifest,
    target: &Path,
    existing: Option<&Store>,
    relocate: &BTreeMap<String, PathBuf>,
    add: &BTreeSet<String>,
) -> Result<BTreeMap<String, RootConfig>> {
    let mut roots = existing.map_or_else(BTreeMap::new, |s| s.config().roots.clone());
    for name in add {
        if existing.is_some() && roots.contains_key(name) {
            return Err(Error::Usage(format!(
                "--add-root {name}: {} already has root {name}",
                target.display()
            )));
        }
    }
    let mut unnamed = None;
    for (name, rc) in &m.roots {
        if roots.contains_key(name) {
            continue;
        }
        if existing.is_some() && !add.contains(name) && !relocate.contains_key(name) {
            unnamed.get_or_insert((name.clone(), rc.path.clone()));
        }
        roots.insert(name.clone(), rc.clone());
    }
    for (name, path) in relocate {
        crate::store::check_root_path(name, path).map_err(|e| match e {
            Error::Usage(m) => Error::Usage(format!("--relocate {name}: {m}")),
            other => other,
        })?;
        if let Some(rc) = roots.get_mut(name) {
            rc.path = path.clone();
        }
    }
    crate::store::root_fault(target, &roots).map_err(|f| {
        let msg = match f.error {
            Error::Usage(m) | Error::Invalid(m) => m,
            other => other.to_string(),
        };
        // A relocated root is the user's own choice: a usage error; else the archive's.
        if relocate.contains_key(&f.root) {
            Error::Usage(format!("--relocate {}: {msg}", f.root))
        } else {
            nothing_imported(bad_field("roots", msg))
        }
    })?;
    if let Some((name, path)) = unnamed {
        return Err(Error::Usage(format!(
            "the archive has root {name} ({}), which {} does not have: a capture would read \
             that directory; add it there with --add-root {name}, or elsewhere with \
             --relocate {name}=/PATH; nothing imported",
            crate::text::quote::path(&path),
            target.display()
        )));
    }
    Ok(roots)
}
