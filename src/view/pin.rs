//! The workspaces' lower view keeps its pin to the checkpoints whose directory the kernel
//! holds, so gc can prune what no overlay uses while workspaces stay mounted.

use std::sync::Mutex;

use super::{lock, View};
use crate::error::Result;
use crate::id::ObjectId;
use crate::store::pin::{Pin, PinGuard};

/// A pin that lists the checkpoints the kernel holds a `checkpoints/<id>` directory of.
pub(super) struct HeldPin {
    guard: PinGuard,
    pin: Mutex<Pin>,
}

impl View {
    /// Makes this view's pin follow the kernel: a checkpoint is pinned from its first lookup
    /// until the kernel forgets its directory. For the workspaces' lower view, so gc can
    /// prune the checkpoints no overlay uses while workspaces are mounted, yet keeps the base
    /// of an overlay that `switch` or `umount` detached while a process still works in it:
    /// that overlay holds the lower root `checkpoints/<id>/<root>`, so the kernel holds its
    /// parent, and forgets it only once the overlay is gone and the entry evicted.
    pub fn keep_pin_to_held(&mut self, guard: PinGuard, pin: Pin) {
        self.held_pin = Some(HeldPin {
            guard,
            pin: Mutex::new(pin),
        });
    }

    /// Whether this is the workspaces' lower view (its pin follows what the kernel holds).
    pub fn is_lower(&self) -> bool {
        self.held_pin.is_some()
    }

    pub(super) fn hold_in_pin(&self, id: &ObjectId, held: bool) -> Result<()> {
        let Some(h) = &self.held_pin else {
            return Ok(());
        };
        let mut pin = lock(&h.pin);
        let at = pin.checkpoints.binary_search(id);
        match (at, held) {
            (Err(i), true) => pin.checkpoints.insert(i, *id),
            (Ok(i), false) => {
                pin.checkpoints.remove(i);
            }
            _ => return Ok(()),
        }
        h.guard.replace_unlocked(&pin)
    }
}
