//! The Garage harness the remote tests stand on: a node serves S3 with the test key, a killed
//! node stops serving and serves its data again after a restart, and a 3-node cluster with
//! replication factor 3 keeps serving when one node is down.

use crate::support::*;

#[test]
fn one_node_serves_survives_restart() {
    let mut g = Garage::start();
    g.s3_put("a/b", b"hello");
    assert_eq!(g.s3_get("a/b").as_deref(), Some(&b"hello"[..]));
    assert_eq!(g.s3_list("a/"), vec!["a/b".to_string()]);
    assert_eq!(g.s3_get("a/missing"), None);
    g.kill(0);
    assert_eq!(g.s3_get("a/b"), None, "a killed node must not serve");
    g.restart(0);
    eventually("the restarted node serves its data again", || {
        g.s3_get("a/b").as_deref() == Some(&b"hello"[..])
    });
    g.s3_delete("a/b");
    assert!(g.s3_list("a/").is_empty());
    assert_eq!(g.s3_list(""), vec![PROBE_KEY.to_string()]);
}

#[test]
fn three_node_cluster_tolerates_one_down() {
    let mut g = Garage::cluster(3);
    g.s3_put("k", b"replicated");
    g.kill(2);
    assert_eq!(
        g.s3_get_from(0, "k").as_deref(),
        Some(&b"replicated"[..]),
        "{}",
        g.logs()
    );
    g.s3_put("k2", b"written with a node down");
    let out = g.curl(1, "GET", "k2", None);
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    g.restart(2);
    eventually(
        "the restarted node serves what was written while it was down",
        || g.s3_get_from(2, "k2").is_some(),
    );
}
