//! CLI of `label`: `label STORE CHECKPOINT NAME` creates a label (see `store::run_label`),
//! `label delete STORE NAME` deletes one.
//!
//! One command with an optional subcommand (clap's `args_conflicts_with_subcommands`), rather
//! than a separate `unlabel`: both acts on labels are found under `ckptfs label --help`, and
//! the old positional form keeps working. The one ambiguity is a store directory literally
//! named `delete` given as a relative path: write it `./delete`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use ckptfs::store::refs::LabelDeletion;
use ckptfs::{Error, Result};

use super::{print_json, store, JsonFlag};

/// `label` arguments: create (positional) or a subcommand.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct LabelCommand {
    #[command(subcommand)]
    pub action: Option<LabelAction>,
    /// The store directory.
    #[arg(required = true)]
    pub store: Option<PathBuf>,
    /// Checkpoint id (or unique prefix), label or branch to label.
    #[arg(required = true)]
    pub checkpoint: Option<String>,
    /// The new label's name (must not exist yet).
    #[arg(required = true)]
    pub name: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum LabelAction {
    /// Delete a label (audited; the name can then be created again).
    ///
    /// An explicit act, recorded in audit.jsonl with the label, the checkpoint it named, the
    /// user and the time. The checkpoint stays, and `forget` no
    /// longer refuses it for this label. gc's retention policy then applies to it, unless it
    /// was labelled by `capture --label`: its immutable record keeps the name, and gc keeps
    /// such records (forget them explicitly). Labels
    /// are never moved or overwritten: to give the name to another checkpoint, delete it and
    /// create it again.
    ///
    /// Example: ckptfs label delete /var/lib/ckpt leaked-key
    Delete(LabelDeleteArgs),
}

/// `label delete` arguments.
#[derive(Args, Debug)]
pub struct LabelDeleteArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The label to delete.
    pub name: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs label ...`.
pub fn run_label(c: LabelCommand) -> Result<i32> {
    match c.action {
        Some(LabelAction::Delete(a)) => run_label_delete(a),
        None => match (c.store, c.checkpoint, c.name) {
            (Some(store), Some(checkpoint), Some(name)) => store::run_label(store::LabelArgs {
                store,
                checkpoint,
                name,
            }),
            _ => Err(Error::Usage(
                "label needs STORE CHECKPOINT NAME (or: label delete STORE NAME)".into(),
            )),
        },
    }
}

/// Who asks, for the audit line: the uid, and the login name behind sudo when there is one.
fn who() -> serde_json::Value {
    let uid = nix::unistd::getuid().as_raw();
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .ok();
    serde_json::json!({"uid": uid, "user": user})
}

/// `ckptfs label delete`.
fn run_label_delete(a: LabelDeleteArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    ckptfs::store::refs::check_name("label", &a.name)?;
    // Looked up first so the audit line's args name the checkpoint (the lock is taken again
    // by `mutate`; the deletion reports what it found under the lock).
    let named = match s.read_label(&a.name) {
        Ok(None) => return Err(Error::NotFound(format!("label {}", a.name))),
        Ok(Some(id)) => Some(id),
        Err(Error::Corrupt(_)) => None,
        Err(e) => return Err(e),
    };
    let args = serde_json::json!({"label": a.name, "checkpoint": named, "by": who()});
    let done = s.mutate("label-delete", args, |_| {
        let d = s.delete_label(&a.name)?;
        let summary = match &d {
            LabelDeletion::Missing => serde_json::json!({"deleted": false}),
            LabelDeletion::Deleted(id) => serde_json::json!({"deleted": true, "checkpoint": id}),
            LabelDeletion::DeletedUnreadable(m) => {
                serde_json::json!({"deleted": true, "unreadable": m})
            }
        };
        Ok((d, summary))
    })?;
    let checkpoint = match &done {
        LabelDeletion::Missing => return Err(Error::NotFound(format!("label {}", a.name))),
        LabelDeletion::Deleted(id) => Some(*id),
        LabelDeletion::DeletedUnreadable(_) => None,
    };
    if a.json.json {
        print_json(&serde_json::json!({"label": a.name, "checkpoint": checkpoint}))?;
    } else {
        match checkpoint {
            Some(id) => println!("deleted label {} (was -> {})", a.name, id.short()),
            None => println!("deleted label {} (its file did not read)", a.name),
        }
    }
    Ok(0)
}
