//! The per-second NDJSON stream (`--json-lines FILE`): one JSON object per second of the
//! run, written and flushed as the second ends, so `tail -f` or a CI job can follow it; a
//! last line (`"final": true`) carries what the shards finished after the last whole second,
//! so each counter summed over the lines equals the run's total.
//!
//! A write that fails is reported once and the stream stops; the run goes on.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::meters::LiveTotals;
use crate::scenario::Plan;

/// One second of the stream.
#[derive(Debug, Serialize)]
pub(super) struct Line<'a> {
    /// Which run of `--repeat` (from 1).
    pub run: usize,
    /// End of the second, seconds since the run's zero (the last line: when the shards ended).
    pub t: f64,
    /// The phase the second ended in (`draining` after the last).
    pub phase: &'a str,
    /// Requests the schedule offered in this second.
    pub offered: u64,
    /// Requests sent in this second.
    pub sent: u64,
    /// 2xx/3xx answers in this second.
    pub ok: u64,
    /// Requests that ended in an error class in this second.
    pub errors: u64,
    /// Requests in flight at the end of the second.
    pub in_flight: u64,
    /// Open connections at the end of the second.
    pub connections: u64,
    /// CPU of the busiest shard over the second, percent of one core.
    pub cpu_max: Option<f64>,
    /// The closing line.
    #[serde(rename = "final", skip_serializing_if = "std::ops::Not::not")]
    pub last: bool,
}

impl<'a> Line<'a> {
    /// A line for the second ending at `at` with the counts of `second`.
    pub fn new(run: usize, at: Duration, plan: &'a Plan, offered: u64, second: &LiveTotals, cpu: Option<f64>) -> Self {
        let phase = plan.phase_at(at).map_or("draining", |p| p.name.as_str());
        Line {
            run,
            t: (at.as_secs_f64() * 1000.0).round() / 1000.0,
            phase,
            offered,
            sent: second.sent,
            ok: second.ok,
            errors: second.errors,
            in_flight: second.in_flight,
            connections: second.open,
            cpu_max: cpu.map(|c| (c * 100.0).round() / 100.0),
            last: false,
        }
    }
}

/// The open stream, or nothing when not asked for (or after a failed write).
pub(super) struct LiveLog {
    out: Option<BufWriter<File>>,
    path: String,
}

impl LiveLog {
    /// Open `path` for run `run`: the first run truncates it, later runs of `--repeat` append.
    pub fn open(path: Option<&Path>, run: usize) -> std::io::Result<LiveLog> {
        let Some(path) = path else { return Ok(LiveLog { out: None, path: String::new() }) };
        let file =
            if run <= 1 { File::create(path)? } else { OpenOptions::new().append(true).create(true).open(path)? };
        Ok(LiveLog { out: Some(BufWriter::new(file)), path: path.display().to_string() })
    }

    /// Whether lines are being written.
    pub fn is_on(&self) -> bool {
        self.out.is_some()
    }

    /// Write and flush one line.
    pub fn write(&mut self, line: &Line<'_>) {
        let Some(out) = self.out.as_mut() else { return };
        let written = serde_json::to_writer(&mut *out, line)
            .map_err(std::io::Error::other)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            eprintln!("loader: warning: --json-lines {}: {e}; the per-second stream stops here", self.path);
            self.out = None;
        }
    }
}
