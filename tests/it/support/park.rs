//! Parked workspace overlays (`workspace::park`): where a store parks them and records them,
//! and the kernel's id of a mount, which tells the very same mount from a fresh one.

use std::path::{Path, PathBuf};

use super::life::store_mounts_dir;

/// `/run/ckptfs/<id>/parked/` of the store at `store`.
pub fn parked_dir(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("parked")
}

/// Where root `root` of `branch` is parked.
pub fn parked_at(store: &Path, branch: &str, root: &str) -> PathBuf {
    parked_dir(store).join(branch).join(root)
}

/// `STORE/run/parked/B.json`: the park record of `branch`.
pub fn park_record(store: &Path, branch: &str) -> PathBuf {
    store.join("run/parked").join(format!("{branch}.json"))
}

/// The branches with a park record in `store`, sorted.
pub fn park_records(store: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(store.join("run/parked"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".json")
                .map(str::to_string)
        })
        .collect();
    out.sort();
    out
}

/// The mount id (mountinfo's first field) of the topmost mount at exactly `path`, if any.
pub fn mount_id(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let want = path.to_str()?;
    text.lines()
        .rev()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let id = f.next()?.parse::<u64>().ok()?;
            let mp = f.nth(3)?;
            (mp == want).then_some(id)
        })
        .next()
}
