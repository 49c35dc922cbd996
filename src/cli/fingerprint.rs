//! CLI of `ckptfs fingerprint`: print this machine's runtime fingerprint, compare it with a
//! branch's, or set what the store declares makes up its runtime (`ckptfs::runner::fingerprint`).

use std::path::PathBuf;

use clap::Args;

use ckptfs::runner::fingerprint;
use ckptfs::store::checkpoint::RuntimeDecl;
use ckptfs::{Result, Store};

use super::{print_json, JsonFlag};

/// `fingerprint` arguments.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    ckptfs fingerprint STORE                                  this machine's fingerprint\n  \
    ckptfs fingerprint STORE --branch main                    ... compared with main's\n  \
    ckptfs fingerprint STORE --file agent --command 'python3 --version'   declare them\n  \
    ckptfs fingerprint STORE --clear                          platform only again")]
pub struct FingerprintArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Compare with the fingerprint this branch records (that of the newest checkpoint on
    /// its line that has one): prints each field that differs; exit 1 when any does.
    #[arg(long, short)]
    pub branch: Option<String>,
    /// Declare a file whose SHA-256 is part of the runtime: an absolute path, or a command
    /// name looked up in PATH now (`python3`) and stored as its absolute path. Only a regular
    /// file is hashed (a FIFO or device records `unreadable`). Repeatable. With --file or
    /// --command the declaration in STORE.json becomes exactly what is given (audited): the
    /// store's, or with --branch that branch's own, which it then uses instead of the store's.
    #[arg(long = "file", value_name = "PATH|NAME")]
    pub files: Vec<String>,
    /// Declare a command line whose output is part of the runtime, e.g. 'python3 --version'.
    /// Its program is looked up in PATH now and stored as an absolute path (refused if others
    /// can write it or its directory, or it lies in a root or a ckptfs mount); a line with
    /// quotes or shell syntax runs in /bin/sh. It runs in `/`, with stdin empty, only
    /// PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, LC_ALL=C and HOME=/
    /// in its environment, 10 s at most. Only its stdout is recorded (a warning on stderr is
    /// not the runtime; for a tool that prints its version on stderr, declare
    /// 'sh -c "TOOL --version 2>&1"'). Repeatable.
    #[arg(long = "command", value_name = "CMDLINE")]
    pub commands: Vec<String>,
    /// Remove the declaration: the fingerprint is the platform alone (OS, kernel release,
    /// architecture, C library). With --branch: the branch's own, so it uses the store's.
    #[arg(long, conflicts_with_all = ["files", "commands"])]
    pub clear: bool,
    #[command(flatten)]
    pub json: JsonFlag,
}

/// `ckptfs fingerprint`.
pub fn run_fingerprint(a: FingerprintArgs) -> Result<i32> {
    let mut s = ckptfs::remote::open_store(&a.store)?;
    // Comparing with a branch needs one (declaring for one is checked by `declare`).
    if let Some(b) = &a.branch {
        if s.read_branch(b)?.is_none() {
            return Err(ckptfs::Error::Usage(format!(
                "--branch {b}: no such branch (`ckptfs branch list {}`)",
                a.store.display()
            )));
        }
    }
    if a.clear || !a.files.is_empty() || !a.commands.is_empty() {
        let decl = RuntimeDecl {
            files: a.files.clone(),
            commands: a.commands.clone(),
            branches: Default::default(),
        };
        fingerprint::declare(&s, a.branch.as_deref(), &decl)?;
        s = ckptfs::remote::open_store(&a.store)?;
        if !a.json.json {
            println!("runtime declaration of {} set", s.root().display());
        }
    }
    let now = fingerprint::current(&s, a.branch.as_deref());
    let recorded = match &a.branch {
        Some(b) => fingerprint::recorded(&s, b)?,
        None => None,
    };
    let differences = recorded
        .as_ref()
        .map(|(_, r)| fingerprint::differences(r, &now))
        .unwrap_or_default();
    if a.json.json {
        print_json(&serde_json::json!({
            "declared": fingerprint::declaration(&s, a.branch.as_deref()),
            "fingerprint": now,
            "branch": a.branch,
            "recorded_in": recorded.as_ref().map(|(id, _)| *id),
            "recorded": recorded.as_ref().map(|(_, r)| r),
            "differences": differences,
        }))?;
    } else {
        for (k, v) in now.fields() {
            println!("{k} = {v}");
        }
        if let Some(b) = &a.branch {
            match &recorded {
                None => println!("branch {b} records no fingerprint (no turn has run on it)"),
                Some((id, _)) if differences.is_empty() => println!(
                    "branch {b} (fingerprint recorded in {}): same runtime",
                    id.short()
                ),
                Some((id, _)) => {
                    println!(
                        "branch {b} (fingerprint recorded in {}) differs:",
                        id.short()
                    );
                    for d in &differences {
                        println!("  {}", d.describe());
                    }
                }
            }
        }
    }
    Ok(if differences.is_empty() { 0 } else { 1 })
}

/// The check `mount --branch` and `exec` make before resuming `branch`: refuses a changed
/// runtime unless `accept`; says on stderr what was accepted.
pub fn check_resume(s: &Store, branch: &str, what: &str, accept: bool) -> Result<()> {
    let c = fingerprint::check_branch(s, branch, what, accept)?;
    if c.accepted {
        for d in &c.differences {
            eprintln!("ckptfs: runtime change accepted: {}", d.describe());
        }
    }
    Ok(())
}
