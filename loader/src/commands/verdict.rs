//! `loader verdict DIR`: judge a saved run again, with other limits, and rewrite its summary
//! (and its report.html); `--all` alone reads the saved verdict whole, every line of the
//! report with it, and changes nothing.

use super::{outcome_of, read_summary};
use crate::Outcome;
use crate::analysis::{self, KneeRules};
use crate::cli::VerdictArgs;
use crate::report::{text, write_json};
use crate::verdict::{self, Limits};

/// Judge `DIR/summary.json` again with the given limits.
pub(super) fn rejudge(args: &VerdictArgs) -> anyhow::Result<Outcome> {
    let (path, mut summary) = read_summary(&args.dir)?;
    let detail = if args.all { text::Detail::All } else { text::Detail::Glance };
    let limits_given = args.cpu_p95.is_some()
        || args.runqueue_p99_ms.is_some()
        || args.send_lag_p99_ms.is_some()
        || args.nic_capacity.is_some()
        || args.time_wait.is_some()
        || args.loader_delay_pct.is_some();
    if args.all && !limits_given {
        // Read as saved: the steps as the run judged them, against its own criteria.
        let criteria = summary.analysis.criteria.clone().unwrap_or_default();
        let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
        print!("{}", text::render_run(&summary, Some(&analysis), detail, Some(&args.dir)));
        return Ok(outcome_of(&summary));
    }
    let mut limits = Limits::default();
    if let Some(v) = args.cpu_p95 {
        limits.cpu_p95_pct = v;
    }
    if let Some(v) = args.runqueue_p99_ms {
        limits.runqueue_p99_ms = v;
    }
    if let Some(v) = args.send_lag_p99_ms {
        limits.send_lag_p99_ms = v;
    }
    if let Some(v) = args.nic_capacity {
        if !(v.is_finite() && v > 0.0) {
            return Err(crate::error::InputError::new("--nic-capacity", "must be a positive number of Mb/s").into());
        }
        limits.nic_capacity_mbps = Some(v);
    }
    if let Some(v) = args.time_wait {
        limits.time_wait = v;
    }
    if let Some(v) = args.loader_delay_pct {
        if !(v > 0.0 && v <= 100.0) {
            return Err(crate::error::InputError::new("--loader-delay-pct", "must be in (0, 100]").into());
        }
        limits.loader_delay_pct = v;
    }
    verdict::judge_into(&mut summary, &limits);
    // The steps are judged again against the criteria the run was judged with.
    let criteria = summary.analysis.criteria.clone().unwrap_or_default();
    let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
    analysis::annotate(&mut summary, &analysis);
    crate::watch::steps::annotate(&mut summary);
    summary.analysis.criteria = Some(criteria.clone());
    print!("{}", text::render_run(&summary, Some(&analysis), detail, Some(&args.dir)));
    if !args.dry_run {
        write_json(&path, &summary)?;
        println!("summary: {} (verdict updated)", path.display());
        // The page beside it shows the new verdict too.
        let page = crate::report::html::write(&args.dir, &super::report::hgrm_dir(&args.dir, &summary), &summary)?;
        println!("report: {}", page.display());
    }
    Ok(outcome_of(&summary))
}
