//! Real agent CLIs in real rooms: the scripted model server (`ModelServer`, the only fake:
//! tests/agents/model_server.py on 127.0.0.1, killed on drop) and `AgentRoom`, a store made by
//! `ckptfs agent init` for the installed `codex` or `claude`, run as `nobody`, its login a
//! secret only the model server should ever see; unmounted on drop.

use std::collections::BTreeMap;
use std::fs;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::{json, Value};

use super::cli::{bin, describe_output, s};
use super::mount::unmount_all_under;
use super::tree::chmod;

/// The scripted model server.
pub struct ModelServer {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl ModelServer {
    /// Starts the server with `script` (see tests/agents/model_server.py), for 10 minutes
    /// at most.
    pub fn start(script: &Value) -> ModelServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let sp = dir.path().join("script.json");
        fs::write(&sp, serde_json::to_vec(script).unwrap()).unwrap();
        let log = dir.path().join("log.jsonl");
        let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/model_server.py");
        let mut child = Command::new("python3")
            .arg(server)
            .args(["--script", s(&sp), "--log", s(&log), "--lifetime", "600"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 model_server.py");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the model server's port");
        ModelServer {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far (the log's lines).
    pub fn requests(&self) -> Vec<Value> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The requests that carried a scripted prompt.
    pub fn turn_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| r["kind"] == "turn")
            .collect()
    }

    /// How many times each prompt was sent as a new turn (step 0).
    pub fn prompts_sent(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in self.turn_requests() {
            if r["step"] == 0 {
                *m.entry(r["prompt"].as_str().unwrap_or("").to_string())
                    .or_insert(0) += 1;
            }
        }
        m
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The user prompts of a model request, in order (context the CLIs add left out), for
/// either wire protocol.
pub fn prompts_in(request: &Value) -> Vec<String> {
    let body = &request["body"];
    let mut out = Vec::new();
    let text = |c: &Value| -> Vec<String> {
        match c {
            Value::String(t) => vec![t.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter(|b| b["type"] == "text" || b["type"] == "input_text")
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        }
    };
    let items = body["input"]
        .as_array()
        .or_else(|| body["messages"].as_array())
        .cloned()
        .unwrap_or_default();
    for m in items {
        if m["role"] != "user" {
            continue;
        }
        for t in text(&m["content"]) {
            let t = t.trim();
            if !t.is_empty() && !t.starts_with('<') {
                out.push(t.to_string());
            }
        }
    }
    out
}

/// Which agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    Codex,
    Claude,
}

impl Agent {
    pub fn name(self) -> &'static str {
        match self {
            Agent::Codex => "codex",
            Agent::Claude => "claude",
        }
    }
}

/// Whether the agent CLI is installed; when not, the test fails (CI installs both) unless
/// `CKPTFS_TEST_NO_AGENTS=1`, when it is skipped, saying so.
pub fn agent_installed(a: Agent) -> bool {
    let found = Command::new(a.name())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("CKPTFS_TEST_NO_AGENTS").is_some(),
            "{} is not installed (scripts/setup-deps.sh installs it; \
             CKPTFS_TEST_NO_AGENTS=1 skips these tests)",
            a.name()
        );
        eprintln!("SKIPPED: {} is not installed", a.name());
    }
    found
}

/// A room of `agent init`: store, workspace `room`, agent home `home`, under a temp dir in
/// /var/tmp (Codex makes no helper binaries under /tmp) open to `nobody`, who runs the agent.
pub struct AgentRoom {
    pub agent: Agent,
    pub tmp: tempfile::TempDir,
    pub store: PathBuf,
    pub room: PathBuf,
    pub home: PathBuf,
    /// The login file lent to each turn.
    pub auth: PathBuf,
    /// The secret in it.
    pub secret: String,
    pub server: ModelServer,
}

impl AgentRoom {
    /// `agent init` of `agent` (uncompressed store: the secret test reads raw bytes), with
    /// a model server running `script`. `None` when the CLI is missing (see
    /// `agent_installed`).
    pub fn new(agent: Agent, script: &Value) -> Option<AgentRoom> {
        if !agent_installed(agent) {
            return None;
        }
        let tmp = tempfile::Builder::new()
            .prefix("ckptfs-agent-")
            .tempdir_in("/var/tmp")
            .expect("tempdir in /var/tmp");
        chmod(tmp.path(), 0o755);
        let secret = format!("sk-ckptfs-test-{:016x}", rand_u64());
        let auth = tmp.path().join("login.json");
        let login = match agent {
            Agent::Codex => json!({"OPENAI_API_KEY": secret}),
            Agent::Claude => json!({"claudeAiOauth": {"accessToken": secret,
                "refreshToken": format!("{secret}-refresh"), "expiresAt": 4102444800000u64,
                "scopes": ["user:inference", "user:profile"], "subscriptionType": "max"}}),
        };
        fs::write(&auth, serde_json::to_vec(&login).unwrap()).unwrap();
        chmod(&auth, 0o600);
        let server = ModelServer::start(script);
        let r = AgentRoom {
            agent,
            store: tmp.path().join("store"),
            room: tmp.path().join("room"),
            home: tmp.path().join("home"),
            auth,
            secret,
            server,
            tmp,
        };
        let mut args = vec![
            "agent".to_string(),
            "init".into(),
            s(&r.store).into(),
            "--agent".into(),
            agent.name().into(),
            "--workspace".into(),
            s(&r.room).into(),
            "--home".into(),
            s(&r.home).into(),
            "--user".into(),
            "nobody".into(),
            "--auth-source".into(),
            s(&r.auth).into(),
            "--compression".into(),
            "none".into(),
            "--model".into(),
            "test-model".into(),
        ];
        if agent == Agent::Codex {
            let cfg = r.tmp.path().join("config.toml");
            fs::write(&cfg, CODEX_CONFIG).unwrap();
            args.extend(["--agent-config".into(), s(&cfg).into()]);
        }
        let o = r.cmd(&args).output().unwrap();
        assert!(o.status.success(), "{}", show(&args, &o));
        Some(r)
    }

    /// ckptfs with the environment the agent needs to reach the model server (and nothing
    /// of the caller's that names another).
    pub fn cmd<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Command {
        let mut c = Command::new(bin());
        c.args(args)
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CKPTFS_STORE")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null());
        if self.agent == Agent::Claude {
            c.env("ANTHROPIC_BASE_URL", self.server.base_url())
                .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
                .env("DISABLE_AUTOUPDATER", "1")
                .env("DISABLE_TELEMETRY", "1")
                // As Codex's request_max_retries = 0: a failure fails the turn.
                .env("CLAUDE_CODE_MAX_RETRIES", "0");
        }
        c
    }

    /// The arguments that point this call's agent at the model server.
    fn reach(&self) -> Vec<String> {
        match self.agent {
            Agent::Codex => vec![
                "--agent-arg=-c".into(),
                format!(
                    "--agent-arg=model_providers.ckpt.base_url=\"{}/v1\"",
                    self.server.base_url()
                ),
            ],
            Agent::Claude => Vec::new(),
        }
    }

    /// `agent turn STORE --message PROMPT EXTRA... --json`: output and report.
    pub fn turn(&self, prompt: &str, extra: &[&str]) -> (Output, Value) {
        let mut a: Vec<String> = vec![
            "agent".into(),
            "turn".into(),
            s(&self.store).into(),
            "--message".into(),
            prompt.into(),
            "--json".into(),
        ];
        a.extend(extra.iter().map(|x| x.to_string()));
        a.extend(self.reach());
        let o = self.cmd(&a).output().unwrap();
        (o.clone(), report_of(&a, &o))
    }

    /// As `turn`, which must record a checkpoint; the report.
    pub fn turn_ok(&self, prompt: &str, extra: &[&str]) -> Value {
        let (o, r) = self.turn(prompt, extra);
        assert!(
            o.status.success() && r["outcome"] == "ok",
            "agent turn {prompt:?}: {}",
            show(&["agent", "turn"], &o)
        );
        r
    }

    /// `agent fork STORE CHECKPOINT NAME --json`, which must succeed; the report.
    pub fn fork(&self, checkpoint: &str, name: &str) -> Value {
        let mut a: Vec<String> = vec![
            "agent".into(),
            "fork".into(),
            s(&self.store).into(),
            checkpoint.into(),
            name.into(),
            "--json".into(),
        ];
        a.extend(self.reach());
        let o = self.cmd(&a).output().unwrap();
        assert!(o.status.success(), "{}", show(&a, &o));
        report_of(&a, &o)
    }

    /// ckptfs ARGS..., which must succeed; stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.cmd(args).output().unwrap();
        assert!(o.status.success(), "{}", show(args, &o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }
}

fn report_of<S: AsRef<std::ffi::OsStr>>(args: &[S], o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("no JSON report ({e}): {}", show(args, o));
    })
}

impl Drop for AgentRoom {
    fn drop(&mut self) {
        let _ = Command::new(bin()).args(["umount", s(&self.room)]).output();
        unmount_all_under(self.tmp.path());
    }
}

/// Codex's config for the tests: the model server as a custom provider whose key is the
/// login's (auth.json), no retries, no plugins or shell snapshots (their helper processes
/// are not part of what is tested).
pub const CODEX_CONFIG: &str = r#"model = "test-model"
model_provider = "ckpt"

[model_providers.ckpt]
name = "ckpt"
base_url = "http://127.0.0.1:9/v1"
wire_api = "responses"
requires_openai_auth = true
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
shell_snapshot = false
"#;

fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u64::from_le_bytes(b)
}

/// `ckptfs ARGS` and its output, for assertion messages.
pub fn show<S: AsRef<std::ffi::OsStr>>(args: &[S], o: &Output) -> String {
    let line: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    describe_output(&format!("ckptfs {}", line.join(" ")), o)
}
