//! The bare lower view (`/run/ckptfs/<id>/lower-bare`): a workspace over a checkpoint root
//! without any xattr stacks on it (it answers GETXATTR with ENOSYS, so overlayfs stops asking
//! the daemon about every file), and one over a root with an xattr anywhere (a file, a
//! directory, the root itself) stacks on the full lower view, which shows it. Both views go
//! with the last workspace, and gc keeps what the bare one holds.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

fn bare_view(store: &Path) -> PathBuf {
    store_mounts_dir(store).join("lower-bare")
}

/// The lower layer of the overlay mounted at `room` (its `lowerdir=` option).
/// The lower directory of the workspace root at `room`: the overlay's lowerdir (a checkpoint
/// directory of a lower view) and the root's name in it (the overlay is nested, see
/// docs/inodes.md: the root's name is the last component of `room`'s upper layer path).
fn lowerdir(room: &Path) -> String {
    let opts = mount_options(room).expect("a workspace is mounted there");
    let opt = |k: &str| {
        opts.split(',')
            .find_map(|o| o.strip_prefix(k))
            .unwrap_or_else(|| panic!("no {k} in {opts}"))
            .to_string()
    };
    let top = opt("upperdir=");
    let root = top
        .rsplit('/')
        .next()
        .unwrap()
        .strip_prefix(".top-")
        .unwrap();
    format!("{}/{root}", opt("lowerdir="))
}

fn on_bare_view(w: &Workspace) -> bool {
    lowerdir(&w.room).starts_with(&format!("{}/checkpoints/", s(&bare_view(&w.store))))
}

fn on_full_view(w: &Workspace) -> bool {
    lowerdir(&w.room).starts_with(&format!("{}/checkpoints/", s(&lower_view(&w.store))))
}

/// `getfattr -n NAME --only-values PATH`: the value, or `None` when the file has no such
/// attribute.
fn xattr(path: &Path, name: &str) -> Option<String> {
    let o = Command::new("getfattr")
        .args(["-n", name, "--only-values", "--absolute-names"])
        .arg(path)
        .output()
        .expect("getfattr runs");
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn set_xattr(path: &Path, name: &str, value: &str) {
    let o = Command::new("setfattr")
        .args(["-n", name, "-v", value])
        .arg(path)
        .output()
        .expect("setfattr runs");
    assert!(o.status.success(), "{}", describe_output("setfattr", &o));
}

fn populate(room: &Path) {
    fs::create_dir_all(room.join("src/deep")).unwrap();
    fs::write(room.join("notes.md"), "notes\n").unwrap();
    fs::write(room.join("src/a.py"), "print(1)\n".repeat(500)).unwrap();
    fs::write(room.join("src/deep/b.txt"), "b\n").unwrap();
}

fn git(room: &Path, args: &[&str]) -> String {
    let o = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=m",
        ])
        .args(args)
        .current_dir(room)
        .output()
        .expect("git runs");
    assert!(o.status.success(), "{}", describe_output("git", &o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn an_xattr_free_checkpoint_stacks_on_the_bare_view() {
    let w = Workspace::new(|room| {
        populate(room);
        git(room, &["init", "-q"]);
        git(room, &["add", "-A"]);
        git(room, &["commit", "-qm", "first"]);
    });
    assert!(mounted(&bare_view(&w.store)), "the bare view runs");
    assert!(mounted(&lower_view(&w.store)), "the full view runs");
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    let opts = mount_options(&bare_view(&w.store)).unwrap();
    assert!(
        !opts.contains("allow_other"),
        "private as the full view: {opts}"
    );
    // The bare view has no xattrs at all (the kernel stops asking: EOPNOTSUPP), the full
    // view answers each query (none here).
    let bare_root = PathBuf::from(lowerdir(&w.room));
    let e = xattr::get(bare_root.join("notes.md"), "user.x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    let rel = bare_root.strip_prefix(bare_view(&w.store)).unwrap();
    let full_root = lower_view(&w.store).join(rel);
    assert_eq!(
        xattr::get(full_root.join("notes.md"), "user.x").unwrap(),
        None
    );
    // Reads, git, copy-up (a write, a metadata-only chmod), all through the bare view.
    assert_eq!(fs::read_to_string(w.path("src/deep/b.txt")).unwrap(), "b\n");
    assert_eq!(git(&w.room, &["status", "--porcelain"]), "");
    fs::write(w.path("notes.md"), "notes\nmore\n").unwrap();
    chmod(&w.path("src/a.py"), 0o600);
    assert_eq!(
        git(&w.room, &["status", "--porcelain"]),
        " M notes.md\n",
        "a chmod to 0600 keeps the executable bit git records"
    );
    git(&w.room, &["commit", "-qam", "second"]);
    assert_eq!(git(&w.room, &["status", "--porcelain"]), "");
    assert_eq!(xattr(&w.path("notes.md"), "user.x"), None);
    let id = w.checkpoint("turn");
    assert_eq!(w.cat(&id, "notes.md"), b"notes\nmore\n");
    assert_eq!(w.cat(&id, "src/a.py"), "print(1)\n".repeat(500).as_bytes());
    // The turn's checkpoint has no xattr either: after the fold, still the bare view.
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    assert!(
        lowerdir(&w.room).contains(&id),
        "the fold's base is the turn"
    );
    assert_eq!(git(&w.room, &["status", "--porcelain"]), "");
    assert_eq!(
        fs::read_to_string(w.path("notes.md")).unwrap(),
        "notes\nmore\n"
    );
}

/// An xattr on a file, on a directory only, or on the root directory only: each keeps the
/// workspace on the full view, which shows it, also once a chmod has copied the file up.
#[test]
fn a_checkpoint_with_an_xattr_anywhere_stacks_on_the_full_view() {
    let on_file = Workspace::new(|room| {
        populate(room);
        set_xattr(&room.join("src/deep/b.txt"), "user.x", "file");
    });
    assert!(
        on_full_view(&on_file),
        "lowerdir {}",
        lowerdir(&on_file.room)
    );
    let b = on_file.path("src/deep/b.txt");
    assert_eq!(xattr(&b, "user.x").as_deref(), Some("file"));
    assert_eq!(xattr(&on_file.path("notes.md"), "user.x"), None);
    chmod(&b, 0o600);
    assert_eq!(
        xattr(&b, "user.x").as_deref(),
        Some("file"),
        "after copy-up"
    );
    assert_eq!(fs::read_to_string(&b).unwrap(), "b\n");

    let on_dir = Workspace::new(|room| {
        populate(room);
        set_xattr(&room.join("src/deep"), "user.d", "dir");
    });
    assert!(on_full_view(&on_dir), "lowerdir {}", lowerdir(&on_dir.room));
    assert_eq!(
        xattr(&on_dir.path("src/deep"), "user.d").as_deref(),
        Some("dir")
    );

    let on_root = Workspace::new(|room| {
        populate(room);
        set_xattr(room, "user.r", "root");
    });
    assert!(
        on_full_view(&on_root),
        "lowerdir {}",
        lowerdir(&on_root.room)
    );
    assert_eq!(xattr(&on_root.room, "user.r").as_deref(), Some("root"));
    // The bare view refuses such a root with an error the kernel does not cache as a
    // missing entry, and shows none of it.
    let c = checkpoints(on_root.store())[0].clone();
    let refused =
        fs::symlink_metadata(bare_view(&on_root.store).join(format!("checkpoints/{c}/ws")))
            .expect_err("the bare view refuses a root with xattrs");
    assert_eq!(refused.raw_os_error(), Some(libc::EMEDIUMTYPE), "{refused}");
}

/// The agent sets an xattr in a workspace on the bare view: the checkpoint records it, the
/// fold stacks the workspace on the full view, and the xattr shows through it (also after a
/// remount).
#[test]
fn an_xattr_set_in_the_workspace_moves_it_to_the_full_view_at_the_fold() {
    let w = Workspace::new(populate);
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    set_xattr(&w.path("src/a.py"), "user.x", "1");
    let r = w.checkpoint_json("xattr");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    assert!(on_full_view(&w), "lowerdir {}", lowerdir(&w.room));
    assert!(
        lowerdir(&w.room).contains(&id),
        "the fold's base is the new head"
    );
    assert_eq!(xattr(&w.path("src/a.py"), "user.x").as_deref(), Some("1"));
    assert_eq!(
        fs::read_to_string(w.path("src/a.py")).unwrap(),
        "print(1)\n".repeat(500)
    );
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert!(on_full_view(&w), "lowerdir {}", lowerdir(&w.room));
    assert_eq!(xattr(&w.path("src/a.py"), "user.x").as_deref(), Some("1"));
    // Removed again and checkpointed: back on the bare view.
    let o = Command::new("setfattr")
        .args(["-x", "user.x"])
        .arg(w.path("src/a.py"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", describe_output("setfattr -x", &o));
    let r = w.checkpoint_json("no xattr");
    assert_eq!(r["fold"]["folded"], true, "{r}");
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    assert_eq!(xattr(&w.path("src/a.py"), "user.x"), None);
}

#[test]
fn umount_leaves_neither_lower_view_mounted() {
    let w = Workspace::new(populate);
    assert!(mounted(&bare_view(&w.store)) && mounted(&lower_view(&w.store)));
    let status = ok(["status", w.store()]);
    assert!(status.contains(s(&bare_view(&w.store))), "{status}");
    // Doctor knows it (exit 0: not a stray mount, nothing to repair).
    let doc = ok(["doctor", w.store()]);
    assert!(doc.contains(s(&bare_view(&w.store))), "{doc}");
    ok(["umount", w.room()]);
    assert!(
        !mounted(&bare_view(&w.store)),
        "the bare view is left mounted"
    );
    assert!(
        !mounted(&lower_view(&w.store)),
        "the full view is left mounted"
    );
    assert!(!bare_view(&w.store).exists(), "its directory is removed");
    // And they come back with the next mount, both with its --cache-size.
    ok([
        "mount",
        w.store(),
        "--branch",
        "main",
        "--cache-size",
        "32M",
    ]);
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    assert_eq!(fs::read_to_string(w.path("notes.md")).unwrap(), "notes\n");
    for view in [bare_view(&w.store), lower_view(&w.store)] {
        assert_eq!(
            cache_arg(&w.store, &view).as_deref(),
            Some("33554432"),
            "{}",
            view.display()
        );
    }
}

/// The `--cache-size` on the command line of the daemon serving the view mounted at `view`.
fn cache_arg(store: &Path, view: &Path) -> Option<String> {
    let views = ok_json(["status", s(store), "--json"]);
    let pid = views
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["mountpoint"] == s(view) && v["kind"] != "workspace")
        .and_then(|v| v["state"]["pid"].as_u64())
        .unwrap_or_else(|| panic!("no view at {} in {views}", view.display()));
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let i = args.iter().position(|a| a == "--cache-size")?;
    args.get(i + 1).cloned()
}

/// Checkpoint ids each live pin of a bare view lists.
fn bare_pins(store: &Path) -> Vec<Vec<String>> {
    live_pins(store, "lower-bare-")
}

/// A process inside a workspace that `umount` detached keeps reading its base through the
/// bare view; the bare view's pin keeps that base through gc until the process leaves.
#[test]
fn gc_keeps_the_base_a_detached_overlay_on_the_bare_view_reads() {
    let w = Workspace::new(populate);
    assert!(on_bare_view(&w), "lowerdir {}", lowerdir(&w.room));
    let first = checkpoints(w.store())[0].clone();
    assert_eq!(bare_pins(&w.store), vec![vec![first.clone()]]);
    let inside = KillOnDrop(
        Command::new("sleep")
            .arg("600")
            .current_dir(&w.room)
            .spawn()
            .unwrap(),
    );
    let pid = inside.0.id();
    fs::write(w.path("turn.txt"), "turn\n").unwrap();
    let head = w.checkpoint("turn");
    ok(["umount", w.room()]);
    ok(["mount", w.store(), "--branch", "main"]);
    assert!(lowerdir(&w.room).contains(&head), "{}", lowerdir(&w.room));
    // The detached bare view (still serving the old overlay) holds the first, the new one
    // the head.
    let pins = bare_pins(&w.store);
    assert!(pins.iter().any(|p| p.contains(&first)), "{pins:?}");
    assert!(pins.iter().any(|p| p.contains(&head)), "{pins:?}");
    let gc = ok(["gc", w.store(), "--keep-last", "1", "--json"]);
    assert!(checkpoints(w.store()).contains(&first), "{gc}");
    let old = format!("/proc/{pid}/cwd/src/a.py");
    assert_eq!(fs::read_to_string(&old).unwrap(), "print(1)\n".repeat(500));
    drop(inside);
    eventually(
        "the first checkpoint is pruned once nobody reads it",
        || {
            ok(["gc", w.store(), "--keep-last", "1"]);
            !checkpoints(w.store()).contains(&first)
        },
    );
    assert_eq!(fs::read_to_string(w.path("turn.txt")).unwrap(), "turn\n");
    assert!(ok(["verify", w.store()]).contains("0 findings"));
}
