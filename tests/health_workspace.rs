//! Health of stores with live workspaces (kernel overlay mounts): gc keeps what a mounted
//! workspace stands on, and a `checkpoint` of a live workspace failed or aborted at its I/O
//! steps leaves the old state or the new one.

mod wscommon;

use std::fs;
use std::process::Command;

use wscommon::*;

fn populate(room: &std::path::Path) {
    fs::create_dir_all(room.join("src")).unwrap();
    fs::write(room.join("notes.md"), "notes\n").unwrap();
    fs::write(room.join("src/a.py"), "print(1)\n".repeat(500)).unwrap();
}

fn checkpoints(store: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(format!("{store}/checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.len() == 64)
        .collect();
    v.sort();
    v
}

#[test]
fn gc_keeps_what_a_live_workspace_stands_on() {
    let w = Workspace::new(populate);
    let base = checkpoints(w.store())[0].clone();
    let mut ids = Vec::new();
    for i in 0..3 {
        fs::write(w.path(&format!("turn{i}.txt")), format!("turn {i}\n")).unwrap();
        ids.push(w.checkpoint(&format!("turn {i}")));
    }
    let r: serde_json::Value = serde_json::from_str(&ok(&[
        "gc",
        w.store(),
        "--keep-last",
        "1",
        "--clear-cache",
        "--json",
    ]))
    .unwrap();
    let left = checkpoints(w.store());
    let st: serde_json::Value = serde_json::from_str(
        &fs::read_to_string(format!("{}/upper/main/base.json", w.store())).unwrap(),
    )
    .unwrap();
    let ws_base = st["base"].as_str().unwrap().to_string();
    assert!(left.contains(&ws_base), "workspace base pruned: {r}");
    assert!(left.contains(ids.last().unwrap()));
    let _ = base;
    // The mounted workspace still reads everything, including the lower layer.
    assert_eq!(
        fs::read_to_string(w.path("src/a.py")).unwrap(),
        "print(1)\n".repeat(500)
    );
    assert_eq!(fs::read_to_string(w.path("turn0.txt")).unwrap(), "turn 0\n");
    fs::write(w.path("after-gc.txt"), "x").unwrap();
    let id = w.checkpoint("after gc");
    assert_eq!(
        ok(&["cat", w.store(), &format!("{id}:ws/src/a.py")]),
        "print(1)\n".repeat(500)
    );
    assert!(ok(&["verify", w.store()]).contains("0 findings"));
    let o = run(&["doctor", w.store(), "--json"]);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let problems: Vec<&serde_json::Value> = d["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn checkpoint_of_a_live_workspace_under_faults() {
    let w = Workspace::new(populate);
    fs::write(w.path("count.txt"), "0").unwrap();
    let o = Command::new(bin())
        .args(["checkpoint", w.room(), "-m", "count"])
        .env("CKPTFS_FAULT", "count")
        .output()
        .unwrap();
    assert!(o.status.success());
    let steps: u64 = String::from_utf8_lossy(&o.stderr)
        .lines()
        .find_map(|l| {
            l.strip_prefix("ckptfs: io steps: ")
                .map(|n| n.trim().parse().unwrap())
        })
        .expect("step count");
    let points: Vec<u64> = (0..12).map(|i| 1 + i * (steps - 1) / 11).collect();
    let mut n_iter = 0;
    for mode in ["fail", "abort"] {
        for &n in &points {
            n_iter += 1;
            let content = format!("iteration {n_iter}");
            fs::write(w.path("count.txt"), &content).unwrap();
            let old = head_of(w.store());
            let o = Command::new("sh")
                .arg("-c")
                .arg("ulimit -c 0; exec \"$@\"")
                .arg("sh")
                .arg(bin())
                .args(["checkpoint", w.room(), "-m", "faulty"])
                .env("CKPTFS_FAULT", format!("{mode}:{n}"))
                .output()
                .unwrap();
            let ctx = format!(
                "checkpoint {mode}:{n}/{steps}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let r = run(&["recover", w.store()]);
            assert!(
                r.status.success(),
                "{ctx}: recover: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert!(ok(&["verify", w.store()]).contains("0 findings"), "{ctx}");
            let new = head_of(w.store());
            if new != old {
                assert_eq!(
                    ok(&["cat", w.store(), &format!("{new}:ws/count.txt")]),
                    content,
                    "{ctx}: new head is not the workspace's state"
                );
            }
            // The workspace keeps working: the next checkpoint records the same state.
            let id = w.checkpoint("after fault");
            assert_eq!(
                ok(&["cat", w.store(), &format!("{id}:ws/count.txt")]),
                content,
                "{ctx}"
            );
        }
    }
}

fn head_of(store: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["branch", "list", store, "--json"])).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "main")
        .and_then(|b| b["head"].as_str())
        .unwrap()
        .to_string()
}
