//! URLs in messages: never their credentials.
//!
//! A URL may carry a user name and password (`http://KEY:SECRET@host`). ckptfs refuses them
//! in an endpoint ([`check_endpoint`]: credentials come from the AWS environment or a
//! credentials file, never from a URL that would be stored, audited and printed), and every
//! URL or message that may hold one goes through [`redact`] before it is shown or written.

use crate::error::{Error, Result};

/// `text` with the userinfo (`user:password@`) of every `scheme://` URL in it removed.
/// Works on a bare URL and on a message quoting URLs (an HTTP client's error).
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the path, query, fragment, or anything that cannot be in it.
        let end = tail
            .find(|c: char| {
                matches!(
                    c,
                    '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | ')' | ']'
                ) || c.is_whitespace()
                    || c.is_control()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => out.push_str(&authority[at + 1..]),
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// True when `url` names a user (or a password) before its host.
pub fn has_userinfo(url: &str) -> bool {
    redact(url) != url
}

/// Checks an S3 endpoint URL: `http://` or `https://`, a host (a name, an IPv4 address or a
/// bracketed IPv6 one), an optional port and path, and nothing else: no credentials, query,
/// fragment, spaces, control characters or anything the URL parser would rewrite. The HTTP
/// client unwraps what it parses of the endpoint, so whatever passes here must parse.
///
/// # Errors
/// `Usage` naming the endpoint (without any credentials it held).
pub fn check_endpoint(endpoint: &str) -> Result<()> {
    check_url("endpoint", endpoint)
}

/// [`check_endpoint`] for a URL named `what` in messages (an environment variable).
///
/// # Errors
/// `Usage` naming `what` and the URL (without any credentials it held).
pub fn check_url(what: &str, endpoint: &str) -> Result<()> {
    let shown = redact(endpoint);
    if has_userinfo(endpoint) {
        return Err(Error::Usage(format!(
            "{what} {shown:?}: credentials in the URL are refused (they would be stored and \
             shown); give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or --credentials FILE"
        )));
    }
    let bad = |why: &str| {
        Error::Usage(format!(
            "{what} {shown:?}: expected http://HOST[:PORT] or https://HOST[:PORT] ({why})"
        ))
    };
    // (No `?`, `#` or `@` either: no query, fragment or userinfo gets past this.)
    let simple = endpoint
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~:/[]%".contains(&b));
    if !simple {
        return Err(bad("a character a URL cannot carry as is"));
    }
    let url = url::Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    // What the parser would rewrite (`%zz`, `a/../b`, a default port) is refused rather than
    // sent somewhere other than what was typed.
    let normal = url.as_str().trim_end_matches('/');
    if !normal.eq_ignore_ascii_case(endpoint.trim_end_matches('/')) {
        return Err(bad(&format!("write it as {normal}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_goes_everywhere() {
        assert_eq!(redact("http://K:S@h:9/b"), "http://h:9/b");
        assert_eq!(redact("http://h:9/b"), "http://h:9/b");
        assert_eq!(
            redact("error sending request for url (http://a:b@127.0.0.1:1/x?y=1): refused"),
            "error sending request for url (http://127.0.0.1:1/x?y=1): refused"
        );
        assert_eq!(
            redact("s3://k:s@b/p and https://u@h"),
            "s3://b/p and https://h"
        );
        assert_eq!(redact("no url here"), "no url here");
        assert!(has_userinfo("http://u:p@h"));
        assert!(!has_userinfo("http://h/a@b"));
    }

    #[test]
    fn endpoints() {
        assert!(check_endpoint("http://127.0.0.1:3900").is_ok());
        assert!(check_endpoint("https://s3.example").is_ok());
        let e = check_endpoint("http://k3y:s3cr3t@h")
            .unwrap_err()
            .to_string();
        assert!(
            !e.contains("s3cr3t") && !e.contains("k3y") && e.contains("AWS_SECRET_ACCESS_KEY"),
            "{e}"
        );
        for bad in ["notaurl", "", "http://", "http://a b", "ftp://h"] {
            assert!(check_endpoint(bad).is_err(), "{bad}");
        }
    }
}
