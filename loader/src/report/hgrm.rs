//! Per-phase percentile distributions in HdrHistogram's text format (`.hgrm`), as wrk2 prints
//! with `--latency` and `Histogram.outputPercentileDistribution` writes: the file HdrHistogram's
//! online plotter and its `HistogramLogProcessor` users already read. One file per phase and
//! clock, `hgrm/<phase>.latency.hgrm` (corrected: from the intended send time) and
//! `hgrm/<phase>.service.hgrm` (from the actual send), values in milliseconds.

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;

use crate::error::OutputError;
use crate::record::ShardRecord;
use crate::scenario::Plan;

/// Percentile ticks per half distance to 100 %, as HdrHistogram's default printer uses.
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Recorded values are microseconds; the files say milliseconds.
const US_PER_MS: f64 = 1000.0;

/// `h`'s percentile distribution in the `.hgrm` text format, values divided by `scale`.
pub fn percentile_distribution(h: &Histogram<u64>, scale: f64) -> String {
    let digits = usize::from(h.sigfig());
    let mut out = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    if !h.is_empty() {
        let mut total = 0u64;
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / scale;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(out, "{value:12.digits$} {q:2.12} {total:10} {:14.2}", 1.0 / (1.0 - q));
            } else {
                let _ = writeln!(out, "{value:12.digits$} {q:2.12} {total:10}");
            }
        }
    }
    let (mean, stdev) = if h.is_empty() { (0.0, 0.0) } else { (h.mean() / scale, h.stdev() / scale) };
    let max = if h.is_empty() { 0.0 } else { h.max() as f64 / scale };
    // HdrHistogram's sub-bucket count: 2 × 10^digits rounded up to a power of two.
    let sub_buckets = (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two();
    let _ = writeln!(out, "#[Mean    = {mean:12.digits$}, StdDeviation   = {stdev:12.digits$}]");
    let _ = writeln!(out, "#[Max     = {max:12.digits$}, Total count    = {:12}]", h.len());
    let _ = writeln!(out, "#[Buckets = {:12}, SubBuckets     = {sub_buckets:12}]", h.buckets());
    out
}

/// A phase name as a file name (no path separators, spaces or commas).
pub(crate) fn file_stem(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// Write every phase's corrected latency and service time distributions under `dir/hgrm/`.
pub fn write(dir: &Path, plan: &Plan, record: &ShardRecord) -> Result<(), OutputError> {
    let dir = dir.join("hgrm");
    std::fs::create_dir_all(&dir).map_err(|e| OutputError::new(&dir, e))?;
    for (phase, rec) in plan.phases.iter().zip(&record.phases) {
        for (clock, h) in [("latency", &rec.latency), ("service", &rec.service)] {
            let path = dir.join(format!("{}.{clock}.hgrm", file_stem(&phase.name)));
            std::fs::write(&path, percentile_distribution(h, US_PER_MS)).map_err(|e| OutputError::new(&path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_distribution_reads_like_hdrhistograms_own() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for us in 1..=10_000u64 {
            h.record(us).unwrap();
        }
        let text = percentile_distribution(&h, 1000.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
        );
        assert_eq!(lines[1], "");
        let rows: Vec<Vec<&str>> =
            lines.iter().skip(2).take_while(|l| !l.starts_with('#')).map(|l| l.split_whitespace().collect()).collect();
        // Values and counts rise; percentiles rise to exactly 1 on the last row, which has no
        // 1/(1-p) column; the last count is the total.
        let values: Vec<f64> = rows.iter().map(|r| r[0].parse().unwrap()).collect();
        let quantiles: Vec<f64> = rows.iter().map(|r| r[1].parse().unwrap()).collect();
        let counts: Vec<u64> = rows.iter().map(|r| r[2].parse().unwrap()).collect();
        assert!(values.windows(2).all(|w| w[0] <= w[1]));
        assert!(quantiles.windows(2).all(|w| w[0] <= w[1]));
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*quantiles.last().unwrap(), 1.0);
        assert_eq!(rows.last().unwrap().len(), 3);
        assert!(rows[..rows.len() - 1].iter().all(|r| r.len() == 4));
        assert_eq!(*counts.last().unwrap(), 10_000);
        // The median is 5 ms (5,000 µs) to 3 significant digits.
        let median = rows.iter().find(|r| r[1].parse::<f64>().unwrap() >= 0.5).unwrap()[0].parse::<f64>().unwrap();
        assert!((median - 5.0).abs() <= 0.01, "median {median}");
        // Max is reported as its highest equivalent value, as HdrHistogram does.
        assert!(text.contains("#[Max     =       10.007, Total count    =        10000]"), "{text}");
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
    }

    #[test]
    fn an_empty_histogram_has_a_header_and_a_zero_footer() {
        let h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        let text = percentile_distribution(&h, 1000.0);
        assert!(text.contains("Total count    =            0]"), "{text}");
        assert_eq!(text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count(), 1, "header only");
    }
}
