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
    let result = ckptfs_cli::run(cli);
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
