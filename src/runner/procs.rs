//! The processes of a turn and where they start: the pids left in the workspace's cgroup
//! (waited for, bounded, and named when they stay), and the caller's working directory taken
//! again through the branch's current mount after `turn` mounted, switched or retried.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::store::Store;

/// How long a turn waits for the processes an earlier turn or its own COMMAND left in the
/// cgroup (an agent's helpers outlive it by a second or two) before it names them.
pub const SETTLE_WAIT: Duration = Duration::from_secs(15);

/// The pids in cgroup `dir` (empty when it is gone).
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Waits until cgroup `dir` holds no process, at most `wait`. Returns what is left, each as
/// `PID (COMMAND)` (empty: none).
pub fn wait_until_empty(dir: &Path, wait: Duration) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let left = cgroup_pids(dir);
        if left.is_empty() {
            return Vec::new();
        }
        if t0.elapsed() >= wait {
            return left.into_iter().map(describe_pid).collect();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `PID (COMMAND)`, from `/proc/PID/comm` (escaped for a terminal: the agent names it).
fn describe_pid(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("{pid} ({})", crate::text::quote::text(comm.trim()))
}

/// Where the caller stands, as a path that resolves through the branch's mount as it is
/// now: the working directory's path, or (when it lies in an overlay that a switch, fold
/// or retry took away from the mountpoint: `/run/ckptfs/ID/detached/B-ROOT-NS/...` or
/// `.../parked/B/ROOT/...`) the same place under the root's own path. The nearest directory
/// of it that exists is given (a retry may have set the directory aside). `None` when the
/// working directory is gone altogether.
pub fn caller_dir(store: &Store) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let place = taken_away_place(store, &cwd).unwrap_or(cwd);
    place
        .ancestors()
        .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .map(Path::to_path_buf)
}

/// The place under a root's path of `p` when `p` lies in one of the store's detached or
/// parked overlays.
fn taken_away_place(store: &Store, p: &Path) -> Option<PathBuf> {
    let roots = &store.config().roots;
    if let Ok(rest) = p.strip_prefix(store.detached_dir()) {
        let mut parts = rest.components();
        let name = parts.next()?.as_os_str().to_str()?;
        // `B-ROOT-NS`: the root is the name whose `-ROOT-NS` ends it.
        let (head, ns) = name.rsplit_once('-')?;
        ns.parse::<i64>().ok()?;
        let (_, rc) = roots
            .iter()
            .find(|(r, _)| head.ends_with(&format!("-{r}")))?;
        return Some(rc.path.join(parts.as_path()));
    }
    if let Ok(rest) = p.strip_prefix(store.parked_dir()) {
        let mut parts = rest.components();
        let _branch = parts.next()?;
        let root = parts.next()?.as_os_str().to_str()?;
        return Some(roots.get(root)?.path.join(parts.as_path()));
    }
    None
}
