//! The records running daemons keep (`run/views/<pid>.json`), and the list of a store's
//! mounted views built from them and the mount table.

use super::*;

pub(super) fn read_state(store: &Store, pid: u32) -> Result<Option<MountState>> {
    let p = store.view_state_path(pid);
    match fs::read(&p) {
        Ok(d) => serde_json::from_slice(&d)
            .map(Some)
            .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(&p, e)),
    }
}

pub(super) fn states(store: &Store) -> Result<Vec<MountState>> {
    let mut out = Vec::new();
    for (_, name) in crate::fs::json_records(&store.views_dir())? {
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if let Some(s) = read_state(store, pid)? {
            out.push(s);
        }
    }
    Ok(out)
}

/// Live mounts of `store`: daemons with state files whose mount is present, plus any other
/// mount whose source names the store. Removes state files of daemons that are gone.
pub fn list(store: &Store) -> Result<Vec<MountStatus>> {
    let all = mounts()?;
    let mut out = Vec::new();
    for s in states(store)? {
        let mounted = all
            .iter()
            .any(|m| m.mountpoint == s.mountpoint && m.source == s.fsname);
        if mounted && pid_alive(s.pid) {
            out.push(MountStatus {
                mountpoint: s.mountpoint.clone(),
                source: s.fsname.clone(),
                state: Some(s),
            });
        } else if !pid_alive(s.pid) {
            let p = store.view_state_path(s.pid);
            if let Err(e) = fs::remove_file(&p) {
                log::warn!("removing stale {}: {e}", p.display());
            }
        }
    }
    for m in all {
        if m.fstype == FSTYPE
            && source_names_store(&m.source, store)
            && !out.iter().any(|o| o.mountpoint == m.mountpoint)
        {
            out.push(MountStatus {
                mountpoint: m.mountpoint,
                source: m.source,
                state: None,
            });
        }
    }
    out.sort_by(|a, b| a.mountpoint.cmp(&b.mountpoint));
    Ok(out)
}
