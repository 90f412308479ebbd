//! `loader report DIR`: render a saved run's `DIR/report.html` from its `DIR/summary.json`
//! (and its `hgrm/` files for the percentile spectrum). The summary is not changed.

use std::path::{Path, PathBuf};

use super::read_summary;
use crate::Outcome;
use crate::cli::ReportArgs;
use crate::summary::Summary;

/// Write `DIR/report.html`.
pub(super) fn render(args: &ReportArgs) -> anyhow::Result<Outcome> {
    let (_, summary) = read_summary(&args.dir)?;
    let hgrm_dir = hgrm_dir(&args.dir, &summary);
    let path = crate::report::html::write(&args.dir, &hgrm_dir, &summary)?;
    println!("report: {}", path.display());
    Ok(Outcome::Passed)
}

/// Where the run's `hgrm/` files are: `dir` itself, or for the combined summary of
/// `--repeat`, its last run's directory (`run-N` under `dir`), as `loader run` wrote it.
pub(super) fn hgrm_dir(dir: &Path, s: &Summary) -> PathBuf {
    if dir.join("hgrm").is_dir() {
        return dir.to_path_buf();
    }
    let last = s.capacity.as_ref().and_then(|c| c.runs.last()).and_then(|r| Path::new(r).file_name());
    last.map_or_else(|| dir.to_path_buf(), |name| dir.join(name))
}
