//! Where a remote's bytes live: the [`Backend`] trait (put, get, ranged get, list, delete of
//! whole keys) and its S3 implementation over the `object_store` crate.
//!
//! `object_store` is async; the rest of ckptfs is synchronous, so [`S3Backend`] owns a small
//! tokio runtime and blocks on it at this trait's boundary. Batches (`put_many`,
//! `get_ranges`) keep several requests in flight on that runtime.
//!
//! Credentials: the standard AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION`...) or a credentials file in the AWS format named on
//! the command line (`--credentials FILE`, its `[default]` or `[PROFILE]` section). They are
//! handed to the client and never written anywhere by ckptfs: the store keeps at most the
//! file's *path*.

use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::error::{Error, Result};
use crate::remote::redact::{check_endpoint, redact};

/// Requests a batch keeps in flight at once.
pub const IN_FLIGHT: usize = 8;

/// How long a request may go without an answer (no byte received) before it is given up,
/// unless the remote records another (`--timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The range `--timeout` accepts: below a second is surely a typo, above ten minutes is
/// indistinguishable from a hang to the person waiting.
pub const TIMEOUT_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(600));
/// After this long without the answer to a call, one line on stderr says what is awaited.
const NOTICE_AFTER: Duration = Duration::from_secs(2);

/// Checks a `--timeout` against [`TIMEOUT_RANGE`].
///
/// # Errors
/// `Usage` naming the value and the range.
pub fn check_timeout(t: Duration) -> Result<()> {
    let (lo, hi) = TIMEOUT_RANGE;
    if t < lo || t > hi {
        return Err(Error::Usage(format!(
            "--timeout {}: give between {} and {}",
            humantime::format_duration(t),
            humantime::format_duration(lo),
            humantime::format_duration(hi)
        )));
    }
    Ok(())
}

/// The operations ckptfs needs of an object store. Keys are relative to the remote's
/// prefix. Every object is written whole and never rewritten in place, except refs and locks
/// (which are small and replaced whole).
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Writes `data` at `key` (replacing it).
    fn put(&self, key: &str, data: Vec<u8>) -> Result<()>;
    /// Writes several keys, [`IN_FLIGHT`] at a time; stops at the first error.
    fn put_many(&self, items: Vec<(String, Vec<u8>)>) -> Result<()>;
    /// The whole object, or `None` when there is no such key.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Byte ranges of objects, [`IN_FLIGHT`] at a time, in the order asked.
    fn get_ranges(&self, reqs: &[(String, Range<u64>)]) -> Vec<Result<Vec<u8>>>;
    /// Every key under `prefix` with its size.
    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>>;
    /// Removes `key` (a missing key is success).
    fn delete(&self, key: &str) -> Result<()>;
    /// What to call it in messages (`s3://bucket/prefix`).
    fn describe(&self) -> String;
}

/// The largest object read whole (config, refs, records, pack indexes; packs are read by
/// range): what a server announces beyond it is refused before anything is allocated.
pub const MAX_WHOLE_OBJECT: u64 = 512 << 20;

/// How to reach an S3 bucket.
#[derive(Clone, Debug, Default)]
pub struct S3Options {
    pub bucket: String,
    pub prefix: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// An AWS-format credentials file (else the environment).
    pub credentials: Option<std::path::PathBuf>,
    /// A profile in that file (default `default`).
    pub profile: Option<String>,
    /// How long a request may go without an answer (default [`DEFAULT_TIMEOUT`]).
    pub timeout: Option<Duration>,
}

/// Splits `s3://BUCKET/PREFIX` into bucket and prefix (no leading or trailing `/`).
///
/// # Errors
/// `Usage` naming the URL when it is not of that form.
pub fn parse_s3_url(url: &str) -> Result<(String, String)> {
    let shown = redact(url);
    let rest = url.strip_prefix("s3://").ok_or_else(|| {
        Error::Usage(format!("remote URL {shown:?}: expected s3://BUCKET/PREFIX"))
    })?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.trim_matches('/');
    let ok_bucket = !bucket.is_empty()
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    let ok_prefix = prefix
        .split('/')
        .all(|p| !p.is_empty() && p != "." && p != "..")
        || prefix.is_empty();
    if !ok_bucket || !ok_prefix || prefix.contains(|c: char| c.is_control()) {
        return Err(Error::Usage(format!(
            "remote URL {shown:?}: expected s3://BUCKET/PREFIX (bucket of a-z 0-9 . -, prefix of \
             non-empty path parts)"
        )));
    }
    Ok((bucket.to_string(), prefix.to_string()))
}

/// An S3 bucket (and prefix) through `object_store`, blocking on its own runtime.
pub struct S3Backend {
    store: AmazonS3,
    rt: tokio::runtime::Runtime,
    prefix: String,
    url: String,
    /// Where requests go, for the waiting notice (`http://HOST:PORT`, or AWS).
    server: String,
    timeout: Duration,
    noticed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the client (it holds the credentials).
        write!(f, "S3Backend({})", self.url)
    }
}

/// Reads `aws_access_key_id`, `aws_secret_access_key` and `aws_session_token` of `profile`
/// from an AWS-format credentials file.
fn read_credentials_file(path: &Path, profile: &str) -> Result<(String, String, Option<String>)> {
    let data = crate::store::object::read_regular_file(path, 1 << 20, true, "credentials file")?
        .ok_or_else(|| Error::NotFound(format!("credentials file {}", path.display())))?;
    let text = String::from_utf8_lossy(&data);
    let mut section = String::new();
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = s.trim().trim_start_matches("profile ").to_string();
            continue;
        }
        if section != profile {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().to_string();
            match k.trim() {
                "aws_access_key_id" => id = Some(v),
                "aws_secret_access_key" => secret = Some(v),
                "aws_session_token" => token = Some(v),
                _ => {}
            }
        }
    }
    match (id, secret) {
        (Some(i), Some(s)) => Ok((i, s, token)),
        _ => Err(Error::Invalid(format!(
            "credentials file {}: no aws_access_key_id and aws_secret_access_key in [{profile}]",
            path.display()
        ))),
    }
}

/// The AWS environment the client reads: credentials it puts in headers, and URLs it parses
/// (both unwrapped inside the client, so a bad value was a panic). An empty variable is
/// left to the client (as unset).
///
/// # Errors
/// `Usage` naming the variable, never a credential's value.
fn check_environment() -> Result<()> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        if let Some(v) = std::env::var_os(name).filter(|v| !v.is_empty()) {
            check_credential(name, &v.to_string_lossy())?;
        }
    }
    for name in [
        "AWS_ENDPOINT",
        "AWS_ENDPOINT_URL",
        "AWS_METADATA_ENDPOINT",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        if let Some(v) = var(name) {
            crate::remote::redact::check_url(name, &v)?;
        }
    }
    if let Some(v) = var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
        let name = "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI";
        if !v.starts_with('/') {
            return Err(Error::Usage(format!(
                "{name} {}: expected a path starting with /",
                crate::text::quote::text(&v)
            )));
        }
        crate::remote::redact::check_url(name, &format!("http://169.254.170.2{v}"))?;
    }
    Ok(())
}

/// A credential must be printable ASCII without spaces (what S3 keys and tokens are, and
/// what a header carries).
///
/// # Errors
/// `Usage` naming where the value came from, never the value.
fn check_credential(what: &str, v: &str) -> Result<()> {
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()) {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{what}: not a credential (printable ASCII without spaces expected; an empty value, a \
         space, a newline or a non-ASCII character is in it)"
    )))
}

/// A region name as S3 services write them (`us-east-1`, `garage`): 1 to 64 letters, digits,
/// `-`, `_` or `.` (it goes into signed request headers).
///
/// # Errors
/// `Usage` naming where the region came from.
fn check_region(what: &str, r: &str) -> Result<()> {
    let ok = !r.is_empty()
        && r.len() <= 64
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        return Ok(());
    }
    Err(Error::Usage(format!(
        "{what} {}: a region is 1 to 64 letters, digits, '-', '_' or '.' (e.g. us-east-1)",
        crate::text::quote::text(r)
    )))
}

/// Whether an error, or one of its causes, is a time-out.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if c.to_string().contains("timed out") {
            return true;
        }
        cur = c.source();
    }
    false
}

fn s3_error(what: &str, url: &str, e: object_store::Error) -> Error {
    // object_store's messages name the request URL: without its userinfo.
    let short = first_line(&e.to_string());
    // With no credentials given, object_store asks the instance metadata service last; its
    // refusal is what comes back. Say what is missing.
    // (Its address is 169.254.169.254 unless AWS_METADATA_ENDPOINT moves it; its paths are
    // /latest/api/token and /latest/meta-data/.)
    if ["169.254.169.254", "/latest/api/token", "/latest/meta-data/"]
        .iter()
        .any(|m| short.contains(m))
    {
        let why = short
            .rsplit(": ")
            .map(str::trim)
            .find(|p| !p.is_empty())
            .unwrap_or("no answer");
        return Error::Usage(format!(
            "{what} {}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
             give --credentials FILE (the instance metadata service, tried last, refused: {why})",
            redact(url),
        ));
    }
    if timed_out(&e) {
        return Error::io_op(
            format!("{what} {}", redact(url)),
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within the remote's --timeout: {short}"),
            ),
        );
    }
    Error::io_op(
        format!("{what} {}", redact(url)),
        std::io::Error::other(short),
    )
}

impl S3Backend {
    /// Builds the client (no request is made).
    ///
    /// # Errors
    /// `Invalid` for options `object_store` refuses; errors reading a credentials file.
    pub fn new(o: &S3Options) -> Result<S3Backend> {
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&o.bucket);
        if let Some(e) = &o.endpoint {
            check_endpoint(e)?;
            b = b
                .with_endpoint(e)
                .with_allow_http(e.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        for (what, r) in [
            ("--region", o.region.clone()),
            ("AWS_REGION", std::env::var("AWS_REGION").ok()),
            (
                "AWS_DEFAULT_REGION",
                std::env::var("AWS_DEFAULT_REGION").ok(),
            ),
        ] {
            if let Some(r) = r {
                check_region(what, &r)?;
            }
        }
        if let Some(r) = &o.region {
            b = b.with_region(r);
        } else if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            b = b.with_region("us-east-1");
        }
        // The client puts the key id and the token in headers and unwraps the result: a
        // value no header can carry is refused here, named, never shown.
        check_environment()?;
        if let Some(path) = &o.credentials {
            let profile = o.profile.as_deref().unwrap_or("default");
            let (id, secret, token) = read_credentials_file(path, profile)?;
            let named = |k: &str| format!("credentials file {} [{profile}] {k}", path.display());
            check_credential(&named("aws_access_key_id"), &id)?;
            check_credential(&named("aws_secret_access_key"), &secret)?;
            if let Some(t) = &token {
                check_credential(&named("aws_session_token"), t)?;
            }
            b = b.with_access_key_id(id).with_secret_access_key(secret);
            if let Some(t) = token {
                b = b.with_token(t);
            }
        }
        // Few, quick retries: a lazy read behind a dead server must fail (EIO) in seconds,
        // not after object_store's default three minutes. A request that receives nothing
        // for `timeout` is given up and not retried past it; one that keeps receiving may
        // take six times as long (a large pack on a slow link).
        let timeout = o.timeout.unwrap_or(DEFAULT_TIMEOUT);
        check_timeout(timeout)?;
        let retry = RetryConfig {
            max_retries: 3,
            retry_timeout: timeout,
            ..Default::default()
        };
        let client = ClientOptions::new()
            .with_connect_timeout(timeout.min(Duration::from_secs(3)))
            .with_read_timeout(timeout)
            .with_timeout((timeout * 6).max(Duration::from_secs(60)))
            .with_allow_http(
                o.endpoint
                    .as_deref()
                    .is_some_and(|e| e.starts_with("http://")),
            );
        b = b.with_retry(retry).with_client_options(client);
        let url = if o.prefix.is_empty() {
            format!("s3://{}", o.bucket)
        } else {
            format!("s3://{}/{}", o.bucket, o.prefix)
        };
        let store = b
            .build()
            .map_err(|e| Error::Invalid(format!("remote {url}: {}", first_line(&e.to_string()))))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("ckptfs-s3")
            .enable_all()
            .build()
            .map_err(|e| Error::io_op("starting the S3 client runtime", e))?;
        Ok(S3Backend {
            store,
            rt,
            prefix: o.prefix.clone(),
            url,
            server: o
                .endpoint
                .as_deref()
                .map_or_else(|| "AWS S3".to_string(), redact),
            timeout,
            noticed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Runs one call on the runtime. Once per backend, a call still unanswered after
    /// [`NOTICE_AFTER`] says on stderr what it waits for and when it gives up (when
    /// [`crate::progress::notices`] are on): a server that never answers is otherwise
    /// silence.
    fn wait<F: std::future::Future>(&self, f: F) -> F::Output {
        use std::sync::atomic::Ordering;
        self.rt.block_on(async {
            let mut f = std::pin::pin!(f);
            if self.noticed.load(Ordering::Relaxed) || !crate::progress::notices() {
                return f.await;
            }
            tokio::select! {
                r = &mut f => r,
                () = tokio::time::sleep(NOTICE_AFTER) => {
                    if !self.noticed.swap(true, Ordering::Relaxed) {
                        eprintln!(
                            "ckptfs: waiting for {} ({}); a request with no answer for {} \
                             is given up",
                            self.server,
                            redact(&self.url),
                            humantime::format_duration(self.timeout)
                        );
                    }
                    f.await
                }
            }
        })
    }

    /// A whole object's bytes, at most [`MAX_WHOLE_OBJECT`]: the size a server announces is
    /// checked before anything is allocated for it, and the body is read as a stream that
    /// stops at the bound (a server may announce a terabyte, or send more than it said).
    async fn read_bounded(&self, key: &str, r: object_store::GetResult) -> Result<Vec<u8>> {
        let what = || format!("{}/{key}", redact(&self.url));
        let announced = r.meta.size;
        if announced > MAX_WHOLE_OBJECT {
            return Err(Error::Invalid(format!(
                "remote object {} announces {announced} bytes, more than {MAX_WHOLE_OBJECT}: \
                 refused (not a ckptfs remote, or a server that lies)",
                what()
            )));
        }
        let mut out = Vec::with_capacity(usize::try_from(announced).unwrap_or(0));
        let mut stream = r.into_stream();
        while let Some(chunk) = stream.next().await {
            let c = chunk.map_err(|e| s3_error("reading", &format!("{}/{key}", self.url), e))?;
            if (out.len() + c.len()) as u64 > MAX_WHOLE_OBJECT {
                return Err(Error::Invalid(format!(
                    "remote object {} is more than {MAX_WHOLE_OBJECT} bytes: refused",
                    what()
                )));
            }
            out.extend_from_slice(&c);
        }
        Ok(out)
    }

    fn path(&self, key: &str) -> ObjPath {
        if self.prefix.is_empty() {
            ObjPath::from(key)
        } else {
            ObjPath::from(format!("{}/{key}", self.prefix))
        }
    }

    fn strip<'a>(&self, full: &'a str) -> &'a str {
        if self.prefix.is_empty() {
            full
        } else {
            full.strip_prefix(&self.prefix)
                .and_then(|r| r.strip_prefix('/'))
                .unwrap_or(full)
        }
    }
}

/// The first line of a client's message, without credentials of any URL it quotes.
fn first_line(s: &str) -> String {
    redact(s.lines().next().unwrap_or(s))
}

impl Backend for S3Backend {
    fn put(&self, key: &str, data: Vec<u8>) -> Result<()> {
        let p = self.path(key);
        self.wait(self.store.put(&p, PutPayload::from(data)))
            .map(|_| ())
            .map_err(|e| s3_error("writing", &format!("{}/{key}", self.url), e))
    }

    fn put_many(&self, items: Vec<(String, Vec<u8>)>) -> Result<()> {
        let store = &self.store;
        let jobs = items.into_iter().map(|(k, d)| {
            let p = self.path(&k);
            async move { store.put(&p, PutPayload::from(d)).await.map_err(|e| (k, e)) }
        });
        self.wait(async {
            let mut s = futures::stream::iter(jobs).buffer_unordered(IN_FLIGHT);
            while let Some(r) = s.next().await {
                if let Err((k, e)) = r {
                    return Err(s3_error("writing", &format!("{}/{k}", self.url), e));
                }
            }
            Ok(())
        })
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let p = self.path(key);
        self.wait(async {
            match self.store.get(&p).await {
                Ok(r) => self.read_bounded(key, r).await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(s3_error("reading", &format!("{}/{key}", self.url), e)),
            }
        })
    }

    fn get_ranges(&self, reqs: &[(String, Range<u64>)]) -> Vec<Result<Vec<u8>>> {
        let store = &self.store;
        let jobs = reqs.iter().map(|(k, r)| {
            let p = self.path(k);
            let r = r.clone();
            async move {
                let want = r.end - r.start;
                store
                    .get_range(&p, r)
                    .await
                    .map_err(|e| match e {
                        // A pack an index copy names and the remote no longer has.
                        object_store::Error::NotFound { .. } => Error::io_op(
                            format!("reading {}/{k}", self.url),
                            std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                "gone from the remote (repacked by a gc --remote? \
                                 `ckptfs fetch` brings the new index)",
                            ),
                        ),
                        e => s3_error("reading", &format!("{}/{k}", self.url), e),
                    })
                    .and_then(|b| {
                        if b.len() as u64 == want {
                            // No copy when the body came in one buffer.
                            Ok(Vec::from(b))
                        } else {
                            Err(Error::Corrupt(format!(
                                "remote object {}/{k} is shorter than its index says",
                                self.url
                            )))
                        }
                    })
            }
        });
        self.wait(
            futures::stream::iter(jobs)
                .buffered(IN_FLIGHT)
                .collect::<Vec<_>>(),
        )
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        let p = self.path(prefix.trim_end_matches('/'));
        let metas: Vec<object_store::ObjectMeta> = self
            .wait(self.store.list(Some(&p)).try_collect())
            .map_err(|e| s3_error("listing", &format!("{}/{prefix}", self.url), e))?;
        Ok(metas
            .into_iter()
            .map(|m| (self.strip(m.location.as_ref()).to_string(), m.size))
            .collect())
    }

    fn delete(&self, key: &str) -> Result<()> {
        let p = self.path(key);
        match self.wait(self.store.delete(&p)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(s3_error("deleting", &format!("{}/{key}", self.url), e)),
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}
