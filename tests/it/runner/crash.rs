//! `ckptfs turn` killed at every durable I/O step (`CKPTFS_FAULT=abort:N`): after `recover`
//! the store verifies, no turn is left `interrupted`, and the record is honest: the branch
//! moved exactly when the turn is recorded `ok`, with that checkpoint naming the turn.

use crate::support::*;

#[test]
fn a_turn_killed_at_any_step_leaves_a_recoverable_store_and_an_honest_record() {
    let w = Workspace::new(|room| write(&room.join("a.txt"), b"one\n"));
    if !turns_can_run(&w) {
        return;
    }
    let script = format!("echo x >> {}", w.path("a.txt").display());
    let args = ["turn", "--as-root", w.room(), "--", "sh", "-c", &script];
    let total = io_steps(args);
    assert!(total > 5, "{total} steps");
    let (mut recorded, mut not_recorded) = (0, 0);
    for n in spread(total, 64) {
        let ctx = format!("abort at step {n} of {total}");
        let before = head(&w.store, "main");
        let rows_before = turns(&w.store).len();
        let o = run_fault(args, "abort", n);
        recover_and_verify(&w.store, &ctx);
        let after = head(&w.store, "main");
        let rows = turns(&w.store);
        assert!(
            rows.iter()
                .all(|r| r["outcome"] != "interrupted" && r["outcome"] != "running"),
            "{ctx}: {rows:?}"
        );
        if after != before {
            let rec = record_of(&w.store, "main");
            let t = rec["turn"]["id"]
                .as_str()
                .expect("the record names its turn");
            let row = rows.iter().find(|r| r["turn"] == t).expect("turn listed");
            assert_eq!(row["outcome"], "ok", "{ctx}: {row}");
            assert_eq!(row["checkpoint"].as_str(), after.as_deref(), "{ctx}");
            assert_eq!(rec["turn"]["exit_status"], 0);
            recorded += 1;
        } else if rows.len() > rows_before {
            assert_ne!(
                rows[0]["outcome"], "ok",
                "{ctx}: ok but the branch did not move"
            );
            not_recorded += 1;
        } else {
            assert!(
                !o.status.success(),
                "{ctx}: nothing happened but it succeeded"
            );
        }
        // The next case starts as this one did: a killed turn's write is set aside.
        if ok_json(["status", w.store()])[0]["dirty"] == true {
            ok(["switch", w.room(), "--to", "main", "--discard"]);
        }
    }
    // Both sides of the publication were hit.
    assert!(
        recorded > 0 && not_recorded > 0,
        "{recorded} {not_recorded}"
    );
    // The store is usable after all of it: one more turn records one checkpoint.
    let before = log_ids(&w.store, &["--branch", "main"]).len();
    let o = turn(&w, &["--retry"], &["true"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(log_ids(&w.store, &["--branch", "main"]).len(), before + 1);
}
