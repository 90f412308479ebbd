//! `loader run` / `loader target` orchestration. (being written)

use crate::Outcome;
use crate::cli::{Cli, Command};

/// Run one command of the CLI.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Target(args) => {
            let cfg = crate::target::TargetConfig::from_args(&args)?;
            crate::target::serve(cfg)?;
            Ok(Outcome::Passed)
        }
        Command::Run(_) => anyhow::bail!("not yet"),
    }
}
