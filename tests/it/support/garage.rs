//! Real Garage object-store nodes on loopback for the remote tests: one node
//! (`Garage::start`) or a cluster (`Garage::cluster(3)`, replication factor 3), with a bucket
//! and an access key ready, nodes that can be killed and restarted (`kill`, `restart`), and
//! every process killed and its data removed on drop, also when the test fails.
//!
//! The binary is `$GARAGE`, else `garage` on PATH, else `~/.cargo/bin/garage` (where
//! `scripts/setup-deps.sh` installs it). A missing binary fails the test with that message:
//! the remote tests never skip.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The access key every test node carries (imported, so no output needs parsing). Garage key
/// ids are `GK` + 24 hex digits, secrets 64 hex digits.
pub const GARAGE_KEY_ID: &str = "GK0123456789abcdef01234567";
pub const GARAGE_SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
pub const GARAGE_REGION: &str = "garage";
/// An object the harness writes to know when every node serves reads; tests leave it alone.
pub const PROBE_KEY: &str = ".garage-harness-probe";
/// The bucket `start` and `cluster` create.
pub const GARAGE_BUCKET: &str = "ckptfs-test";

/// Path of the garage binary.
pub fn garage_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GARAGE") {
        return PathBuf::from(p);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("garage");
            if p.is_file() {
                return p;
            }
        }
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    let p = Path::new(&home).join(".cargo/bin/garage");
    assert!(
        p.is_file(),
        "garage not found ($GARAGE, PATH, ~/.cargo/bin): run scripts/setup-deps.sh"
    );
    p
}

/// A free loopback port (bound then released; the tests' nodes take it right after), never
/// one this test binary handed out before, so parallel tests' nodes do not collide.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

fn wait_port(port: u16, timeout: Duration) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let start = Instant::now();
    while start.elapsed() < timeout {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// One Garage process.
pub struct GarageNode {
    pub config: PathBuf,
    pub s3_port: u16,
    pub rpc_port: u16,
    pub log: PathBuf,
    child: Option<Child>,
}

impl GarageNode {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("garage log");
        let err = log.try_clone().expect("garage log");
        let child = Command::new(garage_bin())
            .arg("-c")
            .arg(&self.config)
            .arg("server")
            // Each S3 request is a line (`ADDR (key K) METHOD /BUCKET/KEY`): `requests`.
            .env(
                "RUST_LOG",
                "garage=warn,garage_api_common::generic_server=info",
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("start garage");
        self.child = Some(child);
        assert!(
            wait_port(self.rpc_port, Duration::from_secs(20)),
            "garage node on port {} did not start: {}",
            self.rpc_port,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Runs a garage admin command against this node; panics with its output on failure.
    pub fn admin(&self, args: &[&str]) -> String {
        let out = Command::new(garage_bin())
            .arg("-c")
            .arg(&self.config)
            .args(args)
            .output()
            .expect("garage admin command");
        assert!(
            out.status.success(),
            "garage {:?}: {}{}",
            args,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `<node id>@127.0.0.1:<rpc port>`.
    pub fn node_id(&self) -> String {
        self.admin(&["node", "id", "-q"]).trim().to_string()
    }

    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A Garage cluster of one or more nodes with one bucket and one key.
pub struct Garage {
    pub nodes: Vec<GarageNode>,
    pub dir: TempDir,
}

impl Garage {
    /// One node, replication factor 1.
    pub fn start() -> Garage {
        Garage::cluster(1)
    }

    /// `n` nodes on loopback, replication factor `n`, one zone each.
    pub fn cluster(n: usize) -> Garage {
        let dir = super::store::tempdir();
        let secret: String = (0..32)
            .map(|i| format!("{:02x}", (i * 37 + 11) as u8))
            .collect();
        let mut nodes = Vec::new();
        for i in 0..n {
            let nd = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(nd.join("meta")).expect("garage dir");
            std::fs::create_dir_all(nd.join("data")).expect("garage dir");
            let (s3_port, rpc_port, admin_port) = (free_port(), free_port(), free_port());
            let config = nd.join("garage.toml");
            std::fs::write(
                &config,
                format!(
                    "metadata_dir = \"{m}\"\ndata_dir = \"{d}\"\ndb_engine = \"sqlite\"\n\
                     replication_factor = {n}\n\
                     rpc_bind_addr = \"127.0.0.1:{rpc_port}\"\n\
                     rpc_public_addr = \"127.0.0.1:{rpc_port}\"\n\
                     rpc_secret = \"{secret}\"\n\
                     [s3_api]\ns3_region = \"{GARAGE_REGION}\"\n\
                     api_bind_addr = \"127.0.0.1:{s3_port}\"\n\
                     [admin]\napi_bind_addr = \"127.0.0.1:{admin_port}\"\n",
                    m = nd.join("meta").display(),
                    d = nd.join("data").display(),
                ),
            )
            .expect("garage config");
            let mut node = GarageNode {
                config,
                s3_port,
                rpc_port,
                log: nd.join("log"),
                child: None,
            };
            node.spawn();
            nodes.push(node);
        }
        let g = Garage { nodes, dir };
        let ids: Vec<String> = g.nodes.iter().map(|n| n.node_id()).collect();
        // Every pair connected both ways: gossip would get there, but not before a test's
        // first request through a node that only knows one peer.
        for (i, node) in g.nodes.iter().enumerate() {
            for id in &ids[i + 1..] {
                node.admin(&["node", "connect", id]);
            }
        }
        for (i, id) in ids.iter().enumerate() {
            let short = id.split('@').next().unwrap_or(id);
            let zone = format!("z{i}");
            g.nodes[0].admin(&["layout", "assign", "-z", &zone, "-c", "1G", short]);
        }
        g.nodes[0].admin(&["layout", "apply", "--version", "1"]);
        g.nodes[0].admin(&[
            "key",
            "import",
            GARAGE_KEY_ID,
            GARAGE_SECRET,
            "-n",
            "ckptfs",
            "--yes",
        ]);
        g.create_bucket(GARAGE_BUCKET);
        g.s3_put(PROBE_KEY, b"ready");
        for i in 0..n {
            g.wait_serving(i);
        }
        g
    }

    /// Waits until node `i` answers S3 reads with the cluster behind it (its S3 port open and
    /// the probe object readable through it, which needs a read quorum of connected peers).
    fn wait_serving(&self, i: usize) {
        assert!(
            wait_port(self.nodes[i].s3_port, Duration::from_secs(20)),
            "garage S3 port {} did not open",
            self.nodes[i].s3_port
        );
        let start = Instant::now();
        while self.s3_get_from(i, PROBE_KEY).is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "garage node {i} does not serve reads within 30 s: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Creates a bucket the test key can read, write and own.
    pub fn create_bucket(&self, name: &str) {
        let n = &self.nodes[0];
        n.admin(&["bucket", "create", name]);
        n.admin(&[
            "bucket", "allow", "--read", "--write", "--owner", name, "--key", "ckptfs",
        ]);
    }

    /// The S3 endpoint of node `i`.
    pub fn endpoint_of(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.nodes[i].s3_port)
    }

    /// The S3 endpoint of the first node.
    pub fn endpoint(&self) -> String {
        self.endpoint_of(0)
    }

    /// `s3://BUCKET/PREFIX` in the test bucket.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{GARAGE_BUCKET}/{prefix}")
    }

    /// The AWS environment a client needs for this cluster.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", GARAGE_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", GARAGE_SECRET.to_string()),
            ("AWS_DEFAULT_REGION", GARAGE_REGION.to_string()),
            ("AWS_REGION", GARAGE_REGION.to_string()),
        ]
    }

    /// Sets this cluster's AWS environment on a command.
    pub fn apply_env<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        for (k, v) in self.env() {
            c.env(k, v);
        }
        c
    }

    /// Kills node `i` (SIGKILL), as a crash would.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again on its data, and waits until it serves S3.
    pub fn restart(&mut self, i: usize) {
        if !self.nodes[i].running() {
            self.nodes[i].spawn();
        }
        // Reconnect at once instead of waiting out Garage's peering back-off (tens of seconds).
        for (j, other) in self.nodes.iter().enumerate() {
            if j != i && other.running() {
                let id = other.node_id();
                self.nodes[i].admin(&["node", "connect", &id]);
            }
        }
        self.wait_serving(i);
    }

    /// How many `method` requests (`GET`, `PUT`...) for keys of the test bucket starting with
    /// `prefix` the nodes have answered so far (from their logs).
    pub fn requests(&self, method: &str, prefix: &str) -> usize {
        let needle = format!(" {method} /{GARAGE_BUCKET}/{prefix}");
        self.logs().lines().filter(|l| l.contains(&needle)).count()
    }

    /// The logs of every node, for a failure message.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| std::fs::read_to_string(&n.log).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
    }
}

/// Raw S3 requests through `curl --aws-sigv4` (the way a test alters or inspects what is on the
/// remote behind ckptfs's back).
impl Garage {
    pub fn curl(
        &self,
        node: usize,
        method: &str,
        key: &str,
        body: Option<&Path>,
    ) -> std::process::Output {
        let url = format!("{}/{GARAGE_BUCKET}/{key}", self.endpoint_of(node));
        let mut c = Command::new("curl");
        c.args(["-sS", "--fail-with-body", "-X", method])
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .arg("--aws-sigv4")
            .arg(format!("aws:amz:{GARAGE_REGION}:s3"))
            .arg("--user")
            .arg(format!("{GARAGE_KEY_ID}:{GARAGE_SECRET}"));
        if let Some(b) = body {
            c.arg("--data-binary").arg(format!("@{}", b.display()));
        }
        c.arg(url).output().expect("curl")
    }

    /// PUT `bytes` at `key` in the test bucket.
    pub fn s3_put(&self, key: &str, bytes: &[u8]) {
        let f = self.dir.path().join(".put-body");
        std::fs::write(&f, bytes).expect("body");
        let out = self.curl(0, "PUT", key, Some(&f));
        assert!(
            out.status.success(),
            "PUT {key}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// GET `key`, or None when the request fails (missing key, node down).
    pub fn s3_get(&self, key: &str) -> Option<Vec<u8>> {
        self.s3_get_from(0, key)
    }

    pub fn s3_get_from(&self, node: usize, key: &str) -> Option<Vec<u8>> {
        let out = self.curl(node, "GET", key, None);
        out.status.success().then_some(out.stdout)
    }

    /// DELETE `key`.
    pub fn s3_delete(&self, key: &str) {
        let out = self.curl(0, "DELETE", key, None);
        assert!(
            out.status.success(),
            "DELETE {key}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    /// Every key under `prefix` (ListObjectsV2, following continuation tokens).
    pub fn s3_list(&self, prefix: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            // SigV4 signs the query canonically: parameters sorted, values percent-encoded.
            let enc = |v: &str| -> String {
                v.bytes()
                    .map(|b| match b {
                        b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                            (b as char).to_string()
                        }
                        _ => format!("%{b:02X}"),
                    })
                    .collect()
            };
            let mut q = String::from("?");
            if let Some(t) = &token {
                q.push_str(&format!("continuation-token={}&", enc(t)));
            }
            q.push_str(&format!("list-type=2&prefix={}", enc(prefix)));
            let out = self.curl(0, "GET", &q, None);
            assert!(
                out.status.success(),
                "LIST {prefix}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
            let xml = String::from_utf8_lossy(&out.stdout).into_owned();
            let field = |s: &str, tag: &str| -> Vec<String> {
                let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
                s.split(&open)
                    .skip(1)
                    .filter_map(|p| p.split(&close).next().map(str::to_string))
                    .collect()
            };
            keys.extend(field(&xml, "Key"));
            token = field(&xml, "NextContinuationToken").into_iter().next();
            if token.is_none() {
                return keys;
            }
        }
    }
}
