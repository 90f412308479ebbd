//! The commands: each wires the stages together and maps its end to an [`Outcome`]. The
//! stages live in their own modules; these files only order them.
//!
//! - `loader run` (`run.rs`): spec → (built-in target) → plan → probes → [`crate::measure`]
//!   → verdict and analysis → outputs, once per `--repeat`, then the capacity plan.
//! - `loader verdict DIR` (`verdict.rs`): a saved summary judged again with other limits.
//! - `loader report DIR` (`report.rs`): a saved summary rendered again as `report.html`.
//! - `loader compare A B` (`compare.rs`): two saved runs side by side ([`crate::compare`]).
//! - `loader merge DIR…` (`merge.rs`): the machines of a sharded run joined ([`crate::merge`]).
//! - `loader stop ADDR…`: the kill switch ([`crate::measure::control`]).
//! - `loader calibrate`: the [`crate::calibrate`] module.
//! - `loader target`: the [`crate::target`] module.
//! - `loader completions SHELL`, `loader man --out DIR` (`install_files.rs`, hidden): the
//!   completion scripts and man pages `cargo xtask install` puts beside the binary.

mod compare;
mod install_files;
mod merge;
mod report;
mod run;
mod verdict;

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::Outcome;
use crate::cli::{Cli, Command};
use crate::summary::{self, Summary};
use crate::target::{self, TargetConfig};

/// Run one command of the CLI.
pub fn run(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Target(args) => {
            let cfg = TargetConfig::from_args(&args)?;
            target::serve(cfg)?;
            Ok(Outcome::Passed)
        }
        Command::Run(args) => run::run(&args),
        Command::Verdict(args) => verdict::rejudge(&args),
        Command::Report(args) => report::render(&args),
        Command::Calibrate(args) => crate::calibrate::calibrate(&args),
        Command::Merge(args) => merge::merge(&args),
        Command::Compare(args) => compare::compare(&args),
        Command::Stop(args) => stop(&args),
        Command::Plan(args) => plan(&args),
        Command::Completions(args) => install_files::completions(&args),
        Command::Man(args) => install_files::man(&args),
    }
}

/// `loader plan --rate R`: machines of this machine's certificate for `R`.
fn plan(args: &crate::cli::PlanArgs) -> anyhow::Result<Outcome> {
    use crate::error::InputError;
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err(InputError::new("--rate", "must be a positive number of requests per second").into());
    }
    if !(args.headroom_pct > 0.0 && args.headroom_pct <= 100.0) {
        return Err(InputError::new("--headroom-pct", "must be in (0, 100]").into());
    }
    let found = crate::calibrate::for_run(args.certificate.as_deref())?;
    let Some(c) = found.certified else {
        anyhow::bail!(
            "no certificate to plan with: run `loader calibrate` on a load machine first (docs/calibration.md)"
        );
    };
    let n = crate::calibrate::machines_for(args.rate, c.ceiling_rps, args.headroom_pct)
        .ok_or_else(|| anyhow::anyhow!("the certificate holds no usable figure"))?;
    let each = args.rate / n as f64;
    println!(
        "{:.0} req/s: {n} machine(s) like this one — its certificate's {} {:.0} req/s, used to at most {:.0} % ({:.0} req/s each); each would offer {each:.0} req/s ({:.0} %)",
        args.rate,
        if c.lower_bound { "lower bound" } else { "ceiling" },
        c.ceiling_rps,
        args.headroom_pct,
        c.ceiling_rps * args.headroom_pct / 100.0,
        each / c.ceiling_rps * 100.0
    );
    if c.lower_bound {
        println!("the figure is a lower bound of this machine's ceiling: {n} is an upper bound of the machines needed");
    }
    if let Some(us) = c.cpu_us_per_request {
        // The loader's own CPU per request at its ceiling, and how well the figure repeats.
        println!(
            "each request cost the loader {us:.2} µs of CPU at the certified rate: {each:.0} req/s is about {:.2} of a core's time per machine{}",
            each * us / 1e6,
            c.spread_pct.map_or(String::new(), |s| format!("; the certificate's bisections agreed within {s:.1} %"))
        );
    }
    if n > 1 {
        println!("run: loader run … --shard i/{n} --start-at TIME on each (docs/distributed.md), then loader merge");
    }
    if let Some(note) = found.note {
        eprintln!("{note}");
    }
    Ok(Outcome::Passed)
}

/// `loader stop ADDR…`: every loader told at once; one line per address.
fn stop(args: &crate::cli::StopArgs) -> anyhow::Result<Outcome> {
    use crate::measure::control;
    let token = control::token_from_env("loader stop")?;
    let timeout = crate::scenario::parse_duration("--timeout", &args.timeout)?;
    let mut all = true;
    for (addr, result) in control::stop_all(&args.addrs, &token, timeout) {
        match result {
            Ok(took) => println!("{addr}: stopping (acknowledged in {:.1} ms)", took.as_secs_f64() * 1000.0),
            Err(e) => {
                all = false;
                eprintln!("loader: error: {addr}: {e}");
            }
        }
    }
    Ok(if all { Outcome::Passed } else { Outcome::Error })
}

/// The exit outcome a finished summary calls for. A breakpoint run exists to find where
/// steps start failing, so one that found its knee has passed.
fn outcome_of(s: &Summary) -> Outcome {
    if let Some(failure) = &s.failure {
        eprintln!("loader: error: the run failed part-way ({failure}); what it measured until then is in summary.json");
        Outcome::Error
    } else if s.interrupted {
        Outcome::Interrupted
    } else if s.verdict.trusted == Some(false) && s.analysis.knee_on_trusted_steps != Some(true) {
        // Untrusted steps past the one that broke the knee change nothing it concluded: such
        // a run exits by its gates (its verdict still says which steps hold).
        Outcome::Untrusted
    } else if s.run.profile == "breakpoint" && s.knee.is_some() {
        Outcome::Passed
    } else if s.phases.iter().any(|p| p.passed == Some(false)) {
        Outcome::GatesFailed
    } else {
        Outcome::Passed
    }
}

/// A saved run's `DIR/summary.json` and its path; a missing directory or file, unreadable
/// JSON or another schema is an error of one line. A run that never wrote it (killed,
/// crashed) is recovered from its last checkpoint, `DIR/summary.partial.json`, marked so.
fn read_summary(dir: &Path) -> anyhow::Result<(PathBuf, Summary)> {
    if !dir.is_dir() {
        anyhow::bail!("{}: no such directory (expected a run's output directory)", dir.display());
    }
    let path = dir.join("summary.json");
    if !path.exists()
        && let Some(summary) = crate::measure::checkpoint::recover(dir)?
    {
        return Ok((path, summary));
    }
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let summary: Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a loader summary", path.display()))?;
    if summary.schema != summary::SCHEMA {
        anyhow::bail!("{}: schema {:?}, expected {:?}", path.display(), summary.schema, summary::SCHEMA);
    }
    Ok((path, summary))
}
