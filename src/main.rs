//! The `ckptfs` binary: parse the command line, set up logging, run, map errors to exit codes.

fn main() {
    let cli = ckptfs_cli::parse();
    if !cli.serves_a_mount() {
        ckptfs::sys::default_sigpipe();
    }
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp_millis()
        .init();
    // Tree walks recurse once per directory level, up to `MAX_TREE_DEPTH`: the main thread's
    // stack (8 MiB, or whatever `ulimit -s` says) is not enough, so the work runs on a thread
    // whose stack is.
    let result = std::thread::Builder::new()
        .name("ckptfs".into())
        .stack_size(ckptfs::store::tree::WALK_STACK_BYTES)
        .spawn(move || ckptfs_cli::run(cli))
        .map_err(|e| ckptfs::Error::io_op("starting the main thread", e))
        .and_then(|h| match h.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        });
    ckptfs::store::fsio::report_io_steps();
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ckptfs: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

#[path = "cli/mod.rs"]
mod ckptfs_cli;
