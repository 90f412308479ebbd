//! `loader` binary: parse, hand to the library, map the outcome to an exit code.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = loader::cli::Cli::parse();
    match loader::run(cli) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(err) => {
            eprintln!("loader: error: {}", loader::error::one_line(&err));
            ExitCode::from(loader::Outcome::Error.exit_code())
        }
    }
}
