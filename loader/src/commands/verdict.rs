//! `loader verdict DIR`: judge a saved run again, with other limits, and rewrite its summary.

use std::fs;

use anyhow::Context as _;

use super::outcome_of;
use crate::Outcome;
use crate::analysis::{self, KneeRules};
use crate::cli::VerdictArgs;
use crate::report::{text, write_json};
use crate::summary::{self, Summary};
use crate::verdict::{self, Limits};

/// Judge `DIR/summary.json` again with the given limits.
pub(super) fn rejudge(args: &VerdictArgs) -> anyhow::Result<Outcome> {
    let path = args.dir.join("summary.json");
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut summary: Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a loader summary", path.display()))?;
    if summary.schema != summary::SCHEMA {
        anyhow::bail!("{}: schema {:?}, expected {:?}", path.display(), summary.schema, summary::SCHEMA);
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
    if let Some(v) = args.time_wait {
        limits.time_wait = v;
    }
    if let Some(v) = args.loader_delay_pct {
        if !(v > 0.0 && v <= 100.0) {
            return Err(crate::error::InputError::new("--loader-delay-pct", "must be in (0, 100]").into());
        }
        limits.loader_delay_pct = v;
    }
    summary.verdict = verdict::judge(&summary, &limits);
    // The steps are judged again against the criteria the run was judged with.
    let criteria = summary.analysis.criteria.clone().unwrap_or_default();
    let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
    analysis::annotate(&mut summary, &analysis);
    summary.analysis.criteria = Some(criteria.clone());
    print!("{}\n{}", text::render_verdict(&summary.verdict), text::render(&summary));
    if !args.dry_run {
        write_json(&path, &summary)?;
        println!("summary: {} (verdict updated)", path.display());
    }
    Ok(outcome_of(&summary))
}
