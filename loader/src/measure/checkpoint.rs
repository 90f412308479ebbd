//! The run's checkpoint: once a second the main loop takes the shards' snapshots of their
//! records (`record::CheckpointSlot`), merges them, and writes the summary the run would have
//! were it stopped then to `DIR/summary.partial.json` — a temporary file renamed over the
//! last, so a kill at any instant leaves a whole one. When the run ends, `summary.json` is
//! written and the checkpoint removed; when it does not (SIGKILL, the OOM killer, a crash),
//! `loader verdict DIR` and `loader report DIR` rebuild `summary.json` from it
//! ([`recover`]): at most the last second is lost.
//!
//! The per-second series (`series`, `health.series`) grow with the run, so they are not
//! rewritten each second: the seconds [`SETTLED_S`] behind the checkpoint are appended to
//! `DIR/summary.partial.series` (one JSON line each) and left out of the rewritten file,
//! which keeps its size and cost whatever the run's length; [`recover`] joins the two.
//!
//! Each checkpoint also appends to `DIR/latency.hlog` the samples each phase's histograms
//! gained since the last ([`crate::report::hdr::Appender`]), so the histograms of a killed
//! run survive to the same second; the run's end appends the rest.
//!
//! Requests planned but not finished at the checkpoint are accounted as a stop accounts
//! them: sent and unanswered are `aborted` (without a latency: their answer time is
//! unknown), not yet sent are `unsent`. The probes are read only when a run ends, so a
//! recovered summary has none of their evidence (it says so); the send, read and pool
//! evidence the shards record is in it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::record::{CheckpointSlot, ShardRecord};
use crate::scenario::Plan;
use crate::summary::{HealthSummary, ProbeSummary, Summary};

/// The checkpoint's file in the output directory.
pub const FILE: &str = "summary.partial.json";
/// The checkpoint's settled per-second series, beside it.
pub const SERIES_FILE: &str = "summary.partial.series";
/// What a checkpoint's `interrupted_by` says until it is recovered.
const MARK: &str = "checkpoint";
/// Seconds this far behind a checkpoint are settled: nothing more lands in them (a timeout
/// is recorded at its deadline, which the shards see pass within their next turn).
const SETTLED_S: u64 = 2;

/// One line of [`SERIES_FILE`].
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
enum SeriesLine {
    Second(crate::summary::SecondSummary),
    Health(crate::health::HealthSample),
}

/// [`SERIES_FILE`] as written so far.
struct SeriesLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    /// Seconds before this one are in the file (of `series` and of `health.series`).
    until: u64,
    /// Bytes appended.
    bytes: u64,
}

impl SeriesLog {
    /// Append the seconds of `summary` settled by `at_s` and not yet in the file, and leave
    /// only the later ones, up to `at_s`, in `summary`. On a failure the summary keeps them.
    fn settle(&mut self, summary: &mut Summary, at_s: f64) -> std::io::Result<()> {
        use std::io::Write as _;
        let settled = (at_s as u64).saturating_sub(SETTLED_S);
        let new = |t: u64| t >= self.until && t < settled;
        let mut out = Vec::new();
        for s in summary.series.iter().filter(|s| new(s.t)) {
            serde_json::to_writer(&mut out, &SeriesLine::Second(s.clone()))?;
            out.push(b'\n');
        }
        for h in summary.health.series.iter().filter(|h| new(h.t)) {
            serde_json::to_writer(&mut out, &SeriesLine::Health(h.clone()))?;
            out.push(b'\n');
        }
        if !out.is_empty() {
            let file = match &mut self.file {
                Some(f) => f,
                None => self.file.insert(std::fs::File::create(&self.path)?),
            };
            file.write_all(&out)?;
            self.bytes += out.len() as u64;
        }
        self.until = self.until.max(settled);
        // The seconds after the checkpoint's hold nothing yet but their offered counts.
        let now = at_s as u64;
        summary.series.retain(|s| s.t >= self.until && s.t <= now);
        summary.health.series.retain(|h| h.t >= self.until);
        Ok(())
    }
}

/// The main loop's side of the checkpoint.
pub(super) struct Checkpoint {
    path: PathBuf,
    slots: Vec<Arc<CheckpointSlot>>,
    /// Each shard's latest snapshot, as taken, and when it was made (ns since the zero).
    records: Vec<Option<(ShardRecord, u64)>>,
    started_at: String,
    /// The interval log, appended at each checkpoint.
    pub hlog: crate::report::hdr::Appender,
    /// The settled seconds of the series.
    series: SeriesLog,
    /// Written so far, the last one's size, and the main loop's time spent on them.
    pub writes: u64,
    pub bytes: u64,
    pub main_ns: u64,
    /// A write or an append failed and was said (once).
    said: bool,
}

/// What the loop knows of the run besides the records.
pub(super) struct Known<'a> {
    pub at: Duration,
    pub cpu: &'a [Vec<f64>],
    pub rss_mib: (Option<f64>, Option<f64>, Option<f64>),
    pub health: HealthSummary,
    pub zero: SystemTime,
}

impl Checkpoint {
    /// A checkpoint of `shards` shards in `dir`, for a run of `url` started at `started_at`
    /// (RFC 3339) whose zero is `zero`.
    pub fn new(dir: &Path, shards: usize, started_at: String, url: &str, zero: SystemTime) -> Self {
        Checkpoint {
            path: dir.join(FILE),
            slots: (0..shards).map(|_| Arc::new(CheckpointSlot::default())).collect(),
            records: vec![None; shards],
            started_at,
            hlog: crate::report::hdr::Appender::new(&dir.join("latency.hlog"), url, zero),
            series: SeriesLog { path: dir.join(SERIES_FILE), file: None, until: 0, bytes: 0 },
            writes: 0,
            bytes: 0,
            main_ns: 0,
            said: false,
        }
    }

    /// Shard `shard`'s hand-over point, for its config.
    pub fn slot(&self, shard: usize) -> Option<Arc<CheckpointSlot>> {
        self.slots.get(shard).cloned()
    }

    /// The shards' time spent copying for the checkpoint, ms in all.
    pub fn shard_ms(&self) -> f64 {
        self.slots.iter().map(|s| s.copy_ns()).sum::<u64>() as f64 / 1e6
    }

    /// One second: take the fresh snapshots and, once every shard has given one, write the
    /// summary as of `known.at`.
    pub fn second(&mut self, plan: &Plan, known: Known<'_>) {
        let began = Instant::now();
        for (slot, record) in self.slots.iter().zip(&mut self.records) {
            // The same partial copy the shards make: the main loop shares their CPUs.
            slot.take_fresh(|r, at| match record {
                Some((mine, when)) => {
                    mine.follow(r, *when);
                    *when = at;
                }
                None => *record = Some((ShardRecord::snapshot_of(r), at)),
            });
        }
        if let Some((mut summary, record, covered)) = self.summary(plan, known) {
            if let Err(e) = self.series.settle(&mut summary, covered.as_secs_f64()) {
                self.warn(&format!("cannot append to {}: {e}", self.series.path.display()));
            }
            self.write(&summary);
            let first = &self.records[0].as_ref().expect("a snapshot of every shard").0;
            if let Err(e) = self.hlog.append(plan, record.as_ref().unwrap_or(first), covered) {
                self.warn(&e.to_string());
            }
        }
        self.main_ns += began.elapsed().as_nanos() as u64;
    }

    /// The summary as of the snapshots, the merged record when there are several shards, and
    /// the time the snapshots cover.
    fn summary(&self, plan: &Plan, known: Known<'_>) -> Option<(Summary, Option<ShardRecord>, Duration)> {
        let (first, rest) = self.records.split_first()?;
        let (first, first_at) = first.as_ref()?;
        let mut covered_ns = *first_at;
        // One shard (the usual case) needs no merged copy.
        let merged = match rest {
            [] => None,
            _ => {
                let mut merged = first.clone();
                for r in rest {
                    let (record, at) = r.as_ref()?;
                    merged.merge(record);
                    covered_ns = covered_ns.min(*at);
                }
                Some(merged)
            }
        };
        let record = merged.as_ref().unwrap_or(first);
        // The run as the shards' snapshots hold it: up to the oldest of them.
        let at_s = (covered_ns as f64 / 1e9).min(known.at.as_secs_f64());
        let mut summary = crate::summary::build(&crate::summary::Inputs {
            plan,
            record,
            interrupted: true,
            elapsed_s: at_s,
            started_at: self.started_at.clone(),
            probes: ProbeSummary {
                available: false,
                unavailable_reason: Some(
                    "not in a checkpoint: the probes are read when a run ends, and this one did not".into(),
                ),
                ..Default::default()
            },
            cpu: known.cpu,
            rss_mib: known.rss_mib,
            health: known.health,
            stopped_at_s: Some(at_s),
        });
        summary.interrupted_by = Some(MARK.to_string());
        summary.run.zero_unix_s =
            known.zero.duration_since(std::time::UNIX_EPOCH).ok().map(|d| (d.as_micros() as f64) / 1e6);
        account_unfinished(&mut summary);
        super::conclude(&mut summary, plan).ok()?;
        Some((summary, merged, Duration::from_secs_f64(at_s)))
    }

    /// Bytes of the settled series appended beside the checkpoint so far.
    pub fn series_bytes(&self) -> u64 {
        self.series.bytes
    }

    fn warn(&mut self, what: &str) {
        if !std::mem::replace(&mut self.said, true) {
            eprintln!("loader: warning: {what}; the run goes on, but a kill would lose it");
        }
    }

    fn write(&mut self, summary: &Summary) {
        let tmp = self.path.with_extension("json.tmp");
        let written = serde_json::to_vec(summary)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, &bytes).map(|()| bytes.len()))
            .and_then(|n| std::fs::rename(&tmp, &self.path).map(|()| n));
        match written {
            Ok(n) => {
                self.writes += 1;
                self.bytes = n as u64;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                self.warn(&format!("cannot write the checkpoint {}: {e}", self.path.display()));
            }
        }
    }
}

/// Requests planned but not finished at a checkpoint, accounted as a stop would: sent and
/// unanswered `aborted`, never sent `unsent`, so that `requests = ok + Σ errors` holds.
fn account_unfinished(summary: &mut Summary) {
    for p in &mut summary.phases {
        let (aborted, unsent) = unfinished(p.requests, p.sent, p.ok, &p.errors);
        *p.errors.entry("aborted".into()).or_default() += aborted;
        *p.errors.entry("unsent".into()).or_default() += unsent;
    }
}

/// Of `requests` planned, `sent` and finished (`ok` and `errors` by class): how many are in
/// flight (sent, unanswered) and how many not yet sent.
fn unfinished(requests: u64, sent: u64, ok: u64, errors: &std::collections::BTreeMap<String, u64>) -> (u64, u64) {
    let finished = ok + errors.values().sum::<u64>();
    // Of the finished, those that were never sent (dropped at their deadline).
    let never_sent = errors.get("dropped").copied().unwrap_or(0);
    let in_flight = sent.saturating_sub(finished.saturating_sub(never_sent));
    (in_flight, requests.saturating_sub(finished + in_flight))
}

/// The summary of a run that never wrote `DIR/summary.json` (killed, crashed), from its last
/// checkpoint, marked as such — `None` when there is no checkpoint either.
pub fn recover(dir: &Path) -> anyhow::Result<Option<Summary>> {
    use anyhow::Context as _;
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut summary: Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a loader checkpoint", path.display()))?;
    if let Ok(lines) = std::fs::read_to_string(dir.join(SERIES_FILE)) {
        join_series(&mut summary, &lines);
    }
    let covered = summary.run.elapsed_s;
    summary.interrupted_by = Some(format!(
        "killed or crashed: recovered from its checkpoint at {covered:.0} s (requests unfinished then are aborted or unsent; no probe figures)"
    ));
    eprintln!(
        "loader: {} has no summary.json: the run never ended (killed or crashed); recovered from its checkpoint at {covered:.0} s",
        dir.display()
    );
    Ok(Some(summary))
}

/// The settled seconds of [`SERIES_FILE`] (`lines`) before the checkpoint's own: where both
/// hold a second (a kill between the append and the checkpoint's rename), the appended one,
/// the later. A line cut short by the kill is left out.
fn join_series(summary: &mut Summary, lines: &str) {
    let (mut seconds, mut health) = (Vec::new(), Vec::new());
    for line in lines.lines() {
        match serde_json::from_str(line) {
            Ok(SeriesLine::Second(s)) => seconds.push(s),
            Ok(SeriesLine::Health(h)) => health.push(h),
            Err(_) => {}
        }
    }
    let last = seconds.iter().map(|s| s.t + 1).max().unwrap_or(0);
    seconds.extend(summary.series.drain(..).filter(|s| s.t >= last));
    summary.series = seconds;
    let last = health.iter().map(|h| h.t + 1).max().unwrap_or(0);
    health.extend(summary.health.series.drain(..).filter(|h| h.t >= last));
    summary.health.series = health;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_requests_are_aborted_or_unsent_so_every_planned_one_is_accounted() {
        // 1,000 planned, 620 sent: 590 ok and 10 timeouts finished, so 20 in flight; 5
        // dropped at their deadline were never sent; 375 not yet sent.
        let errors = [("timeout".to_string(), 10), ("dropped".to_string(), 5)].into_iter().collect();
        let (aborted, unsent) = unfinished(1000, 620, 590, &errors);
        assert_eq!((aborted, unsent), (20, 375));
        assert_eq!(590 + 10 + 5 + aborted + unsent, 1000, "every planned request accounted");
        // The run's end: nothing left.
        let errors = [("timeout".to_string(), 10)].into_iter().collect();
        assert_eq!(unfinished(1000, 1000, 990, &errors), (0, 0));
    }
}
