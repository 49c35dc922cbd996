//! The remote lock: a `locks/<ns>-<hex>` object with a lease, as restic's locks, taken by
//! `push` and `gc --remote` so neither runs while the other (from any machine) is in flight.
//!
//! S3 as Garage serves it has no conditional PUT (checked: Garage 2.5 ignores `If-None-Match`
//! and `If-Match` on PutObject), so the lock is built from put, list and delete, which Garage
//! serves read-after-write consistent (quorum reads and writes):
//! write my lock, then list the locks; if any other live lock is there, take mine back and
//! refuse, naming its holder. Two lockers can then never both win (the later writer always
//! sees the earlier lock), and at worst both back off: the one whose lock is older retries
//! after a short random wait, the younger refuses at once. A lock whose lease ran out (a
//! crashed holder) is ignored and removed. The holder renews its lease while it works.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::remote::Remote;

/// How long a lock holds without renewal.
pub const LEASE: Duration = Duration::from_secs(120);

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LockRecord {
    /// `host pid N`.
    pub holder: String,
    /// What it does: "push" or "gc".
    pub op: String,
    pub created_ns: i64,
    pub expires_ns: i64,
}

/// A held remote lock; removed on drop.
pub struct RemoteLock<'a> {
    remote: &'a Remote,
    key: String,
    stop: Arc<AtomicBool>,
    renewer: Option<std::thread::JoinHandle<()>>,
}

fn holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    format!("{host} pid {}", std::process::id())
}

/// A lock held by a process of this host that is no longer running (a push killed, or one
/// whose server died before it could take its lock back).
fn holder_is_dead(h: &str) -> bool {
    let me = holder();
    let (Some((host, pid)), Some((my_host, _))) = (h.split_once(" pid "), me.split_once(" pid "))
    else {
        return false;
    };
    match pid.parse::<u32>() {
        Ok(pid) => {
            host == my_host && pid != std::process::id() && !crate::store::lock::pid_alive(pid)
        }
        Err(_) => false,
    }
}

fn record(op: &str, created_ns: i64) -> LockRecord {
    let now = crate::text::time::now_ns();
    LockRecord {
        holder: holder(),
        op: op.into(),
        created_ns,
        expires_ns: now + LEASE.as_nanos() as i64,
    }
}

fn fmt_time(ns: i64) -> String {
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_nanos(u64::try_from(ns).unwrap_or(0)),
    )
    .to_string()
}

/// Takes the remote's lock for `op`.
///
/// # Errors
/// `Conflict` naming the holder when another live lock is there; server errors.
pub fn acquire<'a>(remote: &'a Remote, op: &str) -> Result<RemoteLock<'a>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let created = crate::text::time::now_ns();
        let key = format!(
            "locks/{created:020}-{}",
            crate::remote::crypto::random_hex(4)?
        );
        let body = serde_json::to_vec(&record(op, created))
            .map_err(|e| Error::Invalid(format!("encoding a lock: {e}")))?;
        remote.backend.put(&key, body)?;
        let mut others = Vec::new();
        for (k, _) in remote.backend.list("locks/")? {
            if k == key {
                continue;
            }
            let Some(d) = remote.backend.get(&k)? else {
                continue;
            };
            match serde_json::from_slice::<LockRecord>(&d) {
                Ok(r)
                    if r.expires_ns < crate::text::time::now_ns() || holder_is_dead(&r.holder) =>
                {
                    log::info!(
                        "remote {}: removing the stale lock of {} ({k})",
                        remote.name,
                        r.holder
                    );
                    remote.backend.delete(&k)?;
                }
                Ok(r) => others.push((k, r)),
                // Not ours to judge: a live lock of unknown form still blocks.
                Err(_) => others.push((
                    k.clone(),
                    LockRecord {
                        holder: format!("an unreadable lock ({k})"),
                        op: "?".into(),
                        created_ns: 0,
                        expires_ns: i64::MAX,
                    },
                )),
            }
        }
        if others.is_empty() {
            let stop = Arc::new(AtomicBool::new(false));
            let renewer = spawn_renewer(remote, &key, op, created, stop.clone());
            return Ok(RemoteLock {
                remote,
                key,
                stop,
                renewer,
            });
        }
        remote.backend.delete(&key)?;
        others.sort_by(|a, b| a.0.cmp(&b.0));
        let older_than_all = others.iter().all(|(k, _)| key < *k);
        if older_than_all && attempt < 4 {
            let mut r = [0u8; 1];
            crate::remote::crypto::random(&mut r)?;
            std::thread::sleep(Duration::from_millis(50 + u64::from(r[0]) * 2));
            continue;
        }
        let (_, first) = &others[0];
        return Err(Error::Conflict(format!(
            "remote {} is locked by {} ({} since {}, lease until {}); try again later",
            remote.name,
            first.holder,
            first.op,
            fmt_time(first.created_ns),
            fmt_time(first.expires_ns)
        )));
    }
}

/// Renews the lease every third of it from a thread with its own client (the backend blocks
/// on its runtime and is not shared across threads here).
fn spawn_renewer(
    remote: &Remote,
    key: &str,
    op: &str,
    created: i64,
    stop: Arc<AtomicBool>,
) -> Option<std::thread::JoinHandle<()>> {
    let backend = crate::remote::backend_of(&remote.config).ok()?;
    let (key, op) = (key.to_string(), op.to_string());
    std::thread::Builder::new()
        .name("ckptfs-lock".into())
        .spawn(move || {
            let step = Duration::from_millis(200);
            let mut waited = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(step);
                waited += step;
                if waited >= LEASE / 3 {
                    waited = Duration::ZERO;
                    if let Ok(body) = serde_json::to_vec(&record(&op, created)) {
                        if let Err(e) = backend.put(&key, body) {
                            log::warn!("renewing the remote lock {key}: {e}");
                        }
                    }
                }
            }
        })
        .ok()
}

impl RemoteLock<'_> {
    /// Releases the lock (also done on drop, where an error is only logged).
    ///
    /// # Errors
    /// The delete failing.
    pub fn release(mut self) -> Result<()> {
        self.stop_renewer();
        let r = self.remote.backend.delete(&self.key);
        self.key.clear();
        r
    }

    fn stop_renewer(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.renewer.take() {
            let _joined = h.join();
        }
    }
}

impl Drop for RemoteLock<'_> {
    fn drop(&mut self) {
        self.stop_renewer();
        if !self.key.is_empty() {
            if let Err(e) = self.remote.backend.delete(&self.key) {
                // The failure that brought us here was reported; this lock goes with its
                // lease, or at once when the next locker on this host sees we are gone.
                log::info!(
                    "remote {}: could not remove the lock {} ({e}); it expires with its lease",
                    self.remote.name,
                    self.key
                );
            }
        }
    }
}
