//! Restore targets and store repairs that must never follow a link: `restore --to` through a
//! symlinked path cannot reach into the store, a long target name still restores, setuid bits
//! and file capabilities survive capture + restore, and neither `recover` nor `doctor` acts
//! through a symlink planted where objects should be.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

fn mode_of(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// An object file of the store: (its fan-out directory, its path).
fn some_object(env: &Env) -> (PathBuf, PathBuf) {
    let name = env.objects().into_keys().next().expect("an object");
    let p = env.store.join("objects").join(&name);
    (p.parent().unwrap().to_path_buf(), p)
}

/// `setcap`/`getcap` (in /usr/sbin, which a non-root PATH may lack; scripts/setup-deps.sh
/// installs libcap2-bin).
fn cap_tool(name: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        let p = Path::new(dir).join(name);
        if p.exists() {
            return p;
        }
    }
    panic!("{name} not found: run scripts/setup-deps.sh (package libcap2-bin)");
}

#[test]
fn restore_through_a_symlinked_path_into_the_store_is_refused() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let objects_before = env.objects();
    // A path that does not name the store, but resolves into it.
    let link = env.path("innocent");
    symlink(&env.store, &link).unwrap();
    for to in [
        link.join("objects"),
        link.join("checkpoints"),
        link.join("new"),
    ] {
        let err = fails(
            2,
            ["restore", &env.s(), &id, "--to", &to.display().to_string()],
        );
        assert!(
            err.contains("overlaps the store"),
            "{}: {err}",
            to.display()
        );
    }
    // A parent of the store, through the link's parent's symlink, likewise.
    let up = env.path("up");
    symlink(env.tmp.path(), &up).unwrap();
    let to = up.join("store");
    let err = fails(
        2,
        ["restore", &env.s(), &id, "--to", &to.display().to_string()],
    );
    assert!(err.contains("overlaps the store"), "{err}");
    // Nothing in the store was moved aside or added.
    assert!(fs::symlink_metadata(env.store.join("objects"))
        .unwrap()
        .is_dir());
    assert_eq!(env.objects(), objects_before);
    let stray: Vec<String> = fs::read_dir(&env.store)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("ckptfs-"))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
    ok(["verify", &env.s()]);
    // The link itself is outside the store: restoring to it moves the link aside (not
    // followed) and the store stays whole.
    let r = env.restore(&id, &link);
    assert!(fs::symlink_metadata(&link).unwrap().is_dir());
    assert_trees_equal(env.ws(), &link);
    let aside = r["moved_aside"].as_str().unwrap();
    assert!(fs::symlink_metadata(aside).unwrap().is_symlink());
    ok(["verify", &env.s()]);
}

#[test]
fn a_target_with_a_long_name_restores() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let work = env.path("work");
    fs::create_dir(&work).unwrap();
    let dest = work.join("d".repeat(250));
    env.restore(&id, &dest);
    assert_trees_equal(env.ws(), &dest);
    // Again over the now non-empty target: it is moved aside under a name that fits too.
    let r = env.restore(&id, &dest);
    assert_trees_equal(env.ws(), &dest);
    let aside = PathBuf::from(r["moved_aside"].as_str().expect("moved aside"));
    assert!(aside.file_name().unwrap().len() <= 255);
    assert_trees_equal(env.ws(), &aside);
    let names: Vec<String> = fs::read_dir(&work)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|n| !n.starts_with(".ckptfs-restore")),
        "{names:?}"
    );
}

#[test]
fn setuid_bits_and_capabilities_survive_capture_and_restore() {
    let env = Env::new();
    let ws = env.ws();
    // A setuid program of another user's: chown first (it clears the bit), then chmod.
    write(&ws.join("suid"), b"#!/bin/sh\n");
    std::os::unix::fs::chown(ws.join("suid"), Some(1000), Some(1000)).unwrap();
    chmod(&ws.join("suid"), 0o4755);
    write(&ws.join("sgid-dir/f"), b"f");
    std::os::unix::fs::chown(ws.join("sgid-dir"), Some(1000), Some(1000)).unwrap();
    chmod(&ws.join("sgid-dir"), 0o2775);
    // A program with a file capability, owned by someone else too.
    write(&ws.join("capped"), b"\x7fELF not really");
    std::os::unix::fs::chown(ws.join("capped"), Some(1000), Some(1000)).unwrap();
    chmod(&ws.join("capped"), 0o755);
    let st = Command::new(cap_tool("setcap"))
        .arg("cap_net_raw+ep")
        .arg(ws.join("capped"))
        .status()
        .unwrap();
    assert!(st.success(), "setcap failed");
    let getcap = |p: &Path| {
        let o = Command::new(cap_tool("getcap")).arg(p).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(getcap(&ws.join("capped")).contains("cap_net_raw"));
    let id = env.capture_id(&[]);

    let dest = env.path("dest");
    env.restore(&id, &dest);
    assert_eq!(mode_of(&dest.join("suid")), 0o4755);
    assert_eq!(fs::metadata(dest.join("suid")).unwrap().uid(), 1000);
    assert_eq!(mode_of(&dest.join("sgid-dir")), 0o2775);
    let caps = getcap(&dest.join("capped"));
    assert!(caps.contains("cap_net_raw"), "capability lost: {caps:?}");
    assert_eq!(fs::metadata(dest.join("capped")).unwrap().uid(), 1000);
    assert_trees_equal(ws, &dest);
}

#[test]
fn recover_never_chmods_through_an_object_symlink() {
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&[]);
    let outside = env.path("outside-file");
    write(&outside, b"not the store's");
    chmod(&outside, 0o644);
    let (_, object) = some_object(&env);
    fs::remove_file(&object).unwrap();
    symlink(&outside, &object).unwrap();
    // A writable object beside it, which recover does fix.
    let (_, other) = {
        let names: Vec<String> = env.objects().into_keys().collect();
        let p = env.store.join("objects").join(names.last().unwrap());
        (p.parent().unwrap().to_path_buf(), p)
    };
    if other != object {
        chmod(&other, 0o644);
    }
    ok(["recover", &env.s()]);
    assert_eq!(
        mode_of(&outside),
        0o644,
        "recover chmodded through a symlink"
    );
    assert!(fs::symlink_metadata(&object).unwrap().is_symlink());
    if other != object {
        assert_eq!(mode_of(&other), 0o444);
    }
    // doctor names the symlink where the object should be.
    let o = run(["doctor", &env.s(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let name = object.display().to_string();
    let found = v["findings"].as_array().unwrap().iter().any(|f| {
        f["severity"] == "error"
            && f["check"] == "object"
            && f["subject"].as_str().is_some_and(|s| s == name)
            && f["detail"].as_str().is_some_and(|s| s.contains("symlink"))
    });
    assert!(found, "{v}");
}

#[test]
fn doctor_reports_a_symlinked_object_directory() {
    let env = Env::new();
    small_tree(env.ws());
    env.capture_id(&[]);
    let (fan, _) = some_object(&env);
    let elsewhere = env.path("elsewhere");
    fs::rename(&fan, &elsewhere).unwrap();
    symlink(&elsewhere, &fan).unwrap();
    let o = run(["doctor", &env.s(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_ne!(o.status.code(), Some(0), "{v}");
    let name = fan.display().to_string();
    let found = v["findings"].as_array().unwrap().iter().any(|f| {
        f["severity"] == "error"
            && f["subject"].as_str().is_some_and(|s| s == name)
            && f["detail"].as_str().is_some_and(|s| s.contains("symlink"))
    });
    assert!(found, "{v}");
    // recover and gc refuse to write to a store laid out so (one line naming the directory),
    // and neither chmods nor deletes the objects behind it.
    chmod(&elsewhere, 0o755);
    let inside: Vec<PathBuf> = fs::read_dir(&elsewhere)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for p in &inside {
        chmod(p, 0o644);
    }
    for cmd in ["recover", "gc"] {
        let err = fails(1, [cmd, &env.s()]);
        assert!(
            err.contains(&name) && err.contains("symlink"),
            "{cmd}: {err}"
        );
    }
    for p in &inside {
        assert_eq!(mode_of(p), 0o644, "{}", p.display());
        assert!(p.exists(), "{}", p.display());
    }
}

/// The entries of `dir` whose names contain `part`.
fn named(dir: &Path, part: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(part))
        .collect();
    v.sort();
    v
}

#[test]
fn recover_leaves_alone_what_was_swapped_in_for_the_staging_directory() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    // Find a crash point between moving DIR aside and swapping the staged tree in.
    for n in 1..=60u32 {
        let work = env.path(&format!("work-{n}"));
        let dest = work.join("dest");
        write(&dest.join("original.txt"), b"the user's data");
        let o = cmd([
            "restore",
            &env.s(),
            &id,
            "--to",
            &dest.display().to_string(),
        ])
        .env("CKPTFS_FAULT", format!("abort:{n}"))
        .output()
        .unwrap();
        assert!(!o.status.success(), "restore completed before the swap");
        let (staging, aside) = (
            named(&work, ".ckptfs-restore-"),
            named(&work, "ckptfs-aside"),
        );
        if dest.exists() || staging.len() != 1 || aside.len() != 1 {
            ok(["recover", &env.s()]);
            continue;
        }
        // Whoever can write DIR's parent moves the staging directory away and puts the
        // original DIR, aside, under its name; then a symlink to a victim at DIR.
        let victim = env.path("victim");
        write(&victim.join("keep"), b"victim");
        fs::rename(&staging[0], work.join("staging-moved")).unwrap();
        fs::rename(&aside[0], &staging[0]).unwrap();
        let rep = ok_json(["recover", &env.s()]);
        let actions = rep["actions"].to_string();
        assert!(actions.contains("left"), "{rep}");
        // The user's data was not removed as if it were the staging directory.
        assert_eq!(
            fs::read(staging[0].join("original.txt")).unwrap(),
            b"the user's data",
            "{rep}"
        );
        assert_eq!(fs::read(victim.join("keep")).unwrap(), b"victim");
        ok(["verify", &env.s()]);
        return;
    }
    panic!("no crash point fell between moving DIR aside and the swap");
}

#[test]
fn restore_lands_its_tree_at_dir_whatever_the_staging_name_holds() {
    let env = Env::new();
    for i in 0..200 {
        write(
            &env.ws().join(format!("d{i:03}/f")),
            format!("{i}").as_bytes(),
        );
    }
    let id = env.capture_id(&[]);
    // The parent of DIR is nobody's; it keeps replacing the staging directory's name with a
    // symlink to a victim directory, and moving the directory itself away.
    let parent = env.path("agent-owned");
    fs::create_dir(&parent).unwrap();
    std::os::unix::fs::chown(&parent, Some(65534), Some(65534)).unwrap();
    chmod(env.tmp.path(), 0o755);
    let victim = env.path("victim");
    fs::create_dir(&victim).unwrap();
    let script = format!(
        "import os, time\nos.chdir({parent:?})\nend = time.time() + 30\nwhile time.time() < end:\n    for n in os.listdir('.'):\n        if n.startswith('.ckptfs-restore') and not n.endswith('.moved'):\n            try:\n                os.rename(n, n + '.moved'); os.symlink({victim:?}, n)\n            except OSError:\n                pass\n"
    );
    let mut attacker = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .args(["/usr/bin/python3", "-c", &script])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let mut landed = 0;
    for i in 0..5 {
        let dest = parent.join(format!("dest{i}"));
        let o = run([
            "restore",
            &env.s(),
            &id,
            "--to",
            &dest.display().to_string(),
        ]);
        if o.status.success() {
            // What is at DIR is the restored tree, a real directory, not the attacker's link.
            assert!(fs::symlink_metadata(&dest).unwrap().is_dir());
            assert_trees_equal(env.ws(), &dest);
            landed += 1;
        }
        assert_eq!(fs::read_dir(&victim).unwrap().count(), 0);
    }
    let _ = attacker.kill();
    let _ = attacker.wait();
    eprintln!("{landed} of 5 restores completed under the race");
    assert!(landed > 0, "no restore completed under the race");
}

/// Runs `args` (a restore) aborted at each I/O step in turn until `found` says the state left
/// is the one wanted (a marker left, `recover` not yet run), and returns that step; every
/// other state is recovered. `None` when no step up to 80 leaves it.
fn abort_until(
    env: &Env,
    args: &[&str],
    found: impl Fn(&serde_json::Value) -> bool,
) -> Option<u64> {
    for n in 1..=80u64 {
        let o = run_fault(args, "abort", n);
        if o.status.success() {
            return None;
        }
        let marker = fs::read(env.store.join("run/RUNNING.json"))
            .ok()
            .and_then(|d| serde_json::from_slice::<serde_json::Value>(&d).ok());
        if marker.as_ref().is_some_and(|m| found(&m["phase"])) {
            return Some(n);
        }
        ok(["recover", &env.s()]);
    }
    None
}

/// `recover` after an in-place restore of `ws/sub/mid/deep` stopped with that directory set
/// aside reaches the target's parent beneath the root, never through a symlink: with `sub`
/// replaced by a symlink to a decoy that has a `mid`, nothing is written in the decoy and
/// `recover` fails (its marker stays) rather than taking the parent for gone; with `sub`
/// back, it puts the original back.
#[test]
fn recover_never_puts_a_restore_target_back_through_a_symlinked_parent() {
    let env = Env::new();
    write(&env.ws().join("sub/mid/deep/a.txt"), b"captured");
    let id = env.capture_id(&[]);
    write(&env.ws().join("sub/mid/deep/a.txt"), b"the agent's");
    let spec = format!("{id}:ws/sub/mid/deep");
    let (store, deep) = (env.s(), env.ws().join("sub/mid/deep"));
    let args = ["restore", &store, &spec, "--in-place"];
    let aside = |p: &serde_json::Value| {
        p["targets"][0]["aside_id"].is_object() && fs::symlink_metadata(&deep).is_err()
    };
    abort_until(&env, &args, aside).expect("no step left the target set aside");
    let decoy = env.path("decoy");
    fs::create_dir_all(decoy.join("mid")).unwrap();
    fs::rename(env.ws().join("sub"), env.path("sub-moved")).unwrap();
    symlink(&decoy, env.ws().join("sub")).unwrap();
    let r = run(["recover", &store]);
    assert!(
        !r.status.success(),
        "recover went on through a symlinked parent: {}",
        stdout(&r)
    );
    assert_eq!(
        fs::read_dir(decoy.join("mid")).unwrap().count(),
        0,
        "written through the symlink"
    );
    assert!(
        env.store.join("run/RUNNING.json").exists(),
        "the marker went"
    );
    fs::remove_file(env.ws().join("sub")).unwrap();
    fs::rename(env.path("sub-moved"), env.ws().join("sub")).unwrap();
    let rep = ok_json(["recover", &store]);
    assert!(
        rep["actions"].to_string().contains("put the original"),
        "{rep}"
    );
    assert_eq!(fs::read(deep.join("a.txt")).unwrap(), b"the agent's");
}

/// The target's parent gone after an interrupted restore (`--to`, and in place beneath a
/// root): `recover` says so and clears the marker (nothing is left there to roll back; an
/// in-place target's old tree is in `displaced/`).
#[test]
fn recover_after_a_restore_whose_target_parent_is_gone_says_so() {
    let env = Env::new();
    write(&env.ws().join("sub/mid/deep/a.txt"), b"captured");
    let id = env.capture_id(&[]);
    let work = env.path("work");
    let dest = work.join("dest");
    write(&dest.join("original.txt"), b"the user's data");
    let (store, to) = (env.s(), dest.display().to_string());
    let spec = format!("{id}:ws/sub/mid/deep");
    let cases: [(Vec<&str>, PathBuf); 2] = [
        (vec!["restore", &store, &id, "--to", &to], work.clone()),
        (
            vec!["restore", &store, &spec, "--in-place"],
            env.ws().join("sub"),
        ),
    ];
    for (args, gone) in cases {
        abort_until(&env, &args, |p| p["targets"][0]["staging_id"].is_object())
            .expect("no step left a staging directory");
        fs::remove_dir_all(&gone).unwrap();
        let rep = ok_json(["recover", &store]);
        assert!(
            rep["actions"].to_string().contains("is gone"),
            "{args:?}: {rep}"
        );
        assert!(!env.store.join("run/RUNNING.json").exists());
    }
}

/// A restore stopped once its marker names the staging directory but before it is made:
/// whatever someone puts at that name is not the restore's, so `recover` leaves it: a
/// directory of another owner (even empty), or one of ours that holds something.
#[test]
fn recover_leaves_alone_what_others_made_at_the_staging_name() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    let work = env.path("work");
    let dest = work.join("dest");
    write(&dest.join("original.txt"), b"the user's data");
    let (store, to) = (env.s(), dest.display().to_string());
    let args = ["restore", &store, &id, "--to", &to];
    let named_not_made = |p: &serde_json::Value| {
        p["targets"][0]["staging_id"].is_null()
            && p["targets"][0]["staging"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
    };
    let n = abort_until(&env, &args, named_not_made).expect("no step left the name only");
    ok(["recover", &store]);
    for (owner, content) in [(NOBODY, false), (0, true)] {
        assert!(!run_fault(args, "abort", n).status.success());
        let marker: serde_json::Value =
            serde_json::from_slice(&fs::read(env.store.join("run/RUNNING.json")).unwrap()).unwrap();
        let staging = PathBuf::from(marker["phase"]["targets"][0]["staging"].as_str().unwrap());
        fs::create_dir(&staging).unwrap();
        if content {
            write(&staging.join("theirs.txt"), b"theirs");
        }
        std::os::unix::fs::chown(&staging, Some(owner), Some(owner)).unwrap();
        let rep = ok_json(["recover", &store]);
        assert!(staging.is_dir(), "owner {owner}: removed: {rep}");
        assert!(rep["actions"].to_string().contains("left"), "{rep}");
        if content {
            assert_eq!(fs::read(staging.join("theirs.txt")).unwrap(), b"theirs");
        }
        fs::remove_dir_all(&staging).unwrap();
        assert_eq!(
            fs::read(dest.join("original.txt")).unwrap(),
            b"the user's data"
        );
    }
}
