//! Every option `mount --branch` accepts has the effect its help promises, or is refused
//! naming it (docs/workspaces.md): `--cache-size` sizes the store's lower view when it
//! starts; `--file-cache-size`, `--foreground` and `--mount-source` (read-only views only)
//! and `--relocate` without `--at` are usage errors that mount nothing.

use crate::support::*;

use std::fs;
use std::path::Path;

fn populate(room: &Path) {
    write(&room.join("a.txt"), b"a\n");
}

/// The `--cache-size` on the command line of the daemon serving the store's lower view.
fn lower_view_cache_arg(store: &Path) -> Option<String> {
    let views = ok_json(["status", s(store), "--json"]);
    let lower = lower_view(store);
    let pid = views
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["mountpoint"] == s(&lower) && v["kind"] != "workspace")
        .and_then(|v| v["state"]["pid"].as_u64().or_else(|| v["pid"].as_u64()))
        .unwrap_or_else(|| panic!("no lower view in {views}"));
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let i = args.iter().position(|a| a == "--cache-size")?;
    args.get(i + 1).cloned()
}

#[test]
fn cache_size_sizes_the_lower_view_a_workspace_mount_starts() {
    let w = Workspace::new(populate);
    assert_eq!(lower_view_cache_arg(&w.store), None, "default size");
    ok(["umount", w.room()]);
    assert!(!mounted(&lower_view(&w.store)));
    ok(["mount", w.store(), "--branch", "main", "--cache-size", "1G"]);
    assert_eq!(
        lower_view_cache_arg(&w.store).as_deref(),
        Some("1073741824")
    );
    assert_eq!(fs::read_to_string(w.path("a.txt")).unwrap(), "a\n");
    // The view is shared: a second workspace asking another size is refused, naming it.
    ok(["fork", w.store(), "main", "--name", "other"]);
    let elsewhere = w.tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let at = s(&elsewhere);
    let args = |size: &'static str| {
        vec![
            "mount",
            w.store(),
            "--branch",
            "other",
            "--at",
            at,
            "--relocate",
            "--cache-size",
            size,
        ]
    };
    let err = fails(1, args("2G"));
    assert!(
        err.contains("--cache-size") && err.contains("1.0 GiB"),
        "{err}"
    );
    assert!(!mounted(&elsewhere));
    // The same size is no conflict.
    ok(args("1G"));
    assert_eq!(fs::read_to_string(elsewhere.join("a.txt")).unwrap(), "a\n");
    ok(["umount", at]);
}

#[test]
fn options_a_workspace_cannot_honour_are_refused_naming_them() {
    let w = Workspace::new(populate);
    ok(["umount", w.room()]);
    for (args, name) in [
        (vec!["--file-cache-size", "1G"], "--file-cache-size"),
        (vec!["--foreground"], "--foreground"),
        (vec!["--mount-source", "x#browse"], "--mount-source"),
        (vec!["--relocate"], "--relocate"),
    ] {
        let mut all = vec!["mount", w.store(), "--branch", "main"];
        all.extend(args);
        let err = fails(2, &all);
        assert!(err.contains(name), "{all:?}: {err}");
        assert!(!mounted(&w.room), "{all:?} mounted the workspace");
        assert!(
            !mounted(&lower_view(&w.store)),
            "{all:?} started the lower view"
        );
    }
}
