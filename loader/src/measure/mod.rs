//! The measuring core that `loader run` and `loader calibrate` share: start the shards on
//! the plan, watch them each second (progress, CPU, health, probes, the emergency stop),
//! merge their records into the summary ([`measure`]), then judge it ([`conclude`]).
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | [`measure`] and [`conclude`]; the process set-up they need |
//! | `execute.rs` | the shard threads, the once-a-second loop, the merge |
//! | `meters.rs` | CPU per shard thread, memory, the shards' live counters |
//! | `live_log.rs` | the per-second NDJSON stream (`--json-lines`) |
//! | `metrics_feed.rs` | the live metrics endpoint's once-a-second update (`--metrics`) |
//! | `progress.rs` | the live progress line |
//! | `probe_summary.rs` | the probes' readings as `summary.probes` |
//! | `checkpoint.rs` | `summary.partial.json` once a second, and a killed run's recovery |
//! | `signals.rs` | SIGINT, SIGTERM, SIGHUP: the halt flag, the signal's name, a hang-up's terminal |

pub mod checkpoint;
pub mod control;
mod execute;
mod live_log;
mod meters;
mod metrics_feed;
mod probe_summary;
mod progress;
pub mod signals;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;

use crate::analysis::{self, Analysis, Criteria, KneeRules};
use crate::probes::Probes;
use crate::record::ShardRecord;
use crate::report::metrics::{Endpoint, LiveMetrics};
use crate::scenario::Plan;
use crate::summary::{EmergencyStop, HealthSummary, Summary};
use crate::verdict;

use execute::execute;
use meters::proc_status_mib;
use probe_summary::probe_summary;

/// Time between starting the shards and the run's zero: the pools connect meanwhile.
const POOL_OPEN_GRACE: Duration = Duration::from_millis(250);

/// Where a run's outputs go besides the summary; all optional.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outputs<'a> {
    /// The HDR interval log and the per-phase `.hgrm` distributions go to this directory.
    pub hlog_dir: Option<&'a Path>,
    /// `--json-lines`: the file, and which run of `--repeat` this is (from 1).
    pub json_lines: Option<(&'a Path, usize)>,
    /// `--metrics`: the live endpoint, fed each second and given the final values.
    pub metrics: Option<&'a Endpoint>,
}

/// Shards, merge, summary, printing only the live progress. `probes` (already attached,
/// counting from zero) are sampled and read here; `preflight` is the host's noise floor the
/// verdict will use; `outputs` says where the HDR log, the NDJSON stream and the live
/// metrics go. The live metrics end with the merged record's counts (those of the summary).
/// The summary comes back unjudged: the caller may add the certificate comparison, then
/// [`conclude`].
pub fn measure(
    plan: &Plan,
    interrupted: &Arc<AtomicBool>,
    mut probes: Option<&mut Probes>,
    probe_reason: Option<String>,
    preflight: Option<crate::health::preflight::Preflight>,
    outputs: Outputs<'_>,
) -> anyhow::Result<Summary> {
    let Outputs { hlog_dir, json_lines, metrics } = outputs;
    let stop = Arc::new(AtomicBool::new(false));
    let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let (lines_path, run_index) = json_lines.map_or((None, 1), |(p, k)| (Some(p), k));
    let mut live_log = live_log::LiveLog::open(lines_path, run_index).with_context(|| {
        format!("cannot open --json-lines {}", lines_path.map_or(String::new(), |p| p.display().to_string()))
    })?;
    let streams = execute::Streams {
        live_log: &mut live_log,
        metrics,
        checkpoint: hlog_dir.map(|dir| (dir, started_at.as_str())),
    };
    let mut run = execute(plan, &stop, interrupted, probes.as_deref_mut(), streams, run_index)?;
    let probes_summary = probe_summary(probes.as_deref(), probe_reason);
    if let Some((mut live, endpoint)) = run.metrics.take() {
        // The summary's own source: `phases[].requests`, `.sent`, `.ok`, `.errors` are these.
        let planned: u64 = plan.phases.iter().map(|p| p.window().planned()).sum();
        live.finish(&run.record, planned, probes_summary.lost);
        endpoint.publish(live.render());
    }

    let mut summary = crate::summary::build(&crate::summary::Inputs {
        plan,
        record: &run.record,
        interrupted: interrupted.load(Ordering::Relaxed),
        elapsed_s: run.elapsed.as_secs_f64(),
        started_at,
        probes: probes_summary,
        cpu: &run.cpu,
        rss_mib: (run.rss_mib.0, run.rss_mib.1, proc_status_mib("VmHWM:")),
        health: run.health.clone(),
        stopped_at_s: run.stopped_at_ns.map(|ns| ns as f64 / 1e9),
    });
    summary.failure = run.failure.clone();
    summary.watch = run.watch.take();
    if summary.interrupted {
        summary.interrupted_by = Some(signals::stopped_by().unwrap_or("loader stop").to_string());
    }
    summary.run.last_send_s = run.last_send_ns.map(|ns| ns as f64 / 1e9);
    summary.run.checkpoint = run.checkpoint.clone();
    summary.run.zero_unix_s =
        run.started.duration_since(std::time::UNIX_EPOCH).ok().map(|d| (d.as_micros() as f64) / 1e6);
    summary.preflight = preflight;
    summary.analysis.emergency_stop = run.emergency_stop.clone();
    if let Some(dir) = hlog_dir {
        // A full or read-only disk costs these files, not the run: the summary still comes.
        // The log the checkpoints appended gets the rest; without one, it is written whole.
        let written = match run.hlog.as_mut().filter(|h| h.started()) {
            Some(hlog) => hlog.append(plan, &run.record, run.elapsed),
            None => crate::report::hdr::write(&dir.join("latency.hlog"), plan, &run.record, run.started),
        };
        if let (Some(c), Some(h)) = (summary.run.checkpoint.as_mut(), run.hlog.as_ref()) {
            c.hlog_bytes = h.bytes;
        }
        let written = written.context("cannot write the HDR interval log").and_then(|()| {
            crate::report::hgrm::write(dir, plan, &run.record).context("cannot write the percentile distributions")
        });
        if let Err(e) = written {
            eprintln!("loader: warning: {}", crate::error::one_line(e.as_ref()));
        }
    }
    Ok(summary)
}

/// The verdict on a measured summary, then the analysis against the plan's criteria, both
/// written into it.
pub fn conclude(summary: &mut Summary, plan: &Plan) -> anyhow::Result<Analysis> {
    verdict::judge_into(summary, &plan.verdict);
    let criteria = Criteria { tail_samples_min: plan.verdict.min_tail_samples, ..Criteria::from(&plan.slo) };
    let analysis = analysis::analyze(summary, &criteria, &KneeRules::default())?;
    analysis::annotate(summary, &analysis);
    crate::watch::steps::annotate(summary);
    summary.analysis.criteria = Some(criteria.clone());
    summary.analysis.spike = analysis::profiles::spike(&summary.phases, &summary.series, criteria.goodput_min);
    if plan.profile_kind() == crate::scenario::ProfileKind::Soak {
        summary.analysis.soak = Some(analysis::profiles::soak(summary));
    }
    Ok(analysis)
}

/// What the shards measured, merged, and the loader's CPU per second.
struct Executed<'m> {
    record: ShardRecord,
    elapsed: Duration,
    /// Per second, the CPU of each shard (percent of one core).
    cpu: Vec<Vec<f64>>,
    /// Resident memory at the first second and at the end.
    rss_mib: (Option<f64>, Option<f64>),
    /// Wall-clock time of the run's zero instant.
    started: SystemTime,
    /// `/proc` and cgroup health, per second.
    health: HealthSummary,
    /// The emergency stop, if it fired.
    emergency_stop: Option<EmergencyStop>,
    /// When the first shard saw the stop (ns since start), if the run was stopped.
    stopped_at_ns: Option<u64>,
    /// When the last request was sent (ns since start).
    last_send_ns: Option<u64>,
    /// Why shards failed part-way, if any did.
    failure: Option<String>,
    /// The live metrics (with `--metrics`), still to be given their final values.
    metrics: Option<(LiveMetrics, &'m Endpoint)>,
    /// What the checkpoint wrote and cost (with an output directory).
    checkpoint: Option<crate::summary::CheckpointInfo>,
    /// The interval log the checkpoints appended (with an output directory).
    hlog: Option<crate::report::hdr::Appender>,
    /// What the watched sources showed each second (`--watch`).
    watch: Option<crate::summary::WatchSummary>,
}

/// Let the pool use every descriptor the hard limit allows.
pub fn raise_nofile_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
    {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}
