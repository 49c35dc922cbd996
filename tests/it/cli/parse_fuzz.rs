//! Fuzzing what users type (issue 34): the parsers of durations, sizes, remote URLs,
//! endpoints, regions, credentials and exclude globs, with proptest. Any string gives a value
//! or a clean usage error, never a panic; what is accepted means what it says (a duration or
//! size has the value written; an accepted URL parses again to the same parts; an accepted
//! endpoint survives the parse-print-parse the S3 client's request signer does, which it
//! unwraps: that was a panic for `http://a:notaport`, `http://[`, `http://%zz`).

use std::path::Path;

use ckptfs::remote::backend::{parse_s3_url, S3Backend, S3Options};
use ckptfs::remote::redact::{check_endpoint, redact};
use ckptfs::store::exclude::Excluder;
use ckptfs::units::{parse_duration, parse_size};
use ckptfs::Error;
use proptest::prelude::*;

/// Strings close to what is typed: URL-ish characters and a few that are not, short.
fn typed() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9:/@%\\[\\]._~?#^\\\\ -]{0,24}",
        "(http|https|s3|ftp)://[a-zA-Z0-9:/@%\\[\\]._~?#^\\\\ \n-]{0,24}",
    ]
}

/// The request URL the S3 client builds from an endpoint, put through what its signer
/// does: `http::Uri`, printed, then parsed by `url` (both unwrapped there).
fn signer_parses(endpoint: &str) -> bool {
    let request = format!("{}/bucket/key", endpoint.trim_end_matches('/'));
    request
        .parse::<http::Uri>()
        .ok()
        .and_then(|u| url::Url::parse(&u.to_string()).ok())
        .is_some()
}

fn usage(e: &Error) -> bool {
    matches!(e, Error::Usage(_))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_duration_is_a_value_or_a_usage_error(s in typed()) {
        match parse_duration(&s) {
            Ok(ns) => prop_assert!(ns > 0, "{s:?} gave {ns}"),
            Err(e) => prop_assert!(usage(&e), "{s:?}: {e}"),
        }
    }

    #[test]
    fn a_written_duration_has_its_value(n in 1u64..1_000_000, unit in 0usize..5) {
        let (name, secs) = [("s", 1u64), ("min", 60), ("h", 3600), ("d", 86_400), ("w", 604_800)][unit];
        let want = u128::from(n * secs) * 1_000_000_000;
        match parse_duration(&format!("{n}{name}")) {
            Ok(ns) => prop_assert_eq!(u128::try_from(ns).unwrap(), want),
            // Past 292 years (i64 nanoseconds): refused, not wrapped.
            Err(e) => prop_assert!(want > i64::MAX as u128 && usage(&e), "{e}"),
        }
        // A bare `m` is ambiguous (minutes or months), always refused.
        let bare_m = format!("{n}m");
        prop_assert!(parse_duration(&bare_m).is_err(), "{}", bare_m);
    }

    #[test]
    fn any_size_is_a_value_or_a_usage_error(s in typed()) {
        if let Err(e) = parse_size(&s) {
            prop_assert!(usage(&e), "{s:?}: {e}");
        }
    }

    #[test]
    fn a_written_size_has_its_value_or_overflows_cleanly(n in any::<u64>(), unit in 0usize..5, space in any::<bool>()) {
        let (name, shift) = [("", 0u32), ("K", 10), ("MiB", 20), ("g", 30), ("TB", 40)][unit];
        let s = format!("{n}{}{name}", if space { " " } else { "" });
        match n.checked_mul(1u64 << shift) {
            Some(v) => prop_assert_eq!(parse_size(&s).unwrap(), v, "{}", s),
            None => prop_assert!(parse_size(&s).is_err(), "{s} overflows"),
        }
    }

    #[test]
    fn an_accepted_remote_url_parses_again_to_the_same_parts(s in typed()) {
        match parse_s3_url(&s) {
            Ok((bucket, prefix)) => {
                prop_assert!(!bucket.is_empty());
                prop_assert!(!prefix.starts_with('/') && !prefix.ends_with('/'));
                let again = format!("s3://{bucket}/{prefix}");
                prop_assert_eq!(parse_s3_url(&again).unwrap(), (bucket, prefix));
            }
            Err(e) => prop_assert!(usage(&e), "{s:?}: {e}"),
        }
    }

    #[test]
    fn an_accepted_endpoint_is_one_the_client_can_parse(s in typed()) {
        match check_endpoint(&s) {
            Ok(()) => {
                prop_assert!(s.starts_with("http://") || s.starts_with("https://"), "{s:?}");
                prop_assert!(signer_parses(&s), "accepted {s:?}, which the signer cannot parse");
                prop_assert_eq!(redact(&s), s.clone(), "no credentials in {:?}", s);
            }
            Err(e) => {
                prop_assert!(usage(&e), "{s:?}: {e}");
                // The message never repeats a password it was given.
                prop_assert!(!e.to_string().contains("hunter2"), "{e}");
            }
        }
    }

    #[test]
    fn credentials_in_a_url_never_survive_redaction(
        user in "[a-zA-Z0-9]{1,8}", host in "[a-z0-9.]{1,12}", rest in typed(),
    ) {
        let url = format!("http://{user}:hunter2@{host}/{rest}");
        prop_assert!(!redact(&url).contains(":hunter2@"), "{url:?}");
        let e = check_endpoint(&url).unwrap_err();
        prop_assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    /// Building the client makes no request: any region given with a good endpoint is a
    /// client or a usage error (a newline in it was a panic in the client's header code).
    #[test]
    fn any_region_builds_a_client_or_is_refused(region in typed()) {
        let o = S3Options {
            bucket: "b".into(),
            endpoint: Some("http://127.0.0.1:9".into()),
            region: Some(region.clone()),
            ..S3Options::default()
        };
        if let Err(e) = S3Backend::new(&o) {
            prop_assert!(usage(&e), "{region:?}: {e}");
        }
    }

    #[test]
    fn any_exclude_glob_compiles_or_is_a_usage_error_naming_it(
        patterns in proptest::collection::vec(typed(), 1..4),
        path in "[a-z.*/!\\[\\]]{0,16}",
    ) {
        match Excluder::compile("r", &patterns) {
            Ok(x) => {
                let rel = Path::new(&path);
                let name = rel.file_name().unwrap_or_default();
                let _ = x.excluded(rel, name);
            }
            Err(e) => {
                prop_assert!(usage(&e), "{patterns:?}: {e}");
                prop_assert!(e.to_string().contains("root r"), "{e}");
            }
        }
    }
}

/// The endpoints that were panics in the S3 client (found by the properties above), refused
/// in one line before any request.
#[test]
fn endpoints_the_client_cannot_parse_are_refused() {
    for e in [
        "http://a:notaport",
        "http://[",
        "http://%zz",
        "http://a\\b",
        "http://a^b",
        "http://:9",
        "https://:",
        "http://a/b?c#d",
    ] {
        let err = check_endpoint(e).expect_err(e);
        assert!(usage(&err), "{e}: {err}");
    }
    for e in [
        "http://127.0.0.1:3900",
        "http://[::1]:3900",
        "https://s3.example.com/",
        "http://garage:3900",
    ] {
        check_endpoint(e).unwrap_or_else(|err| panic!("{e}: {err}"));
        assert!(signer_parses(e), "{e}");
    }
}
