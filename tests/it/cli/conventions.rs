//! The command line's conventions (docs/cli.md): where the store comes from when STORE is
//! left out (`--store`, `CKPTFS_STORE`, the mounted workspace or view around the current
//! directory) and in what order; STORE first everywhere, with the old forms kept (`unarchive
//! FILE STORE`, `fork --name`, `archive`/`unarchive` beside `export`/`import`); local time with
//! its offset in text, UTC in JSON; tables whose columns fit their content; `ls` as `ls -l`.

use std::fs;
use std::path::Path;

use crate::support::*;
use serde_json::Value;

const SEC: i64 = 1_000_000_000;
/// 2026-12-01T08:12:03Z (winter: Paris +01:00, New York -05:00).
const WINTER: i64 = 1_796_112_723 * SEC;
/// 2026-07-01T10:00:00Z (summer: Paris +02:00, New York -04:00).
const SUMMER: i64 = 1_782_900_000 * SEC;

const LONG_BRANCH: &str = "a-branch-name-of-exactly-forty-characters";
const LONG_LABEL: &str = "a-label-name-of-exactly-forty-characters";

/// A store with one capture of a small tree whose message names the store.
fn store_named(name: &str) -> (Env, String) {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&["-m", name]);
    (env, id)
}

/// The messages `log --json` lists, run in `dir` with `env` and `args` after `log`.
fn log_messages(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Vec<String> {
    let mut a = vec!["log"];
    a.extend_from_slice(args);
    a.push("--json");
    let v: Value = serde_json::from_str(&ok_in(dir, env, &a)).expect("log --json");
    v.as_array()
        .expect("array")
        .iter()
        .map(|r| r["message"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn store_comes_from_the_argument_then_flag_then_env() {
    let (one, _) = store_named("one");
    let (two, _) = store_named("two");
    let (three, _) = store_named("three");
    let here = tempdir();
    let d = here.path();
    let env3 = [("CKPTFS_STORE", &*three.s())];

    assert_eq!(log_messages(d, &env3, &[]), ["three"], "CKPTFS_STORE");
    assert_eq!(
        log_messages(d, &[], &["--store", &two.s()]),
        ["two"],
        "--store"
    );
    assert_eq!(
        log_messages(d, &[], &[&format!("--store={}", two.s())]),
        ["two"],
        "--store=PATH"
    );
    // Before the subcommand too: it is a global option.
    let o = ok_in(d, &[], &["--store", &two.s(), "log", "--json"]);
    assert!(o.contains("\"two\""), "{o}");
    // Precedence: the STORE argument, then --store, then CKPTFS_STORE.
    assert_eq!(
        log_messages(d, &env3, &["--store", &two.s()]),
        ["two"],
        "--store beats CKPTFS_STORE"
    );
    assert_eq!(
        log_messages(d, &env3, &[&one.s(), "--store", &two.s()]),
        ["one"],
        "STORE beats both"
    );
    // A relative STORE, as scripts write it.
    let rel = one.store.file_name().unwrap().to_str().unwrap();
    assert_eq!(log_messages(one.tmp.path(), &env3, &[rel]), ["one"]);

    // Commands with more arguments: the first is taken as STORE only if it is a store.
    let id3 = three.checkpoints()[0].clone();
    let show = ok_in(d, &env3, &["show", &id3[..12]]);
    assert!(show.contains(&id3), "{show}");
    let show = ok_in(d, &env3, &["show", &three.s(), &id3[..12]]);
    assert!(show.contains(&id3), "{show}");
    ok_in(d, &env3, &["label", "main", "from-env"]);
    let labelled = ok_in(d, &[], &["show", &three.s(), "from-env"]);
    assert!(labelled.contains(&id3), "{labelled}");
    ok_in(d, &env3, &["label", "delete", "from-env"]);
    ok_in(d, &env3, &["branch", "list"]);
    let listing = ok_in(d, &env3, &["ls", "main:ws"]);
    assert!(listing.contains("a.txt"), "{listing}");
    ok_in(d, &env3, &["verify"]);
    ok_in(d, &env3, &["doctor"]);
}

#[test]
fn a_first_argument_that_is_no_store_is_not_taken_for_one() {
    let (env, id) = store_named("real");
    let here = tempdir();
    let d = here.path();
    // A directory named like the branch, right where the command runs: not a store, so it
    // is the checkpoint argument and the store comes from CKPTFS_STORE.
    fs::create_dir(d.join("main")).unwrap();
    let by_env = [("CKPTFS_STORE", &*env.s())];
    let show = ok_in(d, &by_env, &["show", "main"]);
    assert!(show.contains(&id), "{show}");
    // A directory that looks like a store but holds no STORE.json.
    fs::create_dir(d.join("fake")).unwrap();
    fs::write(d.join("fake/README"), "not a store").unwrap();
    let err = fails_in(d, &by_env, 1, &["show", "fake"]);
    assert!(
        err.contains("fake") && !err.contains("not a ckptfs store"),
        "{err}"
    );
    // With no other store, the argument stays STORE and gets the error it always got.
    let err = fails_in(d, &[], 1, &["log", "fake"]);
    assert!(err.contains("not a ckptfs store"), "{err}");
    let err = fails_in(d, &[], 1, &["log", "/no/such/store"]);
    assert!(
        err.contains("/no/such/store") && err.contains("not found"),
        "{err}"
    );
    // `init` never borrows one: it makes its STORE.
    let new = d.join("new-store");
    ok_in(
        d,
        &by_env,
        &[
            "init",
            s(&new),
            "--root",
            &format!("x={}", d.join("x").display()),
        ],
    );
    assert!(new.join("STORE.json").is_file());
}

#[test]
fn no_store_anywhere_is_one_line_naming_every_way() {
    let here = tempdir();
    for args in [
        vec!["log"],
        vec!["log", "-n", "3"],
        vec!["branch", "list"],
        vec!["label", "delete"],
        vec!["gc", "--dry-run"],
        vec!["checkpoint", "-m", "x"],
        vec!["status"],
    ] {
        let err = fails_in(here.path(), &[], 2, &args);
        for w in ["STORE", "--store", "CKPTFS_STORE", "workspace"] {
            assert!(err.contains(w), "{args:?}: {err} lacks {w}");
        }
    }
    // An empty CKPTFS_STORE is no store.
    let err = fails_in(here.path(), &[("CKPTFS_STORE", "")], 2, &["log"]);
    assert!(err.contains("CKPTFS_STORE"), "{err}");
    // Help and version need none.
    ok_in(here.path(), &[], &["log", "--help"]);
    ok_in(here.path(), &[], &["help", "log"]);
    ok_in(here.path(), &[], &["--version"]);
}

#[test]
fn every_store_command_says_so_in_its_help() {
    let store_note = "STORE may be left out";
    for cmd in [
        vec!["capture"],
        vec!["restore"],
        vec!["recover"],
        vec!["log"],
        vec!["show"],
        vec!["ls"],
        vec!["cat"],
        vec!["diff"],
        vec!["label"],
        vec!["label", "delete"],
        vec!["forget"],
        vec!["branch", "list"],
        vec!["branch", "archive"],
        vec!["branch", "unarchive"],
        vec!["branch", "delete"],
        vec!["fork"],
        vec!["verify"],
        vec!["gc"],
        vec!["export"],
        vec!["import"],
        vec!["doctor"],
        vec!["mount"],
        vec!["browse"],
        vec!["stats"],
        vec!["find"],
        vec!["fingerprint"],
    ] {
        let mut args = cmd.clone();
        args.push("--help");
        let help = ok(&args);
        assert!(help.contains(store_note), "{cmd:?}: {help}");
        assert!(
            help.contains("CKPTFS_STORE") && help.contains("--store"),
            "{cmd:?}"
        );
    }
    for cmd in ["checkpoint", "exec", "status", "turn"] {
        let help = ok([cmd, "--help"]);
        assert!(
            help.contains("MOUNTPOINT|STORE may be left out") && help.contains("CKPTFS_STORE"),
            "{cmd}: {help}"
        );
    }
    assert!(!ok(["init", "--help"]).contains(store_note));
    let top = ok(["--help"]);
    assert!(
        top.contains("--store") && top.contains("CKPTFS_STORE"),
        "{top}"
    );
}

#[test]
fn inside_a_mounted_workspace_the_store_is_found() {
    let w = Workspace::new(|room| {
        fs::create_dir_all(room.join("sub/deeper")).unwrap();
        fs::write(room.join("sub/f.txt"), "one").unwrap();
    });
    let deep = w.path("sub/deeper");
    // Every command finds the store from the room or below, with no argument.
    let msgs = log_messages(&deep, &[], &[]);
    assert_eq!(msgs, ["initial"]);
    let branches = ok_in(&deep, &[], &["branch", "list"]);
    assert!(branches.contains("main"), "{branches}");
    fs::write(w.path("sub/f.txt"), "two").unwrap();
    let short = ok_in(&deep, &[], &["status", "--short"]);
    assert_eq!(short, "M ws/sub/f.txt\n");
    let c: Value = serde_json::from_str(&ok_in(
        &deep,
        &[],
        &["checkpoint", "-m", "from inside", "--json"],
    ))
    .unwrap();
    let id = c["id"].as_str().expect("id").to_string();
    assert_eq!(w.cat(&id, "sub/f.txt"), b"two");
    assert_eq!(log_messages(w.room.as_path(), &[], &[])[0], "from inside");
    let show = ok_in(&deep, &[], &["show", "main"]);
    assert!(show.contains(&id), "{show}");
    // stats and find too.
    let v: Value = serde_json::from_str(&ok_in(&deep, &[], &["stats", "--json"])).unwrap();
    assert_eq!(v["store"]["checkpoints"], 2, "{v}");
    let v: Value = serde_json::from_str(&ok_in(&deep, &[], &["find", "f.txt", "--json"])).unwrap();
    assert_eq!(v["paths"][0]["path"], "ws/sub/f.txt", "{v}");
    // `exec` joins the workspace it runs in.
    let out = ok_in(&deep, &[], &["exec", "--as-root", "--", "cat", "../f.txt"]);
    assert_eq!(out, "two");

    // CKPTFS_STORE and --store still come first.
    let (other, _) = store_named("other");
    assert_eq!(
        log_messages(&deep, &[("CKPTFS_STORE", &*other.s())], &[]),
        ["other"]
    );
    assert_eq!(
        log_messages(&deep, &[], &["--store", &other.s()]),
        ["other"]
    );
    // And a STORE argument first of all.
    assert_eq!(log_messages(&deep, &[], &[&other.s()])[0], "other");
}

#[test]
fn stats_and_find_take_the_store_by_the_same_rule() {
    let (env, id) = store_named("one");
    let (other, _) = store_named("other");
    let here = tempdir();
    let d = here.path();
    let by_env = [("CKPTFS_STORE", &*env.s())];
    let json = |out: String| -> Value { serde_json::from_str(&out).expect("JSON") };

    let v = json(ok_in(d, &by_env, &["stats", "--json"]));
    assert_eq!(v["checkpoints"][0]["id"], id.as_str(), "{v}");
    // A checkpoint as the one argument is the checkpoint, not a store.
    let v = json(ok_in(d, &by_env, &["stats", &id[..12], "--json"]));
    assert_eq!(v["selected"]["checkpoints"], 1, "{v}");
    let v = json(ok_in(d, &by_env, &["stats", "--branch", "main", "--json"]));
    assert_eq!(v["selected"]["checkpoints"], 1, "{v}");
    // --store beats CKPTFS_STORE; a STORE argument beats both.
    let v = json(ok_in(
        d,
        &by_env,
        &["stats", "--store", &other.s(), "--json"],
    ));
    assert_ne!(v["checkpoints"][0]["id"], id.as_str(), "{v}");
    let v = json(ok_in(
        d,
        &[],
        &["stats", &env.s(), "--store", &other.s(), "--json"],
    ));
    assert_eq!(v["checkpoints"][0]["id"], id.as_str(), "{v}");

    // find: a pattern is never taken for the store.
    let v = json(ok_in(d, &by_env, &["find", "a.txt", "--json"]));
    assert_eq!(v["paths"][0]["path"], "ws/a.txt", "{v}");
    assert_eq!(
        v["paths"][0]["found_in"][0]["checkpoint"]["id"],
        id.as_str(),
        "{v}"
    );
    let v = json(ok_in(
        d,
        &[],
        &["--store", &env.s(), "find", "*.bin", "--json"],
    ));
    assert_eq!(v["paths"][0]["path"], "ws/sub/deeper/c.bin", "{v}");
    let v = json(ok_in(
        d,
        &by_env,
        &["find", "--history", "ws/a.txt", "--json"],
    ));
    assert_eq!(v["changes"][0]["change"], "added", "{v}");

    // Their text gives local time with its offset, as every text output.
    let kolkata = [("CKPTFS_STORE", &*env.s()), ("TZ", "Asia/Kolkata")];
    for args in [
        vec!["stats"],
        vec!["find", "a.txt"],
        vec!["find", "--history", "ws/a.txt"],
    ] {
        let text = ok_in(d, &kolkata, &args);
        assert!(text.contains(" +05:30"), "{args:?}: {text}");
        assert!(!text.contains("Z "), "{args:?}: {text}");
    }

    // No store anywhere: the one line naming every way, also when the one argument given is
    // the command's own (a pattern, a checkpoint), not clap's "missing PATTERNS".
    for args in [
        vec!["stats"],
        vec!["stats", "--branch", "main"],
        vec!["find", "*.txt"],
        vec!["find", "--history", "ws/a.txt"],
        vec!["show", "main"],
    ] {
        let err = fails_in(d, &[], 2, &args);
        for w in ["no store given", "--store", "CKPTFS_STORE", "workspace"] {
            assert!(err.contains(w), "{args:?}: {err} lacks {w}");
        }
    }
    // A mistyped store path keeps its own error.
    let err = fails_in(d, &[], 1, &["stats", "/no/such/store"]);
    assert!(err.contains("/no/such/store"), "{err}");
    let err = fails_in(d, &[], 1, &["find", "/no/such/store", "*.txt"]);
    assert!(err.contains("/no/such/store"), "{err}");
}

#[test]
fn inside_a_read_only_view_the_store_is_found() {
    let f = ViewFixture::new();
    let _g = f.mount("view");
    let mp = f.dir.path().join("view");
    let found = ok_in(&mp, &[], &["show", "first"]);
    assert!(found.contains("label      first"), "{found}");
    let st = ok_in(&mp, &[], &["status"]);
    assert!(st.contains(s(&mp)), "{st}");
}

#[test]
fn a_mount_that_only_calls_itself_ckptfs_is_not_believed() {
    // An overlay whose source names a real store, but that the store never made: the store's
    // records do not list it, so a command run inside it finds no store.
    let (env, _) = store_named("real");
    let t = tempdir();
    let (lower, upper, work, mp) = (
        t.path().join("l"),
        t.path().join("u"),
        t.path().join("w"),
        t.path().join("mp"),
    );
    for d in [&lower, &upper, &work, &mp] {
        fs::create_dir(d).unwrap();
    }
    let _g = MountGuard::new(&mp);
    let o = std::process::Command::new("mount")
        .args(["-t", "overlay", &format!("ckptfs:{}:main", env.s()), "-o"])
        .arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        ))
        .arg(&mp)
        .output()
        .unwrap();
    assert!(o.status.success(), "mount: {o:?}");
    let err = fails_in(&mp, &[], 2, &["log"]);
    assert!(err.contains("CKPTFS_STORE"), "{err}");
}

#[test]
fn import_takes_store_first_and_the_old_order_too() {
    let (env, id) = store_named("exported");
    let t = tempdir();
    let file = t.path().join("all.ckar");
    // `export` is the name; `archive` still works.
    ok(["export", &env.s(), "--all", "--out", s(&file)]);
    let old_file = t.path().join("old.ckar");
    ok(["archive", &env.s(), "--all", "--out", s(&old_file)]);
    let shown = |store: &Path| ok(["show", s(store), &id]);

    let a = t.path().join("a");
    ok(["import", s(&a), s(&file)]);
    assert!(shown(&a).contains(&id));
    let b = t.path().join("b");
    ok(["unarchive", s(&file), s(&b)]);
    assert!(shown(&b).contains(&id));
    let c = t.path().join("c");
    ok(["unarchive", s(&c), s(&old_file)]);
    assert!(shown(&c).contains(&id));
    // Only FILE: the store from CKPTFS_STORE (created there), or --store.
    let d = t.path().join("d");
    ok_in(t.path(), &[("CKPTFS_STORE", s(&d))], &["import", s(&file)]);
    assert!(shown(&d).contains(&id));
    let e = t.path().join("e");
    ok_in(t.path(), &[], &["import", s(&file), "--store", s(&e)]);
    assert!(shown(&e).contains(&id));
    let err = fails_in(t.path(), &[], 2, &["import", s(&file)]);
    assert!(err.contains("CKPTFS_STORE"), "{err}");
    let err = fails(2, ["import", s(&file), s(&old_file)]);
    assert!(err.contains("both files"), "{err}");

    let help = ok(["--help"]);
    assert!(help.contains("export") && help.contains("import"), "{help}");
    let help = ok(["import", "--help"]);
    assert!(help.contains("unarchive FILE STORE"), "{help}");
    assert!(ok(["export", "--help"]).contains("branch archive"));
}

#[test]
fn fork_takes_the_name_as_label_does() {
    let (env, id) = store_named("x");
    ok(["fork", &env.s(), &id, "side"]);
    ok(["fork", &env.s(), &id, "--name", "old-style"]);
    let list = ok_json(["branch", "list", &env.s(), "--json"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"side") && names.contains(&"old-style"),
        "{names:?}"
    );
    fails(2, ["fork", &env.s(), &id, "both", "--name", "twice"]);
    fails(2, ["fork", &env.s(), &id]);
}

#[test]
fn text_shows_local_time_with_its_offset_and_json_stays_utc() {
    let (env, ids) = store_at_times(&[WINTER, SUMMER]);
    let d = env.tmp.path();
    let cases = [
        (
            "Europe/Paris",
            "2026-12-01 09:12:03 +01:00",
            "2026-07-01 12:00:00 +02:00",
        ),
        (
            "America/New_York",
            "2026-12-01 03:12:03 -05:00",
            "2026-07-01 06:00:00 -04:00",
        ),
        (
            "UTC",
            "2026-12-01 08:12:03 +00:00",
            "2026-07-01 10:00:00 +00:00",
        ),
        // A POSIX rule rather than a zone name.
        (
            "EST5EDT,M3.2.0,M11.1.0",
            "2026-12-01 03:12:03 -05:00",
            "2026-07-01 06:00:00 -04:00",
        ),
    ];
    for (tz, winter, summer) in cases {
        let e = [("TZ", tz)];
        let log = ok_in(d, &e, &["log", &env.s()]);
        assert!(
            log.contains(winter) && log.contains(summer),
            "TZ={tz}: {log}"
        );
        let graph = ok_in(d, &e, &["log", &env.s(), "--graph"]);
        assert!(graph.contains(winter), "TZ={tz}: {graph}");
        let show = ok_in(d, &e, &["show", &env.s(), &ids[0]]);
        assert!(
            show.contains(&format!("time       {winter}")),
            "TZ={tz}: {show}"
        );
        // JSON is the same whatever TZ says.
        let rows: Value =
            serde_json::from_str(&ok_in(d, &e, &["log", &env.s(), "--json"])).expect("json");
        let winter_row = rows
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == ids[0].as_str())
            .unwrap();
        assert_eq!(
            winter_row["time_rfc3339"], "2026-12-01T08:12:03Z",
            "TZ={tz}"
        );
    }
}

#[test]
fn columns_line_up_with_long_branch_names_and_labels() {
    let env = Env::new();
    small_tree(env.ws());
    let first = env.capture_id(&["-m", "first", "-l", LONG_LABEL]);
    ok(["fork", &env.s(), &first, LONG_BRANCH]);
    fs::write(env.ws().join("a.txt"), "changed on the long branch\n").unwrap();
    env.capture_id(&["--branch", LONG_BRANCH, "-m", "second"]);
    fs::write(env.ws().join("a.txt"), "changed on main\n").unwrap();
    env.capture_id(&["-m", "third"]);

    // log: the message and the file count start at the same column on every line, label
    // or not, long branch or not.
    let log = ok(["log", &env.s()]);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    let at = |l: &str, w: &str| l.find(w).unwrap_or_else(|| panic!("{w} in {l}"));
    let files: Vec<usize> = lines.iter().map(|l| at(l, " files")).collect();
    let msgs: Vec<usize> = lines
        .iter()
        .zip(["third", "second", "first"])
        .map(|(l, m)| at(l, m))
        .collect();
    assert!(files.iter().all(|&c| c == files[0]), "{log}");
    assert!(msgs.iter().all(|&c| c == msgs[0]), "{log}");
    assert!(lines.iter().any(|l| l.contains(LONG_LABEL)), "{log}");
    assert!(lines.iter().any(|l| l.contains(LONG_BRANCH)), "{log}");

    // branch list: every row's columns start where the header's do.
    let list = ok(["branch", "list", &env.s()]);
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    let header = column_starts(lines[0]);
    assert_eq!(header.len(), 7, "{list}");
    for l in &lines[1..] {
        assert_eq!(column_starts(l), header, "{list}");
    }

    // gc's plan: the verdicts line up, with a label on one line only.
    let plan = ok(["gc", &env.s(), "--keep-last", "1", "--dry-run"]);
    let rows: Vec<&str> = plan
        .lines()
        .filter(|l| l.contains("kept:") || l.ends_with("pruned"))
        .collect();
    assert_eq!(rows.len(), 3, "{plan}");
    let verdicts: Vec<usize> = rows
        .iter()
        .map(|l| l.find("kept:").or_else(|| l.find("pruned")).unwrap())
        .collect();
    assert!(verdicts.iter().all(|&c| c == verdicts[0]), "{plan}");
    assert!(plan.contains(&format!("[{LONG_LABEL}]")), "{plan}");
}

#[test]
fn ls_reads_like_ls_l() {
    let env = Env::new();
    let ws = env.ws();
    fs::create_dir(ws.join("dir")).unwrap();
    for i in 0..5 {
        fs::write(ws.join(format!("dir/f{i}")), "x").unwrap();
    }
    fs::write(ws.join("big"), vec![7u8; 1536]).unwrap();
    fs::write(ws.join("s"), "1").unwrap();
    std::os::unix::fs::symlink("big", ws.join("link")).unwrap();
    // An owner with a name and one without (chown first: it clears setuid).
    std::os::unix::fs::chown(ws.join("s"), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(ws.join("big"), Some(54321), Some(54321)).unwrap();
    chmod(&ws.join("s"), 0o4755);
    env.capture_id(&[]);

    let ls = ok(["ls", &env.s(), "main:ws"]);
    let line = |name: &str| -> String {
        ls.lines()
            .find(|l| l.ends_with(&format!(" {name}")) || l.contains(&format!(" {name} -> ")))
            .unwrap_or_else(|| panic!("{name} in {ls}"))
            .to_string()
    };
    let cols = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let big = cols(&line("big"));
    assert_eq!(big[0], "-rw-r--r--", "{ls}");
    assert_eq!((&*big[1], &*big[2]), ("54321", "54321"), "no name: the id");
    assert_eq!(big[3], "1.5K", "{ls}");
    let dir = cols(&line("dir"));
    assert_eq!(dir[0], "drwxr-xr-x");
    assert_eq!((&*dir[1], &*dir[2]), ("root", "root"), "{ls}");
    assert_eq!(
        dir[3], "-",
        "a directory's size is not its entry count: {ls}"
    );
    let su = cols(&line("s"));
    assert_eq!(su[0], "-rwsr-xr-x");
    let nobody = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(65534))
        .unwrap()
        .map(|u| u.name);
    assert_eq!(Some(su[1].clone()), nobody, "{ls}");
    assert!(line("link").starts_with('l') && line("link").ends_with("link -> big"));
    // Mode, owner and group start at the same places on every row, sizes end at one place
    // (right-aligned) and the times start at one.
    let starts: Vec<Vec<usize>> = ls.lines().map(|l| column_starts(l)[..3].to_vec()).collect();
    assert!(starts.iter().all(|s| s == &starts[0]), "{ls}");
    let times: Vec<usize> = ls.lines().map(|l| l.find("  20").unwrap()).collect();
    assert!(times.iter().all(|&t| t == times[0]), "{ls}");

    let bytes = ok(["ls", &env.s(), "main:ws", "--bytes"]);
    assert!(
        bytes
            .lines()
            .any(|l| l.split_whitespace().nth(3) == Some("1536") && l.ends_with(" big")),
        "{bytes}"
    );
    let rec = ok(["ls", &env.s(), "main:ws", "-r"]);
    assert!(rec.lines().any(|l| l.ends_with(" dir/f4")), "{rec}");
}
