//! Pins: what a long-running process (a mount, a browse view, a workspace) can reach, so `gc`
//! never removes it. A pin is `run/pins/<owner>-<pid>.json`, created and updated under the
//! exclusive store lock (so it cannot slip between gc's plan and apply), removed on drop. Pins
//! whose process is gone are ignored (and cleaned by `recover`/`doctor`).

use std::fs;
use std::io;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fs::atomic;
use crate::id::ObjectId;
use crate::store::lock::pid_alive;
use crate::store::Store;

/// Contents of a pin file.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Pin {
    pub pid: u32,
    pub owner: String,
    /// Everything in the store is reachable (a browse view).
    pub all: bool,
    pub checkpoints: Vec<ObjectId>,
    pub branches: Vec<String>,
}

/// A registered pin; removed when dropped.
pub struct PinGuard {
    path: PathBuf,
}

impl PinGuard {
    /// Replaces the pin's contents (takes the store lock).
    pub fn update(&self, store: &Store, pin: &Pin) -> Result<()> {
        let _lock = store.lock_exclusive()?;
        write_pin(&self.path, pin)
    }

    /// Replaces the pin's contents without the store lock and without a sync: for the
    /// workspaces' lower view, which updates its pin while it answers the kernel, and so
    /// must never wait for the lock: the `mount` or `switch` that makes the kernel look a
    /// checkpoint up holds it. That is also why this cannot slip between gc's plan and apply:
    /// a checkpoint only becomes newly reachable there through such a command. The file only
    /// describes a live process, which a reboot ends (as everything in `run/`).
    pub fn replace_unlocked(&self, pin: &Pin) -> Result<()> {
        let data = serde_json::to_vec_pretty(pin)
            .map_err(|e| Error::Invalid(format!("encoding pin: {e}")))?;
        atomic::write_atomic_replace_volatile(&self.path, &data, 0o600)
    }
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!("could not remove pin {}: {e}", self.path.display());
            }
        }
    }
}

fn write_pin(path: &std::path::Path, pin: &Pin) -> Result<()> {
    let data =
        serde_json::to_vec_pretty(pin).map_err(|e| Error::Invalid(format!("encoding pin: {e}")))?;
    atomic::write_atomic_replace(path, &data, 0o600)
}

impl Store {
    pub fn pins_dir(&self) -> PathBuf {
        self.run_dir().join("pins")
    }

    /// Registers a pin for this process. `check` runs under the same lock after the pin is
    /// written (use it to confirm the pinned checkpoints still exist).
    pub fn pin(
        &self,
        owner: &str,
        mut pin: Pin,
        check: impl FnOnce() -> Result<()>,
    ) -> Result<PinGuard> {
        crate::store::refs::check_name("pin owner", owner)?;
        pin.pid = std::process::id();
        pin.owner = owner.to_string();
        let dir = self.pins_dir();
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let path = dir.join(format!("{owner}-{}.json", pin.pid));
        let _lock = self.lock_exclusive()?;
        write_pin(&path, &pin)?;
        let guard = PinGuard { path };
        check()?;
        Ok(guard)
    }

    /// Pins of live processes. Callers that delete hold the exclusive lock.
    pub fn live_pins(&self) -> Result<Vec<Pin>> {
        let mut out = Vec::new();
        for (p, _) in crate::fs::json_records(&self.pins_dir())? {
            let data = match fs::read(&p) {
                Ok(d) => d,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io(&p, e)),
            };
            let pin: Pin = serde_json::from_slice(&data)
                .map_err(|e| Error::Corrupt(format!("{}: {e}", p.display())))?;
            if pid_alive(pin.pid) {
                out.push(pin);
            }
        }
        Ok(out)
    }
}
