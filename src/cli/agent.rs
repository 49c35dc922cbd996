//! CLI of `ckptfs agent`: a native agent session (Codex, Claude Code) run turn after turn in
//! a room, each completed turn one checkpoint (`ckptfs::agent`; docs/agents.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use ckptfs::agent::commands::{self, AgentInit, AgentReport, RunOptions};
use ckptfs::agent::Kind;
use ckptfs::{Error, Result};

use super::json::rfc3339_of_utc;
use super::{print_json, JsonFlag};

#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// Make a store for an agent's room: roots `workspace` (the agent's working directory)
    /// and `home` (its own isolated home: CODEX_HOME or CLAUDE_CONFIG_DIR), the agent's
    /// config copied into the home, the agent binary's digest and version declared in the
    /// runtime fingerprint, and a first checkpoint on branch main that records the settings.
    ///
    /// The agent version must be one ckptfs was tested with (codex 0.169.0, claude 2.1.332):
    /// native resume and fork change between versions. The login (--auth-source) is never
    /// copied into the store: each turn lends it (see `agent turn`).
    #[command(after_help = "Examples:\n  \
        ckptfs agent init /var/lib/ckpt --agent codex --workspace /srv/room --home /srv/codex-home --auth-source ~/.codex/auth.json\n  \
        ckptfs agent init /var/lib/ckpt --agent claude --workspace /srv/room --home /srv/claude-home --user agent")]
    Init(InitArgs),
    /// Send one prompt to the branch's native session and record the completed turn as one
    /// checkpoint, or nothing.
    ///
    /// Mounts the branch if needed, lends the login (copied into the home, mode 0600, removed
    /// before anything is recorded, excluded from every checkpoint), starts the branch's
    /// session (first turn) or resumes it, sends the prompt, waits for the turn to complete,
    /// checks the final reply against the session file, waits for the agent's processes to
    /// end, then records one checkpoint binding the native session and turn ids, the final
    /// reply and its SHA-256, the session file and its length, model, policy and fingerprint
    /// (meta keys agent.*). The agent runs as the workspace's owner (or init's --user), in
    /// the workspace's cgroup. A failed turn (model error, cut stream, timeout, killed agent)
    /// records nothing: `status` names it, and `--retry`, `switch --discard` or `recover`
    /// decide about its writes, as for `ckptfs turn`. Exit status: 0 when recorded; the
    /// agent's, or 1, when not.
    #[command(after_help = "Examples:\n  \
        ckptfs agent turn /var/lib/ckpt --message 'add a test for parse()'\n  \
        ckptfs agent turn /var/lib/ckpt --branch try-2 --prompt-file next.md --label t4\n  \
        ckptfs agent turn /var/lib/ckpt --retry --message 'again'     after a failed turn")]
    Turn(TurnArgs),
    /// Fork a checkpoint's session natively into a new branch: branch NAME at CHECKPOINT,
    /// shown at the room's paths (the branch mounted there is switched away; refused while it
    /// holds changes not checkpointed), and a native fork of the session through the
    /// checkpoint's turn, sending no model request, recorded as NAME's first checkpoint. The
    /// next `agent turn --branch NAME` continues from exactly that turn. CHECKPOINT stays as
    /// it is.
    #[command(after_help = "Example:\n  ckptfs agent fork /var/lib/ckpt t1 try-2")]
    Fork(ForkArgs),
    /// One line per agent turn and fork, newest first: turn, time, branch, outcome,
    /// checkpoint, native session and turn ids, the first line of the reply.
    Log(LogArgs),
    /// The native history as a checkpoint holds it (fork ancestors included), as the
    /// agent's own JSON lines: the bound session file up to its recorded length.
    Transcript(TranscriptArgs),
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// The store directory to create.
    pub store: PathBuf,
    #[arg(long, value_name = "codex|claude", value_parser = parse_kind)]
    pub agent: Kind,
    /// The room: the agent's working directory (absolute; made when missing).
    #[arg(long, value_name = "/ABS/ROOM")]
    pub workspace: PathBuf,
    /// The agent's own home (absolute; made when missing, mode 0700): CODEX_HOME or
    /// CLAUDE_CONFIG_DIR. Not the user's ~/.codex: the room's history lives here.
    #[arg(long, value_name = "/ABS/AGENT_HOME")]
    pub home: PathBuf,
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// The login each turn lends the agent (Codex auth.json, Claude Code .credentials.json):
    /// its path is recorded, never its bytes.
    #[arg(long, value_name = "FILE")]
    pub auth_source: Option<PathBuf>,
    /// Run the agent as USER (default: the workspace's owner).
    #[arg(long, value_name = "USER")]
    pub user: Option<String>,
    /// Run the agent as root (only when asked).
    #[arg(long)]
    pub as_root: bool,
    /// The agent's own config file (Codex config.toml, Claude Code settings.json), copied
    /// into the home as is.
    #[arg(long, value_name = "FILE")]
    pub agent_config: Option<PathBuf>,
    /// An argument given to the agent CLI as is on every turn (repeatable), e.g.
    /// -c model_providers.x.base_url=...
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// The agent CLI (default: codex or claude in PATH).
    #[arg(long, value_name = "PATH")]
    pub agent_binary: Option<PathBuf>,
    /// Go on with an agent version ckptfs was not tested with (audited).
    #[arg(long)]
    pub accept_agent_version: bool,
    /// Compression of stored chunks, as `ckptfs init --compression`.
    #[arg(long, value_parser = ["zstd", "none"], default_value = "zstd")]
    pub compression: String,
    #[command(flatten)]
    pub json: JsonFlag,
}

fn parse_kind(s: &str) -> std::result::Result<Kind, String> {
    s.parse().map_err(|e: Error| e.to_string())
}

/// What `turn` and `fork` share.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// An argument given to the agent CLI as is for this call (repeatable; after init's).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_args: Vec<String>,
    /// Lend the login from FILE instead of init's --auth-source.
    #[arg(long, value_name = "FILE")]
    pub auth_source: Option<PathBuf>,
    /// Give up on the turn after this long (e.g. 90s, 30min); default 30min.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub timeout: Option<std::time::Duration>,
    /// Go on with an agent version ckptfs was not tested with (audited).
    #[arg(long)]
    pub accept_agent_version: bool,
    /// Go on although the branch's runtime fingerprint differs from this machine's (audited).
    #[arg(long)]
    pub accept_runtime_change: bool,
    /// Run the agent as USER this time (default: init's --user, else the workspace's owner).
    #[arg(long, value_name = "USER", conflicts_with = "as_root")]
    pub user: Option<String>,
    /// Run the agent as root: needed each time for a room whose agent init ran as root (a
    /// store from elsewhere cannot make ckptfs run its agent as root).
    #[arg(long)]
    pub as_root: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("prompt").required(true).args(["message", "prompt_file"])))]
pub struct TurnArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The prompt.
    #[arg(long, short, value_name = "TEXT")]
    pub message: Option<String>,
    /// Read the prompt from FILE ('-': stdin).
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// The branch (default: main).
    #[arg(long, short, default_value = "main")]
    pub branch: String,
    /// Label the turn's checkpoint.
    #[arg(long)]
    pub label: Option<String>,
    /// The workspace holds the writes of a failed turn: set them aside (displaced/) and run
    /// the turn again.
    #[arg(long)]
    pub retry: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The checkpoint to fork (an id or prefix, a label, a branch).
    pub checkpoint: String,
    /// The new branch.
    pub name: String,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug)]
pub struct LogArgs {
    /// The store directory.
    pub store: PathBuf,
    /// Only this branch's turns.
    #[arg(long, short)]
    pub branch: Option<String>,
    #[command(flatten)]
    pub json: JsonFlag,
}

#[derive(Args, Debug)]
pub struct TranscriptArgs {
    /// The store directory.
    pub store: PathBuf,
    /// The checkpoint (an id or prefix, a label, a branch).
    pub checkpoint: String,
}

/// `ckptfs agent ...`.
pub fn run_agent(c: AgentCommand) -> Result<i32> {
    match c {
        AgentCommand::Init(a) => run_init(a),
        AgentCommand::Turn(a) => run_turn(a),
        AgentCommand::Fork(a) => {
            let s = ckptfs::remote::open_store(&a.store)?;
            let r = commands::fork(&s, &a.checkpoint, &a.name, &run_options(&a.run, None))?;
            print_report(r, a.run.json, "fork")
        }
        AgentCommand::Log(a) => run_log(a),
        AgentCommand::Transcript(a) => {
            let s = ckptfs::remote::open_store(&a.store)?;
            let mut out = std::io::stdout().lock();
            commands::transcript(&s, &a.checkpoint, &mut out)?;
            Ok(0)
        }
    }
}

fn run_init(a: InitArgs) -> Result<i32> {
    let r = commands::init(&AgentInit {
        store: a.store,
        agent: a.agent,
        workspace: a.workspace,
        home: a.home,
        model: a.model,
        auth_source: a.auth_source,
        user: a.user,
        as_root: a.as_root,
        agent_config: a.agent_config,
        agent_args: a.agent_args,
        binary: a.agent_binary,
        accept_agent_version: a.accept_agent_version,
        zstd: a.compression == "zstd",
    })?;
    if a.json.json {
        print_json(&r)?;
        return Ok(0);
    }
    println!(
        "created store {} for {} {} ({})",
        r.store.display(),
        r.settings.agent.name(),
        r.settings.version,
        r.settings.binary.display()
    );
    println!("  root workspace = {}", r.settings.workspace.display());
    println!("  root home      = {}", r.settings.home.display());
    println!(
        "  branch {} at checkpoint {}; next: ckptfs agent turn {} --message '...'",
        r.branch,
        r.checkpoint.short(),
        r.store.display()
    );
    Ok(0)
}

fn run_options(a: &RunArgs, branch: Option<String>) -> RunOptions {
    RunOptions {
        branch: branch.unwrap_or_default(),
        label: None,
        extra_args: a.agent_args.clone(),
        auth_source: a.auth_source.clone(),
        timeout: a.timeout,
        accept_agent_version: a.accept_agent_version,
        accept_runtime_change: a.accept_runtime_change,
        retry: false,
        run_as: ckptfs::runner::run_as::RunAsOptions {
            user: a.user.clone(),
            as_root: a.as_root,
        },
    }
}

fn run_turn(a: TurnArgs) -> Result<i32> {
    let prompt = match (&a.message, &a.prompt_file) {
        (Some(m), _) => m.clone(),
        (None, Some(f)) if f.as_os_str() == "-" => {
            use std::io::Read;
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| Error::io_op("reading the prompt from stdin", e))?;
            s
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .map_err(|e| Error::Usage(format!("--prompt-file {}: {e}", f.display())))?,
        (None, None) => return Err(Error::Usage("give --message or --prompt-file".into())),
    };
    let s = ckptfs::remote::open_store(&a.store)?;
    let mut o = run_options(&a.run, Some(a.branch));
    o.label = a.label;
    o.retry = a.retry;
    let r = commands::turn(&s, &prompt, &o)?;
    print_report(r, a.run.json, "turn")
}

fn print_report(mut r: AgentReport, json: bool, what: &str) -> Result<i32> {
    let t = &r.turn;
    if let Some(e) = &t.error {
        eprintln!("ckptfs: {e}");
    }
    if json {
        r.turn.started = rfc3339_of_utc(&r.turn.started);
        r.turn.ended = rfc3339_of_utc(&r.turn.ended);
        let code = r.turn.exit_status;
        print_json(&r)?;
        return Ok(code);
    }
    if let Some(d) = &t.set_aside {
        eprintln!(
            "ckptfs: the failed turn's writes were set aside in {}",
            d.display()
        );
    }
    match (&t.checkpoint, &r.binding) {
        (Some(id), Some(b)) => {
            println!(
                "{what} {} on {}: ok, checkpoint {} ({} ms)",
                t.turn,
                t.branch,
                id.short(),
                t.elapsed_ms
            );
            println!(
                "  session {}  turn {}",
                b.session.as_deref().unwrap_or("-"),
                b.turn.as_deref().unwrap_or("-")
            );
            if let Some(reply) = &b.reply {
                println!("  reply: {}", first_line(reply));
            }
        }
        _ => eprintln!(
            "ckptfs: {what} {} on {}: {} (exit status {}); nothing recorded on the branch; \
             its writes stay in the workspace (see `ckptfs status`)",
            t.turn, t.branch, t.outcome, t.exit_status
        ),
    }
    Ok(t.exit_status)
}

/// The first line of `s`, cut at 100 characters, escaped for a terminal.
fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    let mut cut: String = l.chars().take(100).collect();
    if cut.len() < l.len() {
        cut.push_str("...");
    }
    ckptfs::text::quote::text(&cut).into_owned()
}

fn run_log(a: LogArgs) -> Result<i32> {
    let s = ckptfs::remote::open_store(&a.store)?;
    let mut rows = commands::log(&s, a.branch.as_deref())?;
    if a.json.json {
        for r in &mut rows {
            r.turn.started = rfc3339_of_utc(&r.turn.started);
            r.turn.ended = r.turn.ended.as_deref().map(rfc3339_of_utc);
        }
        print_json(&rows)?;
        return Ok(0);
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    for r in &rows {
        let t = &r.turn;
        let ck = t
            .checkpoint
            .as_deref()
            .map_or("-".to_string(), |c| c[..12.min(c.len())].to_string());
        let (session, turn, reply) = match &r.binding {
            Some(b) => (
                b.session.clone().unwrap_or_else(|| "-".into()),
                b.turn.clone().unwrap_or_else(|| "-".into()),
                b.reply.as_deref().map(first_line).unwrap_or_default(),
            ),
            None => ("-".into(), "-".into(), String::new()),
        };
        // A reader that stops early (`| head`) is not an error.
        let _ignored = writeln!(
            out,
            "{} {} {:<5} {:<12} {:<10} {:<12} {} {} {}",
            t.turn,
            ckptfs::text::time::local_of_utc(&t.started),
            r.kind,
            t.branch,
            t.outcome,
            ck,
            session,
            turn,
            reply
        );
    }
    Ok(0)
}
