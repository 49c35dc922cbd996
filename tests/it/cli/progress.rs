//! Progress bars of long operations: drawn on a terminal (a pseudo-terminal made by
//! `script`), with totals, rate, ETA and elapsed time; never without a terminal, with
//! `--quiet`/`-q` or with `--json`.

use crate::support::*;

/// A store whose room has a few MiB in one file and some small files, captured twice (the
/// second with a changed file, so gc has something to mark across checkpoints).
fn env_with_data() -> Env {
    let env = Env::new();
    write(&env.ws().join("big.bin"), &random_bytes(1, 3 << 20));
    for i in 0..50 {
        write(
            &env.ws().join(format!("d/f{i}.txt")),
            format!("{i}\n").as_bytes(),
        );
    }
    env.capture_id(&[]);
    write(&env.ws().join("d/f0.txt"), b"changed\n");
    env.capture_id(&[]);
    env
}

/// What a drawn bar says: its phase name, and the rate and elapsed time.
fn assert_bar(out: &str, phase: &str, what: &str) {
    assert!(
        out.contains(phase) && out.contains("elapsed") && out.contains("/s"),
        "{what}: expected a progress bar for {phase:?} (rate and elapsed time) on the \
         terminal, got:\n{out}"
    );
}

fn assert_no_bar(out: &str, what: &str) {
    assert!(
        !out.contains("elapsed") && !out.contains("ETA"),
        "{what}: expected no progress output, got:\n{out}"
    );
}

#[test]
fn long_operations_draw_progress_on_a_terminal() {
    let env = env_with_data();
    let st = env.s();
    // A file changed since the last capture, so capture reads (bar of bytes with a total).
    write(&env.ws().join("big.bin"), &random_bytes(2, 3 << 20));
    let out_dir = env.path("out");
    let archive = env.path("a.tar.zst");
    let store2 = env.path("store2");
    let cases: Vec<(Vec<String>, &[&str])> = vec![
        (vec!["capture".into(), st.clone()], &["capture ["]),
        (
            vec!["verify".into(), st.clone()],
            &["verify trees", "verify chunks ["],
        ),
        (
            vec![
                "restore".into(),
                st.clone(),
                "main".into(),
                "--to".into(),
                s(&out_dir).into(),
            ],
            &["restore check", "restore ["],
        ),
        (
            vec![
                "archive".into(),
                st.clone(),
                "--all".into(),
                "--out".into(),
                s(&archive).into(),
            ],
            &["archive ["],
        ),
        (
            vec!["unarchive".into(), s(&archive).into(), s(&store2).into()],
            &["unarchive check [", "unarchive scan", "unarchive ["],
        ),
        (
            vec!["gc".into(), st.clone(), "--keep-last".into(), "1".into()],
            &["gc mark", "gc sweep [", "gc delete ["],
        ),
        (
            vec!["doctor".into(), st.clone()],
            &["doctor trees", "doctor objects ["],
        ),
    ];
    for (args, phases) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = on_terminal(&argv);
        assert_eq!(code, 0, "ckptfs {}: {out}", args.join(" "));
        for phase in phases {
            assert_bar(&out, phase, &args.join(" "));
        }
        // A bar with a total shows its ETA.
        if phases.iter().any(|p| p.ends_with('[')) {
            assert!(out.contains("ETA"), "{}: no ETA in:\n{out}", args.join(" "));
        }
    }
    // The restore wrote the tree the bar counted.
    assert_eq!(
        std::fs::read(out_dir.join("big.bin")).expect("restored file"),
        random_bytes(2, 3 << 20)
    );
}

#[test]
fn no_progress_without_a_terminal_with_quiet_or_with_json() {
    let env = env_with_data();
    let st = env.s();
    // No terminal: stderr holds nothing of a bar.
    for args in [
        vec!["verify", &st],
        vec!["doctor", &st],
        vec!["gc", &st, "--dry-run"],
    ] {
        let o = run(&args);
        assert!(
            o.status.success(),
            "{}",
            describe_output(&args.join(" "), &o)
        );
        assert_no_bar(&stderr(&o), &format!("{} (no terminal)", args.join(" ")));
    }
    write(&env.ws().join("big.bin"), &random_bytes(3, 3 << 20));
    let o = run(["capture", &st]);
    assert!(o.status.success(), "{}", describe_output("capture", &o));
    assert_no_bar(&stderr(&o), "capture (no terminal)");
    // On a terminal, --quiet, -q (before or after the subcommand) and --json silence it.
    write(&env.ws().join("big.bin"), &random_bytes(4, 3 << 20));
    for args in [
        vec!["--quiet", "capture", &st],
        vec!["verify", &st, "-q"],
        vec!["-q", "doctor", &st],
        vec!["verify", &st, "--json"],
        vec!["doctor", &st, "--json"],
    ] {
        let (code, out) = on_terminal(&args);
        assert!(code == 0, "{}: {out}", args.join(" "));
        assert_no_bar(&out, &args.join(" "));
    }
    // --json on a terminal: stdout is still one JSON document.
    let (code, out) = on_terminal(&["verify", &st, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("verify --json is JSON");
    assert!(v.get("findings").is_some(), "{v}");
}

#[test]
fn workspace_checkpoint_draws_progress_on_a_terminal() {
    let ws = Workspace::new(|room| write(&room.join("a.txt"), b"a\n"));
    write(&ws.path("big.bin"), &random_bytes(5, 3 << 20));
    let (code, out) = on_terminal(&["checkpoint", ws.room(), "-m", "turn"]);
    assert_eq!(code, 0, "{out}");
    assert_bar(&out, "checkpoint [", "checkpoint");
    write(&ws.path("big.bin"), &random_bytes(6, 3 << 20));
    let (code, out) = on_terminal(&["-q", "checkpoint", ws.room(), "-m", "turn 2"]);
    assert_eq!(code, 0, "{out}");
    assert_no_bar(&out, "checkpoint -q");
}
