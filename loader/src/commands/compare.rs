//! `loader compare A B`: two saved runs read (each with its repeats), compared
//! ([`crate::compare`]), printed as text or JSON; exit 4 when `--max-regression` is broken.

use std::path::{Path, PathBuf};

use super::read_summary;
use crate::Outcome;
use crate::cli::CompareArgs;
use crate::compare::{self, Side};
use crate::error::InputError;

/// Compare `A` (the baseline) with `B`.
pub(super) fn compare(args: &CompareArgs) -> anyhow::Result<Outcome> {
    if let Some(b) = args.max_regression
        && !(b.is_finite() && b >= 0.0)
    {
        return Err(InputError::new("--max-regression", "must be a percentage ≥ 0, e.g. 10").into());
    }
    let (a, b) = (side(&args.a)?, side(&args.b)?);
    let c = compare::compare(&a, &b, args.max_regression);
    if let Some(path) = &args.html {
        use crate::report::html::compare as page;
        let (sa, sb) = (page::spectra_of(&args.a, &a.top), page::spectra_of(&args.b, &b.top));
        page::write(path, &c, &sa, &sb)?;
        eprintln!("loader: compare: {}", path.display());
    }
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&c)?),
        false => print!("{}", compare::text::render(&c)),
    }
    Ok(if c.regressions.is_empty() { Outcome::Passed } else { Outcome::GatesFailed })
}

/// A saved run and its repeats (`capacity.runs`: each run's directory, as written then —
/// found as it is, or beside the combined summary when the run was moved).
fn side(dir: &Path) -> anyhow::Result<Side> {
    let (_, top) = read_summary(dir)?;
    let mut runs = Vec::new();
    let named = top.capacity.as_ref().map(|c| c.runs.clone()).unwrap_or_default();
    if named.len() >= 2 {
        for run in &named {
            let as_written = PathBuf::from(run);
            let beside = as_written.file_name().map(|n| dir.join(n));
            let found = [Some(as_written), beside].into_iter().flatten().find(|d| d.join("summary.json").is_file());
            let Some(found) = found else {
                anyhow::bail!("{}: its repeat {run} is missing (no summary.json there or beside it)", dir.display());
            };
            runs.push(read_summary(&found)?.1);
        }
    } else {
        runs.push(top.clone());
    }
    Ok(Side { label: dir.display().to_string(), top, runs })
}
