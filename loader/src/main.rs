//! `loader` binary: parse, start the logger, hand to the library, map the outcome to an exit
//! code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = loader::cli::Cli::parse();
    init_logger(cli.log_level);
    match loader::run(cli) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(err) => {
            eprintln!("loader: error: {}", loader::error::one_line(&*err));
            ExitCode::from(loader::Outcome::Error.exit_code())
        }
    }
}

/// The `log` backend: stderr, at warn unless `RUST_LOG` says otherwise. `--log-level` sets the
/// level of loader's own records — its modules and its eBPF programs' (target `probes::…`) —
/// over RUST_LOG's; the libraries' records (aya's relocations at debug, say) follow RUST_LOG.
fn init_logger(level: Option<loader::cli::LogLevel>) {
    let mut builder = env_logger::Builder::new();
    builder.filter_level(log::LevelFilter::Warn).parse_env(env_logger::Env::default());
    if let Some(level) = level {
        builder.filter_module("loader", level.into()).filter_module("probes", level.into());
    }
    builder.init();
}
