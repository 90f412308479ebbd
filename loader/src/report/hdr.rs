//! The HDR interval log: each phase's histograms in the standard HdrHistogram log format
//! (V2 deflate encoding), so HistogramLogProcessor, HdrHistogram's plotter or any other
//! reader can re-cut them. Intervals are tagged `<phase>` (corrected latency),
//! `<phase>.service` (uncorrected) and `<phase>.send_lag`. Values are microseconds; the max
//! column is divided by 1000 (milliseconds).
//!
//! A run with an output directory writes the log as it goes ([`Appender`]): each second's
//! checkpoint appends the samples each phase gained since the last one, so a killed run
//! keeps its histograms up to its last checkpoint, and a finished run's log holds one
//! interval per phase and second (its per-second view). Summed by tag ([`read`]) they are
//! the phases' histograms. Without one (`loader merge`'s output) it is one interval per phase.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

use crate::error::OutputError;
use crate::record::ShardRecord;
use crate::scenario::Plan;

/// A phase's latency, service-time and send-lag histograms.
type Phase3 = [Histogram<u64>; 3];

/// A phase name as a log tag (tags may not hold spaces or commas).
pub fn tag_of(name: &str) -> String {
    name.chars().map(|c| if c == ' ' || c == ',' { '_' } else { c }).collect()
}

/// Write `record`'s per-phase histograms to `path`; `started` is the run's zero instant.
pub fn write(path: &Path, plan: &Plan, record: &ShardRecord, started: SystemTime) -> Result<(), OutputError> {
    let phases: Vec<Interval<'_>> = plan
        .phases
        .iter()
        .zip(&record.phases)
        .map(|(phase, rec)| Interval {
            tag: tag_of(&phase.name),
            start: phase.start,
            duration: phase.duration,
            histograms: [&rec.latency, &rec.service, &rec.send_lag],
        })
        .collect();
    write_intervals(path, &plan.target.url, &phases, started)
}

/// One phase's interval: its tag, window and its latency, service and send-lag histograms.
pub struct Interval<'a> {
    /// The phase's tag ([`tag_of`] its name).
    pub tag: String,
    /// Offset from the run's zero.
    pub start: Duration,
    /// Length.
    pub duration: Duration,
    /// Corrected latency, service time, send lag (µs).
    pub histograms: [&'a Histogram<u64>; 3],
}

/// Suffixes of the three histograms of a phase, in [`Interval::histograms`] order.
const SUFFIXES: [&str; 3] = ["", ".service", ".send_lag"];

/// Write `phases` as an interval log for a run of `url` whose zero was `started`.
pub fn write_intervals(
    path: &Path,
    url: &str,
    phases: &[Interval<'_>],
    started: SystemTime,
) -> Result<(), OutputError> {
    let mut out = header(url, started, "one interval per phase");
    encode(&mut out, phases).map_err(|e| OutputError::new(path, e))?;
    std::fs::File::create(path).and_then(|mut file| file.write_all(&out)).map_err(|e| OutputError::new(path, e))
}

/// The log's header: what wrote it, for which URL, its zero and the max column's divisor.
fn header(url: &str, started: SystemTime, intervals: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    IntervalLogWriterBuilder::new()
        .add_comment(&format!("loader {} interval log: {url}", env!("CARGO_PKG_VERSION")))
        .add_comment(&format!("values in microseconds; {intervals}; tags: PHASE, PHASE.service, PHASE.send_lag"))
        .with_start_time(started)
        .with_base_time(started)
        .with_max_value_divisor(1000.0)
        .begin_log_with(&mut out, &mut serializer)
        .expect("writes to a Vec cannot fail");
    out
}

/// Append the interval lines of `phases` to `out` (after a [`header`]).
fn encode(out: &mut Vec<u8>, phases: &[Interval<'_>]) -> std::io::Result<()> {
    let mut serializer = V2DeflateSerializer::new();
    let mut lines = Vec::new();
    // The builder writes its divisor line first; the lines after it are the intervals.
    let mut log =
        IntervalLogWriterBuilder::new().with_max_value_divisor(1000.0).begin_log_with(&mut lines, &mut serializer)?;
    for phase in phases {
        for (suffix, h) in SUFFIXES.iter().zip(phase.histograms) {
            let tag = format!("{}{suffix}", phase.tag);
            log.write_histogram(h, phase.start, phase.duration.max(Duration::from_millis(1)), Tag::new(&tag))
                .map_err(|e| std::io::Error::other(format!("cannot encode histogram {tag}: {e}")))?;
        }
    }
    drop(log);
    let first = lines.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    out.extend_from_slice(&lines[first..]);
    Ok(())
}

/// The interval log written as the run goes: each [`Appender::append`] adds, for every phase
/// whose histograms gained samples, an interval holding those samples, so the file always
/// holds the run up to the last append (appended with one `write`, no rename needed).
pub struct Appender {
    path: std::path::PathBuf,
    url: String,
    started: SystemTime,
    file: Option<std::fs::File>,
    /// Per phase, its latency, service and send-lag histograms as of the last append that
    /// moved it (`None`: nothing of it appended yet).
    appended: Vec<Option<Phase3>>,
    /// The end of the last interval appended (from the run's zero).
    until: Duration,
    /// Bytes written so far.
    pub bytes: u64,
}

impl Appender {
    /// A log at `path` (created on the first append) for a run of `url` whose zero was
    /// `started`.
    pub fn new(path: &Path, url: &str, started: SystemTime) -> Self {
        Appender {
            path: path.to_path_buf(),
            url: url.to_string(),
            started,
            file: None,
            appended: Vec::new(),
            until: Duration::ZERO,
            bytes: 0,
        }
    }

    /// Whether anything was appended yet.
    pub fn started(&self) -> bool {
        self.file.is_some()
    }

    /// Append what `record`'s phases (tagged as `plan`'s) gained up to `at` (from the run's
    /// zero) since the last append.
    pub fn append(&mut self, plan: &Plan, record: &ShardRecord, at: Duration) -> Result<(), OutputError> {
        let fail = |e: std::io::Error| OutputError::new(&self.path, e);
        // Per phase that moved: its histograms now, and what they gained since the last append.
        let mut gained: Vec<(usize, Phase3, Phase3)> = Vec::new();
        for (i, rec) in record.phases.iter().enumerate() {
            let now = [&rec.latency, &rec.service, &rec.send_lag];
            let before = self.appended.get(i).and_then(Option::as_ref);
            let moved = match before {
                Some(b) => b.iter().zip(now).any(|(b, n)| b.len() != n.len()),
                None => now.iter().any(|n| !n.is_empty()),
            };
            if !moved {
                continue;
            }
            let now = now.map(Histogram::clone);
            let mut delta = now.clone();
            if let Some(before) = before {
                for (d, b) in delta.iter_mut().zip(before) {
                    d.subtract(b).map_err(|e| fail(std::io::Error::other(format!("samples went missing: {e:?}"))))?;
                }
            }
            gained.push((i, now, delta));
        }
        let (start, until) = (self.until, at.max(self.until));
        let intervals: Vec<Interval<'_>> = gained
            .iter()
            .map(|(i, _, [l, s, g])| Interval {
                tag: tag_of(plan.phases.get(*i).map_or("", |p| p.name.as_str())),
                start,
                duration: until - start,
                histograms: [l, s, g],
            })
            .collect();
        let mut out = match self.file {
            Some(_) => Vec::new(),
            None => header(&self.url, self.started, "one interval per phase and second, the samples it gained"),
        };
        encode(&mut out, &intervals).map_err(fail)?;
        drop(intervals);
        let file = match &mut self.file {
            Some(f) => f,
            None => self.file.insert(std::fs::File::create(&self.path).map_err(fail)?),
        };
        file.write_all(&out).map_err(fail)?;
        self.bytes += out.len() as u64;
        self.until = until;
        for (i, now, _) in gained {
            if self.appended.len() <= i {
                self.appended.resize_with(i + 1, || None);
            }
            self.appended[i] = Some(now);
        }
        Ok(())
    }
}

/// The histograms of an interval log `loader run` wrote, by tag (`PHASE`, `PHASE.service`,
/// `PHASE.send_lag`); a second interval of one tag is added to the first.
pub fn read(path: &Path) -> Result<BTreeMap<String, Histogram<u64>>, OutputError> {
    use base64::Engine as _;
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    let bad = |what: String| OutputError::new(path, std::io::Error::new(std::io::ErrorKind::InvalidData, what));
    let bytes = std::fs::read(path).map_err(|e| OutputError::new(path, e))?;
    let mut out: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let entry = entry.map_err(|e| bad(format!("not an HDR interval log ({e:?})")))?;
        let LogEntry::Interval(h) = entry else { continue };
        let tag = h.tag().map(|t| t.as_str().to_string()).unwrap_or_default();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(h.encoded_histogram())
            .map_err(|e| bad(format!("interval {tag}: {e}")))?;
        let hist: Histogram<u64> =
            Deserializer::new().deserialize(&mut &raw[..]).map_err(|e| bad(format!("interval {tag}: {e:?}")))?;
        match out.get_mut(&tag) {
            Some(sum) => sum.add(&hist).map_err(|e| bad(format!("interval {tag}: {e:?}")))?,
            None => {
                out.insert(tag, hist);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;
    use crate::scenario::Spec;
    use hdrhistogram::serialization::Deserializer;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    /// A plan of two steps (10 and 20 req/s) held for `hold`.
    fn two_steps(hold: &str) -> Plan {
        let args = RunArgs {
            url: Some("http://127.0.0.1:9/".into()),
            steps: Some(vec![10.0, 20.0]),
            hold: Some(hold.into()),
            ..Default::default()
        };
        let spec = Spec::from_run_args(&args).unwrap();
        Plan::resolve(&spec, "http://127.0.0.1:9/").unwrap()
    }

    #[test]
    fn log_round_trips_every_phase() {
        let plan = two_steps("1s");
        let windows = plan.phases.iter().map(|p| p.window()).collect();
        let mut rec = ShardRecord::new(windows, 2);
        rec.on_response(1, 1_000_000_000, 1_000_000_000, 1_004_000_000, 200);
        let dir = std::env::temp_dir().join(format!("loader-hdr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("latency.hlog");
        write(&path, &plan, &rec, SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut tags = Vec::new();
        let mut counts = Vec::new();
        for entry in IntervalLogIterator::new(&bytes) {
            if let Ok(LogEntry::Interval(h)) = entry {
                tags.push(h.tag().map(|t| t.as_str().to_string()).unwrap_or_default());
                let raw = base64_decode(h.encoded_histogram());
                let hist: hdrhistogram::Histogram<u64> = Deserializer::new().deserialize(&mut &raw[..]).unwrap();
                counts.push(hist.len());
            }
        }
        assert_eq!(
            tags,
            ["step_1", "step_1.service", "step_1.send_lag", "step_2", "step_2.service", "step_2.send_lag"]
        );
        assert_eq!(counts, [0, 0, 0, 1, 1, 0]);
        // Read back by tag, as `loader merge` reads it.
        let back = read(&path).unwrap();
        assert_eq!(back.len(), 6);
        let h = &back["step_2"];
        assert!(h.len() == 1 && h.equivalent(h.max(), 4000), "{} {}", h.len(), h.max());
        assert!(read(&dir.join("absent")).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Appended a second at a time, the log holds each second's new samples and, summed by
    /// tag, the phases' histograms; a second in which a phase gained nothing adds no line.
    #[test]
    fn appended_seconds_add_up_to_the_phases() {
        let plan = two_steps("2s");
        let windows = plan.phases.iter().map(|p| p.window()).collect();
        let mut rec = ShardRecord::new(windows, 4);
        let dir = std::env::temp_dir().join(format!("loader-hdr-append-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("latency.hlog");
        let mut log = Appender::new(&path, "http://127.0.0.1:9/", SystemTime::UNIX_EPOCH);
        assert!(!log.started());
        rec.on_response(0, 100_000_000, 100_000_000, 102_000_000, 200);
        log.append(&plan, &rec, Duration::from_secs(1)).unwrap();
        rec.on_response(0, 1_100_000_000, 1_100_000_000, 1_103_000_000, 200);
        rec.on_response(0, 1_200_000_000, 1_200_000_000, 1_205_000_000, 200);
        log.append(&plan, &rec, Duration::from_secs(2)).unwrap();
        // Nothing new in the third second; the end brings step 2's first answer.
        log.append(&plan, &rec, Duration::from_secs(3)).unwrap();
        rec.on_response(1, 2_100_000_000, 2_100_000_000, 2_101_000_000, 200);
        log.append(&plan, &rec, Duration::from_millis(3_500)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let starts: Vec<&str> = text.lines().filter(|l| l.starts_with("Tag=step_1,")).map(|l| &l[11..22]).collect();
        assert_eq!(starts, ["0.000,1.000", "1.000,1.000"], "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("Tag=step_2,")).count(), 1);
        assert_eq!(text.matches("#[StartTime").count(), 1, "one header");
        assert_eq!(log.bytes, text.len() as u64);
        let back = read(&path).unwrap();
        assert_eq!(back["step_1"].len(), 3);
        assert_eq!(back["step_1"].max(), rec.phases[0].latency.max());
        assert_eq!(back["step_2"].len(), 1);
        assert_eq!(back["step_1.service"].len(), 3);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn base64_decode(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(text).unwrap()
    }
}
