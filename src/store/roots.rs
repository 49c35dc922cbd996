//! Where roots may live: absolute paths, not system directories, not overlapping one another
//! or the store (`init`, `import` and relocation check them the same way).

use super::*;

/// System directories no root may be: a restore, switch or workspace mount at a root's path
/// replaces what is there. `/var`, `/run` and `/dev/shm` themselves only (runner state and
/// scratch trees live below them).
pub(super) const SYSTEM_DIRS: &[&str] = &["/", "/var", "/run", "/dev/shm"];

/// System trees no root may be or be inside (`/lib*` too: `/lib64`, `/libx32`...), except
/// below `/dev/shm` (a tmpfs for anyone's files).
pub(super) const SYSTEM_TREES: &[&str] = &[
    "/bin", "/boot", "/dev", "/etc", "/proc", "/sbin", "/sys", "/usr",
];

/// The system directory `path` is or is inside, if any (lexically; see [`SYSTEM_DIRS`]).
pub(super) fn system_dir_of(path: &Path) -> Option<PathBuf> {
    if SYSTEM_DIRS.iter().any(|d| path == Path::new(d)) {
        return Some(path.to_path_buf());
    }
    if path.starts_with("/dev/shm") {
        return None;
    }
    let top: PathBuf = path.components().take(2).collect();
    let first = top.file_name()?.to_string_lossy();
    (SYSTEM_TREES.iter().any(|d| top == Path::new(d)) || first.starts_with("lib")).then_some(top)
}

/// Checks that a root path is absolute and normal (no `.`/`..`, no NUL, at most `PATH_MAX`),
/// and is not a system directory (`/`, `/etc`, `/usr`, `/proc`...; see [`SYSTEM_TREES`]).
/// Lexical only; [`check_roots`] also looks at what an existing path resolves to.
pub fn check_root_path(name: &str, path: &Path) -> Result<()> {
    if !path.is_absolute() {
        return Err(Error::Usage(format!(
            "root {name}: path {} is not absolute",
            path.display()
        )));
    }
    let raw = path.as_os_str().as_encoded_bytes();
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        || raw.contains(&0)
        || raw.len() >= libc::PATH_MAX as usize
    {
        return Err(Error::Usage(format!(
            "root {name}: path {} must be a normal absolute path",
            path.display()
        )));
    }
    if let Some(sys) = system_dir_of(path) {
        return Err(Error::Usage(format!(
            "root {name}: path {} is {} system directory {}; roots must be directories of \
             their own",
            path.display(),
            if sys == path { "the" } else { "inside the" },
            sys.display()
        )));
    }
    Ok(())
}

/// Checks a store's roots as `init` does: names valid, paths valid ([`check_root_path`]),
/// none inside the store `store` nor holding it, none inside (or equal to) another, exclude
/// rules that compile. A path that exists (or an existing parent of it) is checked again as it
/// resolves, so a symlink cannot make a root of `/etc` or of the store.
///
/// # Errors
/// `Usage` naming the root and what is wrong with it.
pub fn check_roots(store: &Path, roots: &BTreeMap<String, RootConfig>) -> Result<()> {
    root_fault(store, roots).map_err(|f| f.error)
}

/// A root [`check_roots`] refuses: which one, and why.
#[derive(Debug)]
pub struct RootFault {
    /// The root at fault (for two roots inside one another, the inner one).
    pub root: String,
    pub error: Error,
}

/// [`check_roots`], naming the root at fault as data, for callers that must tell whose it
/// is (`import --relocate`: the user's choice, or the archive's).
///
/// # Errors
/// The first refused root.
pub fn root_fault(
    store: &Path,
    roots: &BTreeMap<String, RootConfig>,
) -> std::result::Result<(), RootFault> {
    let fault = |name: &str| {
        let root = name.to_string();
        move |error: Error| RootFault { root, error }
    };
    for (name, rc) in roots {
        crate::store::refs::check_name("root", name).map_err(fault(name))?;
        check_root_path(name, &rc.path).map_err(fault(name))?;
        for pat in &rc.exclude {
            exclude::Excluder::compile(name, std::slice::from_ref(pat)).map_err(fault(name))?;
        }
    }
    // Where each root and the store are: as given and, when different, as resolved.
    let resolved = |p: &Path| {
        let real = resolve_existing(p);
        let differs = real != p;
        std::iter::once(p.to_path_buf()).chain(differs.then_some(real))
    };
    let stores: Vec<PathBuf> = resolved(store).collect();
    let places: Vec<(&str, PathBuf)> = roots
        .iter()
        .flat_map(|(n, rc)| resolved(&rc.path).map(move |p| (n.as_str(), p)))
        .collect();
    for (name, path) in &places {
        if let Some(sys) = system_dir_of(path) {
            return Err(fault(name)(Error::Usage(format!(
                "root {name}: path {} resolves to {}, in system directory {}",
                roots[*name].path.display(),
                path.display(),
                sys.display()
            ))));
        }
        for s in &stores {
            if s.starts_with(path) {
                return Err(fault(name)(Error::Usage(format!(
                    "store {} is inside root {name} ({}): captures would include the store",
                    s.display(),
                    path.display()
                ))));
            }
            if path.starts_with(s) {
                return Err(fault(name)(Error::Usage(format!(
                    "root {name} ({}) is inside the store {}",
                    path.display(),
                    s.display()
                ))));
            }
        }
        for (other, opath) in &places {
            if other != name && path.starts_with(opath) {
                return Err(fault(name)(Error::Usage(format!(
                    "root {name} ({}) is inside root {other} ({})",
                    path.display(),
                    opath.display()
                ))));
            }
        }
    }
    Ok(())
}

/// `path` with its longest existing ancestor resolved through symlinks (the rest appended
/// unchanged); `path` itself when nothing resolves.
pub(super) fn resolve_existing(path: &Path) -> PathBuf {
    let mut base = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = fs::canonicalize(&base) {
            return rest.iter().rev().fold(real, |p: PathBuf, c| p.join(c));
        }
        match (base.file_name().map(|n| n.to_os_string()), base.parent()) {
            (Some(n), Some(parent)) => {
                rest.push(n);
                base = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}
