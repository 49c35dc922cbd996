//! The `ckptfs` binary: parse the command line, set up logging, run, map errors to exit codes.

fn main() {
    // All before any thread starts (a user namespace is made and entered single-threaded), and
    // before parsing, which finds a store from the working directory as the namespace shows it.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == ckptfs::fs::userns::HOLDER_COMMAND)
    {
        std::process::exit(ckptfs::fs::userns::hold());
    }
    if let Err(e) = ckptfs::fs::userns::enter_from_env() {
        eprintln!("ckptfs: {e}");
        std::process::exit(e.exit_code());
    }
    ckptfs::fs::userns::enter_early(&args);
    let cli = cli::parse();
    if !cli.serves_a_mount() {
        ckptfs::fs::sys::default_sigpipe();
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
    // The work runs on a thread whose stack holds a walk at `MAX_TREE_DEPTH` (a debug build
    // needs several KiB per level; the main thread has 8 MiB). Only touched pages are
    // committed. The main thread then blocks every signal while it waits, so signals reach the
    // worker with the mask the work set (a daemon's SIGTERM thread, turn's SIGINT), as they
    // reached the main thread before.
    let worker = std::thread::Builder::new()
        .name("ckptfs".into())
        .stack_size(256 << 20)
        .spawn(move || cli::run(cli));
    let result = match worker {
        Ok(h) => {
            if let Err(e) = nix::sys::signal::pthread_sigmask(
                nix::sys::signal::SigmaskHow::SIG_BLOCK,
                Some(&nix::sys::signal::SigSet::all()),
                None,
            ) {
                log::warn!("blocking signals in the main thread: {e}");
            }
            match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Err(e) => Err(ckptfs::Error::io_op("starting the worker thread", e)),
    };
    ckptfs::fs::atomic::report_io_steps();
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ckptfs: {e}");
            std::process::exit(e.exit_code());
        }
    }
}

mod cli;
