//! Clean merges, conflicts of every kind, `--take`, fast-forwards and dry runs.

use crate::support::*;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

/// One file of a state: its path under the root and its content (`None`: a directory).
type Files<'a> = &'a [(&'a str, Option<&'a [u8]>)];

/// Makes `root` hold exactly `files`.
fn set_tree(root: &Path, files: Files<'_>) {
    for e in fs::read_dir(root).expect("list root") {
        let p = e.expect("entry").path();
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(&p).expect("rm dir");
        } else {
            fs::remove_file(&p).expect("rm file");
        }
    }
    for (path, content) in files {
        let p = root.join(path);
        match content {
            Some(data) => write(&p, data),
            None => fs::create_dir_all(&p).expect("mkdir"),
        }
    }
}

/// A store whose `main` holds `base` then `ours`, and whose `feat` (forked at base) holds
/// `theirs`.
fn diverged(base: Files<'_>, ours: Files<'_>, theirs: Files<'_>) -> Env {
    let env = Env::new();
    set_tree(env.ws(), base);
    env.capture_id(&["-m", "base"]);
    ok(["fork", &env.s(), "main", "feat"]);
    set_tree(env.ws(), ours);
    env.capture_id(&["-m", "ours"]);
    set_tree(env.ws(), theirs);
    env.capture_id(&["-b", "feat", "-m", "theirs"]);
    env
}

fn merge_json(env: &Env, extra: &[&str]) -> (Option<i32>, Value) {
    let mut args: Vec<String> = vec!["merge".into(), env.s(), "feat".into(), "--json".into()];
    args.extend(extra.iter().map(|a| a.to_string()));
    let o = run(&args);
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("merge --json: {e}: {}", describe(&args, &o)));
    (o.status.code(), v)
}

fn cat(env: &Env, spec: &str) -> Vec<u8> {
    let o = run(["cat", &env.s(), spec]);
    assert!(o.status.success(), "cat {spec}: {}", stderr(&o));
    o.stdout
}

fn tip(env: &Env, branch: &str) -> String {
    head(&env.store, branch).expect("a head")
}

const TEXT_BASE: &[u8] = b"one\ntwo\nthree\nfour\nfive\n";

#[test]
fn text_appends_and_renames_merge_into_one_checkpoint_with_two_parents() {
    let env = diverged(
        &[
            ("notes.md", Some(TEXT_BASE)),
            ("log.jsonl", Some(b"{\"turn\":1}\n")),
            ("old.txt", Some(b"moved by them, edited by us\n")),
            ("gone.txt", Some(b"they delete this\n")),
            ("sub/keep", Some(b"k\n")),
        ],
        &[
            ("notes.md", Some(b"ONE\ntwo\nthree\nfour\nfive\n")),
            (
                "log.jsonl",
                Some(b"{\"turn\":1}\n{\"turn\":2,\"by\":\"us\"}\n"),
            ),
            ("old.txt", Some(b"moved by them, edited by us: edited\n")),
            ("gone.txt", Some(b"they delete this\n")),
            ("sub/keep", Some(b"k\n")),
            ("ours.txt", Some(b"added by us\n")),
        ],
        &[
            ("notes.md", Some(b"one\ntwo\nthree\nfour\nFIVE\n")),
            (
                "log.jsonl",
                Some(b"{\"turn\":1}\n{\"turn\":2,\"by\":\"them\"}\n"),
            ),
            ("new/place.txt", Some(b"moved by them, edited by us\n")),
            ("sub/keep", Some(b"k\n")),
        ],
    );
    let (ours, theirs) = (tip(&env, "main"), tip(&env, "feat"));
    let (code, r) = merge_json(&env, &[]);
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(r["outcome"], "merged");
    let merged = r["checkpoint"].as_str().expect("a checkpoint");
    assert_eq!(tip(&env, "main"), merged);
    let show = show(&env.store, merged);
    assert_eq!(show["parents"], serde_json::json!([ours, theirs]));
    assert_eq!(
        cat(&env, "main:ws/notes.md"),
        b"ONE\ntwo\nthree\nfour\nFIVE\n"
    );
    assert_eq!(
        cat(&env, "main:ws/log.jsonl"),
        b"{\"turn\":1}\n{\"turn\":2,\"by\":\"us\"}\n{\"turn\":2,\"by\":\"them\"}\n"
    );
    // Their rename carried our edit to the new path.
    assert_eq!(
        cat(&env, "main:ws/new/place.txt"),
        b"moved by them, edited by us: edited\n"
    );
    assert!(!run(["cat", &env.s(), "main:ws/old.txt"]).status.success());
    assert!(!run(["cat", &env.s(), "main:ws/gone.txt"]).status.success());
    assert_eq!(cat(&env, "main:ws/ours.txt"), b"added by us\n");
    let drivers: Vec<(&str, &str)> = r["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| Some((s["path"].as_str()?, s["driver"].as_str()?)))
        .collect();
    assert!(drivers.contains(&("ws/notes.md", "text")), "{drivers:?}");
    assert!(drivers.contains(&("ws/log.jsonl", "append")), "{drivers:?}");
    // The record's totals are what a capture of the same tree counts.
    assert_eq!(show["stats"]["files"], 5, "{show:#}");
    assert!(ok(["verify", &env.s()]).contains("0 findings"));
    // The merged tree restores byte for byte.
    let to = env.path("restored");
    env.restore("main", &to);
    assert_eq!(
        fs::read(to.join("ws/notes.md"))
            .or_else(|_| fs::read(to.join("notes.md")))
            .expect("restored"),
        b"ONE\ntwo\nthree\nfour\nFIVE\n"
    );
}

#[test]
fn conflicts_of_every_kind_are_named_and_nothing_is_recorded() {
    let env = diverged(
        &[
            ("text", Some(b"a\nb\n")),
            ("bin", Some(b"\0base")),
            ("moddel", Some(b"m\n")),
            ("kind", Some(b"f\n")),
            ("mode", Some(b"x\n")),
        ],
        &[
            ("text", Some(b"ours\nb\n")),
            ("bin", Some(b"\0ours")),
            ("moddel", Some(b"m changed\n")),
            ("kind", Some(b"f changed\n")),
            ("mode", Some(b"x\n")),
            ("added", Some(b"ours\n")),
        ],
        &[
            ("text", Some(b"theirs\nb\n")),
            ("bin", Some(b"\0theirs")),
            ("kind/inside", Some(b"now a dir\n")),
            ("mode", Some(b"x\n")),
            ("added", Some(b"theirs\n")),
        ],
    );
    let before = tip(&env, "main");
    let (code, r) = merge_json(&env, &[]);
    assert_eq!(code, Some(1), "{r:#}");
    assert_eq!(r["outcome"], "conflicts");
    assert!(r["checkpoint"].is_null());
    let kinds: Vec<(String, String)> = r["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap_or("").into(),
                c["kind"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    for want in [
        ("ws/text", "content"),
        ("ws/bin", "content"),
        ("ws/moddel", "modify-delete"),
        ("ws/kind", "type"),
        ("ws/added", "add-add"),
    ] {
        assert!(
            kinds.contains(&(want.0.into(), want.1.into())),
            "{want:?} not in {kinds:?}"
        );
    }
    assert_eq!(tip(&env, "main"), before, "nothing recorded");
    // Text output names them too, one line each.
    let o = run(["merge", &env.s(), "feat"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("CONFLICT (modify-delete): ws/moddel"), "{out}");
    assert!(out.contains("nothing recorded"), "{out}");
}

#[test]
fn a_mode_changed_both_ways_conflicts_and_one_way_is_taken() {
    let env = Env::new();
    set_tree(env.ws(), &[("a", Some(b"a\n")), ("b", Some(b"b\n"))]);
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    let chmod = |p: &str, m: u32| {
        fs::set_permissions(env.ws().join(p), fs::Permissions::from_mode(m)).expect("chmod")
    };
    chmod("a", 0o600);
    env.capture_id(&[]);
    chmod("a", 0o640);
    chmod("b", 0o755);
    env.capture_id(&["-b", "feat"]);
    let (code, r) = merge_json(&env, &[]);
    assert_eq!(code, Some(1), "{r:#}");
    assert_eq!(r["conflicts"][0]["kind"], "mode", "{r:#}");
    assert_eq!(r["conflicts"][0]["path"], "ws/a");
    let (code, r) = merge_json(&env, &["--take", "theirs"]);
    assert_eq!(code, Some(0), "{r:#}");
    let ls = ok(["ls", &env.s(), "main:ws"]);
    assert!(
        ls.contains("-rw-r-----") && ls.contains("-rwxr-xr-x"),
        "{ls}"
    );
}

#[test]
fn take_resolves_the_named_paths_only_then_all() {
    let env = diverged(
        &[("x", Some(b"1\n2\n3\n")), ("y", Some(b"\0y"))],
        &[("x", Some(b"ours\n2\nOURS\n")), ("y", Some(b"\0ours"))],
        &[("x", Some(b"theirs\n2\n3\n")), ("y", Some(b"\0theirs"))],
    );
    let (code, r) = merge_json(&env, &["--take", "theirs", "--", "ws/x"]);
    assert_eq!(code, Some(1), "{r:#}");
    let open: Vec<&Value> = r["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .filter(|c| c["resolved"].is_null())
        .collect();
    assert_eq!(open.len(), 1, "{r:#}");
    assert_eq!(open[0]["path"], "ws/y");
    let (code, r) = merge_json(&env, &["--take", "theirs"]);
    assert_eq!(code, Some(0), "{r:#}");
    // Their side of the conflicting hunk, our clean change kept.
    assert_eq!(cat(&env, "main:ws/x"), b"theirs\n2\nOURS\n");
    assert_eq!(cat(&env, "main:ws/y"), b"\0theirs");
}

#[test]
fn fast_forward_up_to_date_ff_only_and_no_ff() {
    let env = Env::new();
    write(&env.ws().join("f"), b"1\n");
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    write(&env.ws().join("f"), b"2\n");
    let feat = env.capture_id(&["-b", "feat"]);
    let (code, r) = merge_json(&env, &["--dry-run"]);
    assert_eq!(
        (code, r["outcome"].as_str()),
        (Some(0), Some("fast-forward"))
    );
    assert_ne!(tip(&env, "main"), feat, "a dry run moves nothing");
    let (code, r) = merge_json(&env, &[]);
    assert_eq!(
        (code, r["outcome"].as_str()),
        (Some(0), Some("fast-forward")),
        "{r:#}"
    );
    assert_eq!(tip(&env, "main"), feat);
    let (_, r) = merge_json(&env, &[]);
    assert_eq!(r["outcome"], "up-to-date");
    // Diverge: --ff-only refuses, --no-ff on a fresh fork records two parents.
    write(&env.ws().join("g"), b"main\n");
    env.capture_id(&[]);
    write(&env.ws().join("h"), b"feat\n");
    env.capture_id(&["-b", "feat"]);
    let o = run(["merge", &env.s(), "feat", "--ff-only"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    ok(["fork", &env.s(), "main", "ahead"]);
    write(&env.ws().join("i"), b"ahead\n");
    env.capture_id(&["-b", "ahead"]);
    let o = run(["merge", &env.s(), "ahead", "--no-ff", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["outcome"], "merged", "{v:#}");
    let c = show(&env.store, "main");
    assert_eq!(c["parents"].as_array().map(Vec::len), Some(2));
}

#[test]
fn a_dry_run_writes_nothing_and_plans_what_the_merge_does() {
    let env = diverged(
        &[("a", Some(b"1\n2\n3\n"))],
        &[("a", Some(b"0\n2\n3\n"))],
        &[
            ("a", Some(b"1\n2\n4\n")),
            ("big", Some(&random_bytes(7, 300_000))),
        ],
    );
    let objects = env.objects();
    let before = tip(&env, "main");
    let (code, plan) = merge_json(&env, &["--dry-run"]);
    assert_eq!(code, Some(0), "{plan:#}");
    assert_eq!(plan["dry_run"], true);
    assert!(plan["checkpoint"].is_null());
    assert_eq!(env.objects(), objects, "a dry run stores no object");
    assert_eq!(tip(&env, "main"), before);
    let (_, done) = merge_json(&env, &[]);
    assert_eq!(
        plan["steps"], done["steps"],
        "the plan is what the merge does"
    );
}

#[test]
fn a_rename_theirs_made_is_one_renamed_step_in_the_plan() {
    let env = diverged(
        &[
            ("a.txt", Some(b"content that moves\n")),
            ("b", Some(b"b\n")),
        ],
        &[
            ("a.txt", Some(b"content that moves\n")),
            ("b", Some(b"B\n")),
        ],
        &[
            ("moved/a.txt", Some(b"content that moves\n")),
            ("b", Some(b"b\n")),
        ],
    );
    let (code, r) = merge_json(&env, &["--dry-run"]);
    assert_eq!(code, Some(0), "{r:#}");
    let steps = r["steps"].as_array().expect("steps");
    let renamed: Vec<&Value> = steps.iter().filter(|s| s["how"] == "renamed").collect();
    assert_eq!(renamed.len(), 1, "{r:#}");
    assert_eq!(renamed[0]["path"], "ws/moved/a.txt");
    assert_eq!(renamed[0]["from"], "ws/a.txt");
    assert!(
        !steps.iter().any(|s| s["path"] == "ws/a.txt"),
        "no separate removal: {r:#}"
    );
    let text = ok(["merge", &env.s(), "feat", "--dry-run"]);
    assert!(text.contains("R ws/a.txt -> ws/moved/a.txt"), "{text}");
}
