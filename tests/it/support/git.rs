//! Real `git` in a test's tree: a fixed identity, no background gc or maintenance.

use std::path::Path;
use std::process::Command;

/// `git -C DIR -c KEY=VALUE... ARGS` with `config` added to the fixed settings; panics with
/// git's stderr on failure. Returns stdout.
pub fn git_with(dir: &Path, config: &[&str], args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    for c in [
        "user.name=t",
        "user.email=t@t",
        "gc.auto=0",
        "maintenance.auto=false",
    ]
    .iter()
    .chain(config)
    {
        cmd.args(["-c", c]);
    }
    let out = cmd.arg("-C").arg(dir).args(args).output().expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`git_with`] no more settings.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, &[], args)
}
