//! Every `--json` output validated against its documented schema (docs/schema/NAME.json, see
//! docs/json.md), on a real store, a mounted workspace and a read-only view, and real turns
//! (`ckptfs turn`, so records with `meta`, `runtime` and `turn`): the document, the schemas and
//! the code cannot drift. Also: every command with a `--json` flag has a schema,
//! and every schema is exercised here.

use crate::support::*;

use std::collections::BTreeSet;

use serde_json::Value;

/// Runs `ckptfs ARGS --json` (which must exit `code`) and validates stdout against `name`.
fn check_code(code: i32, name: &str, args: &[&str]) -> Value {
    let mut args: Vec<&str> = args.to_vec();
    args.push("--json");
    let o = run(&args);
    let what = describe_output(&format!("ckptfs {}", args.join(" ")), &o);
    assert_eq!(o.status.code(), Some(code), "{what}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {what}"));
    validate(name, &v, &format!("ckptfs {}", args.join(" ")));
    v
}

fn check(name: &str, args: &[&str]) -> Value {
    check_code(0, name, args)
}

/// A store with two roots, a labelled first checkpoint, a second one with a changed file, a
/// symlink, a subdirectory and a root xattr.
fn two_root_store() -> (Env, String, String) {
    let env = Env::with_roots(&["ws", "home"], &[]);
    write(&env.root("ws").join("a.txt"), b"one\n");
    write(&env.root("ws").join("src/lib.rs"), b"fn main() {}\n");
    std::os::unix::fs::symlink("a.txt", env.root("ws").join("link")).expect("symlink");
    write(&env.root("home").join(".config/x.json"), b"{}\n");
    xattr::set(env.root("ws"), "user.note", b"root xattr").expect("xattr on the root");
    let c1 = env.capture_id(&["--label", "first", "-m", "one"]);
    write(&env.root("ws").join("a.txt"), b"two\n");
    write(&env.root("ws").join("new.bin"), &random_bytes(1, 10_000));
    let c2 = env.capture_id(&["-m", "two"]);
    (env, c1, c2)
}

// Over 150 lines on purpose: one store built step by step, each command's --json checked
// against its schema right after the step that gives it something to say; split, the steps
// would have to be rebuilt in each part.
#[test]
fn store_commands_match_their_schemas() {
    let (env, c1, c2) = two_root_store();
    let st = env.s();
    let v = check(
        "capture",
        &[
            "capture",
            &st,
            "--label",
            "third",
            "-m",
            "three",
            "--meta",
            "thread=t-1",
            "--meta",
            "empty=",
        ],
    );
    assert_eq!(v["labels"][0], "third", "{v}");
    assert_eq!(v["checkpoint"]["meta"]["thread"], "t-1", "{v}");
    assert_eq!(v["checkpoint"]["meta"]["empty"], "", "{v}");
    // A root's mode is an octal string, as everywhere.
    assert!(v["checkpoint"]["roots"]["ws"]["mode"].is_string(), "{v}");
    let c3 = v["id"].as_str().expect("id").to_string();
    ok(["fork", &st, &c1, "--name", "side"]);
    write(&env.root("ws").join("side.txt"), b"side\n");
    env.capture_id(&["--branch", "side"]);

    let v = check("log", &["log", &st]);
    assert!(
        v.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["meta"]["thread"] == "t-1"),
        "log --json rows carry meta: {v}"
    );
    let v = check("show", &["show", &st, "third"]);
    assert_eq!(v["checkpoint"]["meta"]["thread"], "t-1", "{v}");
    let g = check("log", &["log", &st, "--graph"]);
    assert!(
        g[0]["graph"]["lanes"].is_string(),
        "--graph --json keeps the graph: {g}"
    );
    check("log", &["log", &st, "--branch", "main", "-n", "1"]);
    let v = check("show", &["show", &st, &c1]);
    assert_eq!(v["checkpoint"]["roots"]["ws"]["mode"], "0755", "{v}");
    check("ls", &["ls", &st, &format!("{c2}:ws/src")]);
    let v = check("ls", &["ls", &st, &format!("{c2}:ws"), "-r"]);
    assert!(
        v.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["type"] == "symlink" && r["target"] == "a.txt"),
        "{v}"
    );
    check("diff", &["diff", &st, &c1, &c2]);
    check("diff", &["diff", &st, &c1, &c2, "--stat"]);
    check("diff", &["diff", &st, &c1, &c2, "--name-status"]);
    check("diff", &["diff", &st, &c1, &c2, "-p"]);
    check("stats", &["stats", &st]);
    check("stats", &["stats", &st, &c2]);
    check("stats", &["stats", &st, "--branch", "side"]);
    let v = check("find", &["find", &st, "*.txt", "ws/src/**"]);
    assert!(!v["paths"].as_array().expect("paths").is_empty(), "{v}");
    let v = check("find-history", &["find", &st, "--history", "ws/a.txt"]);
    assert!(!v["changes"].as_array().expect("changes").is_empty(), "{v}");
    check("find-history", &["find", &st, "--history", "ws/new.bin"]);
    check("branch-list", &["branch", "list", &st, "--all"]);
    check("verify", &["verify", &st]);
    check("doctor", &["doctor", &st]);
    check("recover", &["recover", &st]);

    // Restores: one target, and every root in place ({"restored": [...]}).
    check(
        "restore",
        &[
            "restore",
            &st,
            &c1,
            "--root",
            "ws",
            "--to",
            s(&env.path("out")),
        ],
    );
    check(
        "restore",
        &[
            "restore",
            &st,
            &format!("{c1}:ws/a.txt"),
            "--to",
            s(&env.path("a.txt")),
        ],
    );
    let v = check("restore", &["restore", &st, &c2, "--in-place"]);
    assert_eq!(v["restored"].as_array().map(Vec::len), Some(2), "{v}");
    // The entry type as `ls` and `find` name it, and the older key beside it.
    assert_eq!(v["restored"][0]["type"], "dir", "{v}");
    assert_eq!(v["restored"][0]["kind"], "directory", "{v}");

    // Export and import, and the same under their older names.
    let file = env.path("all.tar.zst");
    check("export", &["export", &st, "--all", "--out", s(&file)]);
    check("import", &["import", s(&env.path("copy")), s(&file)]);
    let file = env.path("again.tar.zst");
    check("export", &["archive", &st, "--all", "--out", s(&file)]);
    check("import", &["unarchive", s(&file), s(&env.path("copy2"))]);

    // fingerprint, in each mode: this machine's, declare, compare with a branch (none
    // recorded here), clear.
    let v = check("fingerprint", &["fingerprint", &st]);
    assert!(v["fingerprint"]["platform"]["os"].is_string(), "{v}");
    assert!(v["branch"].is_null(), "{v}");
    let v = check(
        "fingerprint",
        &[
            "fingerprint",
            &st,
            "--file",
            "/bin/sh",
            "--command",
            "/bin/echo one",
        ],
    );
    assert_eq!(v["declared"]["files"][0], "/bin/sh", "{v}");
    assert_eq!(v["fingerprint"]["commands"]["/bin/echo one"], "one", "{v}");
    let v = check("fingerprint", &["fingerprint", &st, "--branch", "main"]);
    assert!(v["recorded"].is_null() && v["branch"] == "main", "{v}");
    let v = check(
        "fingerprint",
        &[
            "fingerprint",
            &st,
            "--branch",
            "side",
            "--command",
            "/bin/echo side",
        ],
    );
    assert_eq!(v["declared"]["commands"][0], "/bin/echo side", "{v}");
    let v = check("fingerprint", &["fingerprint", &st, "--clear"]);
    assert!(v["fingerprint"].get("files").is_none(), "{v}");

    // Labels, forget, gc (a plan, then done; with policy, pruned checkpoints and paths).
    ok(["label", &st, &c2, "tmp"]);
    let v = check("label-delete", &["label", "delete", &st, "tmp"]);
    assert_eq!(v["checkpoint"], c2.as_str(), "{v}");
    check("forget", &["forget", &st, &c2, "--dry-run"]);
    let v = check("gc", &["gc", &st, "--keep-last", "1", "--dry-run"]);
    assert!(
        v["kept"].get("branch_head").is_some(),
        "reasons are identifiers: {v}"
    );
    assert!(!v["pruned"].as_array().expect("pruned").is_empty(), "{v}");
    check("gc", &["gc", &st, "--keep-last", "1"]);
    // A later capture keeps c3's line going; forget c3 with --prune (it has a label: delete it).
    write(&env.root("ws").join("later.txt"), b"later\n");
    env.capture_id(&[]);
    ok(["label", "delete", &st, "third"]);
    let v = check("forget", &["forget", &st, &c3, "--prune"]);
    assert!(v["gc"].is_object(), "{v}");
}

#[test]
fn findings_match_their_schemas() {
    let (env, _c1, _c2) = two_root_store();
    // Truncate one chunk object: verify and doctor both find it (exit 1, JSON on stdout).
    let (hex, _) = env
        .objects()
        .into_iter()
        .max_by_key(|(_, size)| *size)
        .expect("objects");
    let p = env.object_file(&hex.replace('/', ""));
    let mut perm = std::fs::metadata(&p).expect("object").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
    std::fs::set_permissions(&p, perm).expect("chmod");
    std::fs::write(&p, b"short").expect("truncate object");
    let v = check_code(1, "verify", &["verify", &env.s()]);
    assert!(
        !v["findings"].as_array().expect("findings").is_empty(),
        "{v}"
    );
    let v = check_code(1, "doctor", &["doctor", &env.s()]);
    assert!(
        !v["findings"].as_array().expect("findings").is_empty(),
        "{v}"
    );
}

#[test]
fn workspace_and_view_commands_match_their_schemas() {
    let ws = Workspace::new(|room| {
        write(&room.join("a.txt"), b"a\n");
        write(&room.join("d/b.txt"), b"b\n");
    });
    let st = ws.store().to_string();
    // mount --json (a second mount of a new branch at another place).
    ok(["fork", &st, "main", "--name", "other"]);
    let other = ws.tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let v = check(
        "mount",
        &[
            "mount",
            &st,
            "--branch",
            "other",
            "--at",
            s(&other),
            "--relocate",
        ],
    );
    assert_eq!(v["branch"], "other", "{v}");
    let _other_guard = MountGuard::new(&other);
    write(&ws.path("a.txt"), b"changed\n");
    write(&ws.path("new.txt"), b"new\n");
    // A read-only view too, so status lists both kinds.
    let view = ws.tmp.path().join("view");
    std::fs::create_dir(&view).expect("mkdir view");
    ok(["mount", &st, "main", s(&view)]);
    let _view_guard = MountGuard::new(&view);
    let v = check("status", &["status", &st]);
    let kinds: BTreeSet<&str> = v
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert!(kinds.contains("workspace") && kinds.contains("view"), "{v}");
    check("status", &["status", ws.room()]);
    let v = check(
        "checkpoint",
        &["checkpoint", ws.room(), "-m", "turn", "--label", "t1"],
    );
    assert_eq!(v["labels"][0], "t1", "{v}");
    assert!(v["checkpoint"]["roots"]["ws"]["mode"].is_string(), "{v}");
    write(&ws.path("dirty.txt"), b"dirty\n");
    ok(["fork", &st, "main", "--name", "third"]);
    check(
        "switch",
        &["switch", ws.room(), "--to", "third", "--checkpoint-first"],
    );
    check("branch-list", &["branch", "list", &st]);
    // main's tree is parked now: a `parked` row.
    let v = check("status", &["status", &st]);
    assert!(
        v.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["kind"] == "parked"),
        "{v}"
    );
    ok(["umount", s(&view)]);
    ok(["umount", s(&other)]);
}

/// `ckptfs turn` (with `--json` before `--`): its report, `show` and `log` of the checkpoint it
/// records (`meta`, `runtime`, `turn`), `log --turns`, `fingerprint --branch` against what a
/// turn recorded, and `status` of a workspace holding a failed turn's writes.
#[test]
fn turn_outputs_match_their_schemas() {
    let ws = Workspace::new(|room| write(&room.join("notes.md"), b"start\n"));
    let st = ws.store().to_string();
    // Declared before the first turn (turns_can_run runs one), so every turn records it.
    ok([
        "fingerprint",
        &st,
        "--file",
        "/bin/sh",
        "--command",
        "/bin/echo one",
    ]);
    if !turns_can_run(&ws) {
        return;
    }
    let meta_file = ws.tmp.path().join("meta.json");
    std::fs::write(
        &meta_file,
        br#"{"turn": 7, "ok": true, "none": null, "reply": "done"}"#,
    )
    .expect("meta file");
    let notes = s(&ws.path("notes.md")).to_string();
    let (o, r) = turn_json(
        &ws,
        &[
            "--meta",
            "thread=th-1",
            "--meta-file",
            s(&meta_file),
            "--label",
            "t7",
        ],
        &["sh", "-c", &format!("echo turn7 >> {notes}")],
    );
    assert!(o.status.success(), "{}", describe_output("turn", &o));
    validate("turn", &r, "ckptfs turn --json (ok)");
    assert_eq!(r["outcome"], "ok", "{r}");

    let v = check("show", &["show", &st, "t7"]);
    let c = &v["checkpoint"];
    assert_eq!(c["meta"]["turn"], 7, "{v}");
    assert_eq!(c["meta"]["ok"], true, "{v}");
    assert!(c["meta"]["none"].is_null(), "{v}");
    assert_eq!(c["turn"]["id"], r["turn"], "{v}");
    assert!(
        c["runtime"]["files"]["/bin/sh"]
            .as_str()
            .is_some_and(|f| f.starts_with("sha256:")),
        "{v}"
    );
    assert_eq!(c["runtime"]["commands"]["/bin/echo one"], "one", "{v}");
    let v = check("log", &["log", &st, "-n", "1"]);
    assert_eq!(v[0]["turn"]["id"], r["turn"], "{v}");
    assert!(v[0]["runtime"]["platform"].is_object(), "{v}");
    let v = check("fingerprint", &["fingerprint", &st, "--branch", "main"]);
    assert_eq!(v["recorded_in"], r["checkpoint"], "{v}");
    assert!(v["recorded"]["platform"].is_object(), "{v}");

    // A changed declaration: the branch differs (exit 1), a turn needs
    // --accept-runtime-change; this one fails, so its writes stay pending.
    ok([
        "fingerprint",
        &st,
        "--file",
        "/bin/sh",
        "--command",
        "/bin/echo two",
    ]);
    let v = check_code(1, "fingerprint", &["fingerprint", &st, "--branch", "main"]);
    assert_eq!(v["differences"][0]["field"], "command:/bin/echo one", "{v}");
    let (o, r2) = turn_json(
        &ws,
        &["--accept-runtime-change"],
        &["sh", "-c", &format!("echo broken >> {notes}; exit 3")],
    );
    assert_eq!(o.status.code(), Some(3), "{}", describe_output("turn", &o));
    validate("turn", &r2, "ckptfs turn --json (failed)");
    assert!(
        r2["checkpoint"].is_null() && r2["runtime"]["accepted"] == true,
        "{r2}"
    );
    let v = check("status", &["status", ws.room()]);
    assert_eq!(v[0]["turn"]["state"], "failed", "{v}");
    assert_eq!(v[0]["turn"]["exit_status"], 3, "{v}");

    // --retry sets them aside; the accepted change is recorded with the turn.
    let (o, r3) = turn_json(
        &ws,
        &["--retry", "--accept-runtime-change"],
        &["sh", "-c", &format!("echo turn8 >> {notes}")],
    );
    assert!(o.status.success(), "{}", describe_output("turn", &o));
    validate("turn", &r3, "ckptfs turn --json (--retry)");
    assert!(r3["set_aside"].is_string(), "{r3}");
    let v = check(
        "show",
        &["show", &st, r3["checkpoint"].as_str().expect("id")],
    );
    assert_eq!(
        v["checkpoint"]["turn"]["accepted_runtime_change"], true,
        "{v}"
    );

    // A command that cannot run: 127, its error said, nothing recorded.
    let (o, r4) = turn_json(&ws, &[], &["/no/such/command"]);
    assert_eq!(
        o.status.code(),
        Some(127),
        "{}",
        describe_output("turn", &o)
    );
    validate("turn", &r4, "ckptfs turn --json (cannot-run)");
    assert!(
        r4["outcome"] == "cannot-run" && r4["error"].is_string(),
        "{r4}"
    );

    let v = check("log-turns", &["log", &st, "--turns"]);
    let outcomes: Vec<&str> = v
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|t| t["outcome"].as_str())
        .collect();
    assert_eq!(&outcomes[..4], ["cannot-run", "ok", "failed", "ok"], "{v}");
    assert_eq!(v[2]["turn"], r2["turn"], "{v}");
    check(
        "log-turns",
        &["log", &st, "--turns", "--branch", "main", "-n", "1"],
    );
    // The text gives a turn's start in local time with its offset; JSON, above, in UTC.
    let text = ok_in(
        ws.tmp.path(),
        &[("TZ", "Asia/Kolkata")],
        &["log", &st, "--turns", "-n", "1"],
    );
    assert!(text.contains(" +05:30 "), "{text}");
}

/// As `check_code`, with `g`'s AWS environment (a remote command).
fn rcheck_code(g: &Garage, code: i32, name: &str, args: &[&str]) -> Value {
    let mut args: Vec<&str> = args.to_vec();
    args.push("--json");
    let o = rrun(g, &args);
    let what = describe_output(&format!("ckptfs {}", args.join(" ")), &o);
    assert_eq!(o.status.code(), Some(code), "{what}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {what}"));
    validate(name, &v, &format!("ckptfs {}", args.join(" ")));
    v
}

fn rcheck(g: &Garage, name: &str, args: &[&str]) -> Value {
    rcheck_code(g, 0, name, args)
}

#[test]
fn remote_commands_match_their_schemas() {
    let g = Garage::start();
    let (env, c1, c2) = two_root_store();
    let st = env.s();
    let key = key_file(env.tmp.path(), "json schema");
    let url = g.url("json/a");
    let mut add = vec!["remote", "add", &st, "origin", &url, "--timeout", "30s"];
    let r = reach(&g, 0, &key);
    add.extend(r.iter().map(String::as_str));
    add.extend(FAST_KDF);
    let v = rcheck(&g, "remote-add", &add);
    assert_eq!(v["encrypted"], true, "{v}");
    assert_eq!(v["region"], "garage", "{v}");

    let v = rcheck(&g, "push", &["push", &st]);
    assert!(v["objects"].as_u64().unwrap_or(0) > 0, "{v}");
    assert_eq!(v["branches"]["main"]["old"], Value::Null, "{v}");
    assert_eq!(v["branches"]["main"]["new"], c2.as_str(), "{v}");
    assert_eq!(v["labels"][0], "first", "{v}");
    // The second push has nothing to upload: the schema holds for empty maps and zeros.
    let v = rcheck(&g, "push", &["push", &st, "origin"]);
    assert_eq!(v["objects"], 0, "{v}");
    assert_eq!(v["records"], 0, "{v}");
    assert!(
        v["branches"].as_object().is_some_and(|m| m.is_empty()),
        "{v}"
    );

    let v = rcheck(&g, "remote-list", &["remote", "list", &st]);
    assert_eq!(v[0]["name"], "origin", "{v}");
    assert_eq!(v[0]["branches"]["main"], c2.as_str(), "{v}");
    assert_eq!(v[0]["labels"]["first"], c1.as_str(), "{v}");
    assert_eq!(v[0]["timeout_ms"], 30_000, "--timeout is recorded: {v}");

    // A second store: clone, then a new checkpoint on A, pushed, fetched and pulled into B.
    let b = env.tmp.path().join("b");
    let bs = s(&b).to_string();
    let mut clone = vec!["clone", &url, &bs];
    clone.extend(r.iter().map(String::as_str));
    let v = rcheck(&g, "clone", &clone);
    assert_eq!(v["records"], 2, "{v}");
    assert_eq!(v["branches"]["main"], c2.as_str(), "{v}");
    write(&env.root("ws").join("a.txt"), b"three\n");
    let c3 = env.capture_id(&["-m", "three"]);
    let v = rcheck(&g, "push", &["push", &st]);
    assert_eq!(v["branches"]["main"]["old"], c2.as_str(), "{v}");
    let v = rcheck(&g, "fetch", &["fetch", &bs]);
    assert_eq!(v["records"], 1, "{v}");
    assert_eq!(v["branches"]["main"], c3.as_str(), "{v}");
    let v = rcheck(&g, "pull", &["pull", &bs, "origin"]);
    assert_eq!(v["fetch"]["remote"], "origin", "{v}");
    assert_eq!(v["forwarded"]["main"]["new"], c3.as_str(), "{v}");

    let v = rcheck(&g, "verify", &["verify", &st, "--remote", "origin"]);
    assert_eq!(v["checkpoints"], 3, "{v}");
    assert!(
        v["findings"].as_array().is_some_and(|f| f.is_empty()),
        "{v}"
    );
    // c2 forgotten on A: gc --remote publishes the forget and repacks what only c2 used.
    ok(["forget", st.as_str(), c2.as_str()]);
    let gc: [&str; 6] = ["gc", &st, "--remote", "origin", "--max-unused", "0%"];
    let v = rcheck(&g, "gc", &[&gc[..], &["--dry-run"]].concat());
    assert_eq!(v["applied"], false, "{v}");
    assert_eq!(v["forgotten"][0], c2.as_str(), "{v}");
    let v = rcheck(&g, "gc", &gc);
    assert_eq!(v["applied"], true, "{v}");
    assert!(v["reached_objects"].as_u64().unwrap_or(0) > 0, "{v}");
    assert!(v["repacked"][0]["live_bytes"].as_u64().is_some(), "{v}");

    let v = rcheck(&g, "remote-remove", &["remote", "remove", &bs, "origin"]);
    assert_eq!(v["removed"], "origin", "{v}");
    let v = rcheck(&g, "remote-list", &["remote", "list", &bs]);
    assert_eq!(v, serde_json::json!([]), "{v}");
}

/// The subcommands (as `a b` for nested ones) whose help lists a `--json` option.
fn commands_with_json() -> BTreeSet<String> {
    fn subcommands(help: &str) -> Vec<String> {
        help.lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|c| *c != "help")
            .map(str::to_string)
            .collect()
    }
    let mut out = BTreeSet::new();
    for c in subcommands(&ok(["--help"])) {
        let help = ok([c.as_str(), "--help"]);
        let nested = subcommands(&help);
        for sub in &nested {
            let h = ok([c.as_str(), sub.as_str(), "--help"]);
            if h.lines().any(|l| l.trim_start().starts_with("--json")) {
                out.insert(format!("{c} {sub}"));
            }
        }
        if help.lines().any(|l| l.trim_start().starts_with("--json")) {
            out.insert(c);
        }
    }
    out
}

#[test]
fn every_json_command_has_a_schema_and_every_schema_a_command() {
    let schemas: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .expect("docs/schema")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    let doc = std::fs::read_to_string(schema_dir().join("../json.md")).expect("docs/json.md");
    for c in commands_with_json() {
        let name = c.replace(' ', "-");
        assert!(
            schemas.contains(&name),
            "`ckptfs {c} --json` has no schema docs/schema/{name}.json (add it to docs/schema/gen.py)"
        );
        assert!(
            doc.contains(&format!("### `{c}")),
            "docs/json.md has no section for `{c}`"
        );
    }
    // Every schema file is valid JSON Schema and documented.
    for name in &schemas {
        let text =
            std::fs::read_to_string(schema_dir().join(format!("{name}.json"))).expect("schema");
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("docs/schema/{name}.json is not a valid schema: {e}"));
        assert!(
            doc.contains(&format!("(schema/{name}.json)")),
            "docs/json.md does not link docs/schema/{name}.json"
        );
    }
}

#[test]
fn merge_reports_match_their_schema() {
    let env = Env::new();
    write(&env.ws().join("t"), b"1\n2\n3\n");
    write(&env.ws().join("b"), b"\0base");
    env.capture_id(&[]);
    ok(["fork", &env.s(), "main", "feat"]);
    ok(["fork", &env.s(), "main", "ahead"]);
    write(&env.ws().join("t"), b"one\n2\n3\n");
    write(&env.ws().join("b"), b"\0ours");
    env.capture_id(&[]);
    write(&env.ws().join("t"), b"1\n2\nthree\n");
    write(&env.ws().join("b"), b"\0theirs");
    env.capture_id(&["-b", "feat"]);
    let st = env.s();
    let v = check_code(1, "merge", &["merge", &st, "feat", "--dry-run"]);
    assert_eq!(v["outcome"], "conflicts");
    check_code(1, "merge", &["merge", &st, "feat"]);
    let v = check("merge", &["merge", &st, "feat", "--take", "ours"]);
    assert_eq!(v["outcome"], "merged");
    let v = check("merge", &["merge", &st, "feat"]);
    assert_eq!(v["outcome"], "up-to-date");
    let v = check("merge", &["merge", &st, "main", "--into", "ahead"]);
    assert_eq!(v["outcome"], "fast-forward");
}

#[test]
fn fork_and_branch_lineage_match_their_schemas() {
    let env = Env::new();
    write(&env.ws().join("t"), b"1\n");
    env.capture_id(&[]);
    let v = check("fork", &["fork", &env.s(), "main", "try", "--count", "2"]);
    assert_eq!(v["branches"], serde_json::json!(["try-1", "try-2"]), "{v}");
    let v = check("fork", &["fork", &env.s(), "main", "one"]);
    assert_eq!(v["branches"], serde_json::json!(["one"]), "{v}");
    write(&env.ws().join("t"), b"2\n");
    env.capture_id(&["-b", "try-1"]);
    ok(["merge", &env.s(), "try-1", "--into", "main", "--no-ff"]);
    ok(["branch", "archive", &env.s(), "one"]);
    let v = check(
        "branch-list",
        &["branch", "list", &env.s(), "--tree", "--all"],
    );
    let try1 = v
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["name"] == "try-1")
        .unwrap_or_else(|| panic!("{v}"));
    assert_eq!(try1["lineage"]["parent"], "main", "{v}");
    assert_eq!(try1["lineage"]["depth"], 1, "{v}");
    assert_eq!(try1["lineage"]["merged_into"][0]["branch"], "main", "{v}");
    check("branch-list", &["branch", "list", &env.s(), "--tree"]);
}

#[test]
fn every_schema_is_exercised() {
    // The schemas the tests above validate against (kept in step with them by hand): a new
    // schema file must be exercised there too.
    let used = [
        "agent-fork",
        "agent-init",
        "agent-log",
        "agent-turn",
        "branch-list",
        "capture",
        "checkpoint",
        "clone",
        "diff",
        "doctor",
        "export",
        "fetch",
        "find",
        "find-history",
        "fingerprint",
        "forget",
        "fork",
        "gc",
        "import",
        "label-delete",
        "log",
        "log-turns",
        "ls",
        "merge",
        "mount",
        "pull",
        "push",
        "recover",
        "remote-add",
        "remote-list",
        "remote-remove",
        "restore",
        "show",
        "stats",
        "status",
        "switch",
        "turn",
        "verify",
    ];
    let schemas: BTreeSet<String> = std::fs::read_dir(schema_dir())
        .expect("docs/schema")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(".json").map(str::to_string)
        })
        .collect();
    let used: BTreeSet<String> = used.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        schemas, used,
        "a schema in docs/schema/ is not exercised by tests/it/cli/json_schema.rs or tests/it/agent, or a listed one is missing"
    );
}
