//! `loader` binary: parse, start the logger, hand to the library, map the outcome to an exit
//! code.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    let cli = match loader::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage(err),
    };
    init_logger(cli.log_level);
    match loader::run(cli) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(err) => {
            eprintln!("loader: error: {}", loader::error::one_line(&*err));
            ExitCode::from(loader::Outcome::Error.exit_code())
        }
    }
}

/// A usage error in one line — `loader: error: the argument '--quiet' cannot be used with
/// '--json' (see `loader run --help`)` — exit 2; help and the version print as clap has them.
fn usage(err: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        err.exit();
    }
    let rendered = err.to_string();
    let mut lines = rendered.lines().filter(|l| !l.trim().is_empty());
    let first = lines.next().unwrap_or("invalid arguments");
    let mut what = first.strip_prefix("error: ").unwrap_or(first).to_string();
    // "the following required arguments were not provided:" lists them on the lines after.
    if what.ends_with(':') {
        let listed: Vec<&str> = lines.take_while(|l| l.starts_with("  ")).map(str::trim).collect();
        what = format!("{} {}", what, listed.join(", "));
    }
    // clap's suggestion of the option meant ("tip: a similar argument exists: '--rate'").
    if let Some(tip) = rendered.lines().find_map(|l| l.trim().strip_prefix("tip: ")).filter(|t| t.contains("similar")) {
        what = format!("{what}; {tip}");
    }
    // The subcommand, from the usage line clap prints (`Usage: loader run --url <URL> …`) or
    // the first word given when it names one.
    let from_usage = rendered
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: "))
        .map(|u| u.split_whitespace().take_while(|w| !w.starts_with(['-', '[', '<'])).collect::<Vec<_>>().join(" "))
        .filter(|c| c.contains(' '));
    let command = from_usage.unwrap_or_else(|| {
        let given = std::env::args().nth(1).unwrap_or_default();
        match loader::cli::Cli::command().find_subcommand(&given) {
            Some(_) => format!("loader {given}"),
            None => "loader".to_string(),
        }
    });
    eprintln!("loader: error: {what} (see `{command} --help`)");
    ExitCode::from(2)
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
