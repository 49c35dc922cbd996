//! Checkpoint id prefixes on the command line: a too-short prefix says so, an ambiguous one
//! lists its candidates (newest first, with time, branch and message), a unique one resolves.

use std::collections::HashMap;

use crate::support::*;
use ckptfs::id::ObjectId;
use ckptfs::store::checkpoint::Checkpoint;
use ckptfs::Store;

/// Variants of `base` (message `turn N`, N seconds later) until `want` of them share their
/// first 4 hex digits; returns those, oldest first. Hashes in memory and writes nothing: the
/// record is encoded once with marker values and the variants' bytes made by replacing them
/// (the encoding is canonical JSON, so that is what `encode` gives for the variant).
fn sharing_a_prefix(base: &Checkpoint, want: usize) -> Vec<Checkpoint> {
    const MSG: &str = "@message@";
    const TIME: i64 = 1_234_567_890_123_456_789;
    let variant = |n: u64| {
        let mut c = base.clone();
        c.message = format!("turn {n}");
        c.time_ns = base.time_ns + i64::try_from(n).unwrap() * 1_000_000_000;
        c
    };
    let mut marked = base.clone();
    (marked.message, marked.time_ns) = (MSG.into(), TIME);
    let template = String::from_utf8(marked.encode()).unwrap();
    assert_eq!(template.matches(MSG).count(), 1);
    assert_eq!(template.matches(&TIME.to_string()).count(), 1);
    let mut buckets: HashMap<String, Vec<u64>> = HashMap::new();
    for n in 0u64.. {
        let c = variant(n);
        let bytes = template
            .replace(MSG, &c.message)
            .replace(&TIME.to_string(), &c.time_ns.to_string());
        let prefix = ObjectId::of(bytes.as_bytes()).to_hex()[..4].to_string();
        let b = buckets.entry(prefix).or_default();
        b.push(n);
        if b.len() == want {
            let out: Vec<Checkpoint> = b.iter().map(|&n| variant(n)).collect();
            assert!(out.iter().all(|c| prefix_of(c) == prefix_of(&out[0])));
            return out;
        }
    }
    unreachable!()
}

/// The first 4 hex digits of a record's id.
fn prefix_of(c: &Checkpoint) -> String {
    ObjectId::of(&c.encode()).to_hex()[..4].to_string()
}

/// A store with one captured checkpoint plus `n` more records sharing a 4-digit prefix;
/// returns the env, the prefix and the ids of the `n` records, oldest first.
fn store_with_twins(n: usize) -> (Env, String, Vec<String>) {
    let env = Env::new();
    small_tree(env.ws());
    let first = env.capture_id(&[]);
    let store = Store::open(&env.store).unwrap();
    let base = store
        .read_checkpoint(&ObjectId::parse(&first).unwrap())
        .unwrap();
    let ids: Vec<String> = sharing_a_prefix(&base, n)
        .iter()
        .map(|c| store.write_checkpoint(c).unwrap().to_hex())
        .collect();
    let prefix = ids[0][..4].to_string();
    (env, prefix, ids)
}

#[test]
fn short_prefix_says_too_short() {
    let env = Env::new();
    small_tree(env.ws());
    let id = env.capture_id(&[]);
    for short in ["0", "00", &id[..3]] {
        let err = fails(2, ["show", &env.s(), short]);
        assert!(
            err.contains("too short") && err.contains("at least 4 hex digits"),
            "{short}: {err}"
        );
    }
    // A label or branch of a short hex-looking name still wins over the prefix rule.
    ok(["label", &env.s(), &id, "ab"]);
    assert!(ok(["show", &env.s(), "ab"]).contains(&id));
    // A prefix long enough but matching nothing is "not found"; a unique one resolves, in
    // either case.
    let other = if id.starts_with("ffff") {
        "0000"
    } else {
        "ffff"
    };
    let err = fails(1, ["show", &env.s(), other]);
    assert!(err.contains("not found"), "{err}");
    assert!(ok(["show", &env.s(), &id[..4]]).contains(&id));
    assert!(ok(["show", &env.s(), &id[..8].to_uppercase()]).contains(&id));
}

#[test]
fn ambiguous_prefix_lists_candidates_newest_first() {
    let (env, prefix, ids) = store_with_twins(2);
    let err = fails(2, ["show", &env.s(), &prefix]);
    assert!(
        err.contains(&format!("ambiguous checkpoint prefix {prefix}")),
        "{err}"
    );
    let (older, newer) = (&ids[0][..12], &ids[1][..12]);
    let (po, pn) = (err.find(older), err.find(newer));
    assert!(
        po.is_some() && pn.is_some() && pn < po,
        "candidates missing or not newest first: {err}"
    );
    // Each candidate carries its time (UTC, marked Z), branch and message.
    assert!(err.contains(" main \"turn "), "{err}");
    assert!(err.contains("Z main"), "{err}");
    // The same one-line error for every command that takes a checkpoint.
    let err = fails(2, ["ls", &env.s(), &format!("{prefix}:ws")]);
    assert!(err.contains("ambiguous") && err.contains(older), "{err}");
    // One more digit that tells them apart resolves.
    let n = (4..64)
        .find(|&n| ids[0][..n] != ids[1][..n])
        .expect("distinct ids");
    assert!(ok(["show", &env.s(), &ids[1][..n]]).contains(&ids[1]));
}

#[test]
fn ambiguous_prefix_lists_at_most_ten() {
    let (env, prefix, ids) = store_with_twins(12);
    let err = fails(2, ["show", &env.s(), &prefix]);
    assert!(err.contains("(12 matches"), "{err}");
    assert!(err.contains("and 2 more"), "{err}");
    let listed = ids.iter().filter(|id| err.contains(&id[..12])).count();
    assert_eq!(listed, 10, "{err}");
    // The two oldest are the ones left out.
    assert!(
        !err.contains(&ids[0][..12]) && !err.contains(&ids[1][..12]),
        "{err}"
    );
}
