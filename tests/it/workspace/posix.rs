//! POSIX conformance of a live workspace: pjdfstest on a ckptfs workspace mount and, in the
//! same run, on fuse-overlayfs (the peer). The workspace must pass at least as many tests.

use std::path::Path;
use std::process::Command;

use crate::support::*;

fn pjdfstest() -> String {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cargo_bin = format!("{home}/.cargo/bin/pjdfstest");
    if Path::new(&cargo_bin).exists() {
        cargo_bin
    } else {
        "pjdfstest".into()
    }
}

/// Runs pjdfstest in `dir`; returns (passed, failed names).
fn run_suite(dir: &Path) -> (usize, Vec<String>) {
    let conf = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pjdfstest.toml");
    let o = Command::new(pjdfstest())
        .args(["-c", conf, "-p"])
        .arg(dir)
        .current_dir(dir)
        .output()
        .expect("pjdfstest is installed (cargo install pjdfstest; scripts/test.sh does it)");
    let out = String::from_utf8_lossy(&o.stdout);
    let passed = out
        .lines()
        .filter(|l| l.trim_end().ends_with(" ok"))
        .count();
    let failed = out
        .lines()
        .filter(|l| l.trim_end().ends_with("FAILED"))
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    (passed, failed)
}

#[test]
fn pjdfstest_passes_at_least_as_much_as_fuse_overlayfs() {
    let w = Workspace::new(|room| std::fs::write(room.join("seed"), "seed").unwrap());
    let (ours, our_failed) = run_suite(&w.room);

    let peer = w.tmp.path().join("peer");
    for d in ["lower", "upper", "work", "mnt"] {
        std::fs::create_dir_all(peer.join(d)).unwrap();
    }
    sh(&format!(
        "fuse-overlayfs -o lowerdir={p}/lower,upperdir={p}/upper,workdir={p}/work {p}/mnt",
        p = peer.display()
    ));
    let (theirs, their_failed) = run_suite(&peer.join("mnt"));
    let _ = Command::new("umount")
        .arg("-l")
        .arg(peer.join("mnt"))
        .status();

    eprintln!("pjdfstest passed: ckptfs workspace {ours}, fuse-overlayfs {theirs}");
    eprintln!("ckptfs failures: {our_failed:?}");
    eprintln!("fuse-overlayfs failures: {their_failed:?}");
    assert!(
        ours > 250,
        "pjdfstest barely ran on the workspace ({ours} passed)"
    );
    assert!(
        ours >= theirs,
        "ckptfs workspace passed {ours} pjdfstest cases, fuse-overlayfs {theirs}; ours failed: {our_failed:?}"
    );
}
