//! `loader merge DIR… --out DIR`: the machines' outputs of one sharded run (`--shard i/N`)
//! joined into one summary, interval log and report ([`crate::merge`]), judged again.

use std::time::{Duration, UNIX_EPOCH};

use super::{outcome_of, read_summary};
use crate::Outcome;
use crate::analysis::{self, KneeRules};
use crate::cli::MergeArgs;
use crate::report::hdr::{Interval, tag_of, write_intervals};
use crate::report::{text, write_json};

/// Merge, write `OUT/summary.json`, `OUT/latency.hlog` and `OUT/report.html`.
pub(super) fn merge(args: &MergeArgs) -> anyhow::Result<Outcome> {
    let parts = args
        .dirs
        .iter()
        .map(|dir| {
            let (_, summary) = read_summary(dir)?;
            crate::merge::read(dir, summary)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let (mut summary, histograms) = crate::merge::merge(&parts)?;
    let criteria = summary.analysis.criteria.clone().unwrap_or_default();
    let analysis = analysis::analyze(&summary, &criteria, &KneeRules::default())?;
    analysis::annotate(&mut summary, &analysis);
    summary.analysis.criteria = Some(criteria);

    std::fs::create_dir_all(&args.out)
        .map_err(|e| anyhow::anyhow!("--out: cannot create {}: {e}", args.out.display()))?;
    let intervals: Vec<Interval<'_>> = summary
        .phases
        .iter()
        .zip(&histograms)
        .map(|(p, [latency, service, lag])| Interval {
            tag: tag_of(&p.name),
            start: Duration::from_secs_f64(p.start_s),
            duration: Duration::from_secs_f64(p.duration_s),
            histograms: [latency, service, lag],
        })
        .collect();
    let zero = UNIX_EPOCH + Duration::from_secs_f64(summary.run.zero_unix_s.unwrap_or(0.0).max(0.0));
    write_intervals(&args.out.join("latency.hlog"), &summary.run.url, &intervals, zero)?;
    print!("{}", text::render_run(&summary, Some(&analysis), text::Detail::Glance, Some(&args.out)));
    let path = args.out.join("summary.json");
    write_json(&path, &summary)?;
    println!("summary: {} (merged from {} machines)", path.display(), parts.len());
    let page = crate::report::html::write(&args.out, &args.out, &summary)?;
    println!("report: {}", page.display());
    Ok(outcome_of(&summary))
}
