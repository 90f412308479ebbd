//! What an install puts beside the binary, made from clap's own command so it always describes
//! the binary that made it: `loader completions SHELL` (a completion script on stdout, by
//! clap_complete) and `loader man --out DIR` (roff pages, by clap_mangen). Both commands are
//! hidden; `cargo xtask install` calls them on the binary it installs. Where the files go is
//! the install's business, not this module's.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory as _;

use crate::Outcome;
use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::{InputError, OutputError};

/// The shells `loader completions` writes for: the ones `cargo xtask install` installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

impl Shell {
    fn parse(name: &str) -> Result<Shell, InputError> {
        match name {
            "bash" => Ok(Shell::Bash),
            "zsh" => Ok(Shell::Zsh),
            "fish" => Ok(Shell::Fish),
            other => Err(InputError::new("SHELL", format!("expected bash, zsh or fish, not {other:?}"))),
        }
    }

    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// `loader completions SHELL`: the script on stdout.
pub(super) fn completions(args: &CompletionsArgs) -> anyhow::Result<Outcome> {
    let shell = Shell::parse(&args.shell)?;
    // clap_complete panics on a failed write, so the script is made in memory and written
    // here, where a closed pipe is an error like any other.
    let script = completion_script(shell);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script).and_then(|()| stdout.flush()).map_err(|e| anyhow::anyhow!("writing the script: {e}"))?;
    Ok(Outcome::Passed)
}

fn completion_script(shell: Shell) -> Vec<u8> {
    let mut script = Vec::new();
    clap_complete::generate(shell.generator(), &mut completed_command(), "loader", &mut script);
    script
}

/// The command as a shell should offer it. clap_complete offers every subcommand, hidden or
/// not, so this is a copy of the top level without the hidden ones (these two); the visible
/// commands are copied whole.
fn completed_command() -> clap::Command {
    let full = Cli::command();
    clap::Command::new("loader")
        .version(crate::cli::VERSION)
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|sub| !sub.is_hide_set()).cloned())
}

/// `loader man --out DIR`: every page written, its path printed, one a line.
pub(super) fn man(args: &ManArgs) -> anyhow::Result<Outcome> {
    std::fs::create_dir_all(&args.out).map_err(|e| OutputError::new(&args.out, e))?;
    let pages = write_man_pages(&args.out)?;
    // Not println!, which panics on a closed stdout.
    let mut stdout = std::io::stdout().lock();
    for page in pages {
        writeln!(stdout, "{}", page.display()).map_err(|e| anyhow::anyhow!("listing the pages written: {e}"))?;
    }
    Ok(Outcome::Passed)
}

/// `loader.1` and one page per visible command (`loader-run.1` …), as clap_mangen's own
/// `generate_to` names them, but each failure naming its file.
fn write_man_pages(dir: &Path) -> Result<Vec<PathBuf>, OutputError> {
    let mut command = Cli::command().disable_help_subcommand(true);
    // Built once from the top, each command knows its display name (`loader-run`).
    command.build();
    let mut written = Vec::new();
    let mut pending = vec![command];
    while let Some(command) = pending.pop() {
        pending.extend(command.get_subcommands().filter(|sub| !sub.is_hide_set()).cloned());
        let page = clap_mangen::Man::new(command);
        let path = dir.join(page.get_filename());
        let mut roff = Vec::new();
        page.render(&mut roff).map_err(|e| OutputError::new(&path, e))?;
        std::fs::write(&path, roff).map_err(|e| OutputError::new(&path, e))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_three_installed_shells_are_known() {
        assert_eq!(Shell::parse("zsh"), Ok(Shell::Zsh));
        let err = Shell::parse("powershell").unwrap_err();
        assert_eq!(err.to_string(), "SHELL: expected bash, zsh or fish, not \"powershell\"");
    }

    #[test]
    fn the_hidden_commands_are_in_no_script() {
        let script = String::from_utf8(completion_script(Shell::Fish)).unwrap();
        assert!(script.contains("calibrate"), "{script}");
        assert!(!script.contains("completions"), "{script}");
    }
}
