//! The HDR interval log: each phase's histograms in the standard HdrHistogram log format
//! (V2 deflate encoding), so HistogramLogProcessor, HdrHistogram's plotter or any other
//! reader can re-cut them. One interval per phase and histogram, tagged
//! `<phase>` (corrected latency), `<phase>.service` (uncorrected) and `<phase>.send_lag`.
//! Values are microseconds; the max column is divided by 1000 (milliseconds).

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
    let fail = |e: std::io::Error| OutputError::new(path, e);
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .add_comment(&format!("loader {} interval log: {url}", env!("CARGO_PKG_VERSION")))
            .add_comment("values in microseconds; one interval per phase; tags: PHASE, PHASE.service, PHASE.send_lag")
            .with_start_time(started)
            .with_base_time(started)
            .with_max_value_divisor(1000.0)
            .begin_log_with(&mut out, &mut serializer)
            .map_err(fail)?;
        for phase in phases {
            for (suffix, h) in SUFFIXES.iter().zip(phase.histograms) {
                let tag = format!("{}{suffix}", phase.tag);
                log.write_histogram(h, phase.start, phase.duration.max(Duration::from_millis(1)), Tag::new(&tag))
                    .map_err(|e| fail(std::io::Error::other(format!("cannot encode histogram {tag}: {e}"))))?;
            }
        }
    }
    std::fs::File::create(path).and_then(|mut file| file.write_all(&out)).map_err(fail)
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

    #[test]
    fn log_round_trips_every_phase() {
        let args = RunArgs {
            url: Some("http://127.0.0.1:9/".into()),
            steps: Some(vec![10.0, 20.0]),
            hold: Some("1s".into()),
            ..Default::default()
        };
        let spec = Spec::from_run_args(&args).unwrap();
        let plan = Plan::resolve(&spec, "http://127.0.0.1:9/").unwrap();
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

    fn base64_decode(text: &str) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(text).unwrap()
    }
}
