//! The percentile spectrum's data: each hold phase's `.hgrm` files (written by
//! [`crate::report::hgrm`] next to the summary) read back as (percentile, value) points, for
//! corrected latency and for service time. A missing or unreadable file leaves its phase out;
//! the chart says so. Drawing is `charts.rs`.

use std::path::Path;

use crate::summary::Summary;

/// One phase's two distributions, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseSpectrum {
    /// Phase name.
    pub phase: String,
    /// Latency from the intended send time: (percentile 0–1, value).
    pub latency: Vec<(f64, f64)>,
    /// Service time, from the actual send.
    pub service: Vec<(f64, f64)>,
}

/// Rows kept per distribution: HdrHistogram's printer gives ~10 per halving of the distance
/// to 100 %, so a few hundred at most; this bounds a hostile file.
const MAX_ROWS: usize = 2000;

/// The (percentile, value) rows of an `.hgrm` text, below 100 % (the plot's x is
/// 1/(1−p), infinite at 100 %). Lines that do not parse are skipped.
pub fn parse_hgrm(text: &str) -> Vec<(f64, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let value: f64 = cols.next()?.parse().ok()?;
            let q: f64 = cols.next()?.parse().ok()?;
            (value.is_finite() && (0.0..1.0).contains(&q)).then_some((q, value))
        })
        .take(MAX_ROWS)
        .collect()
}

/// The hold phases' spectra from `dir/hgrm/` (all phases when the run has no hold phase).
pub fn read(dir: &Path, s: &Summary) -> Vec<PhaseSpectrum> {
    let holds = s.phases.iter().any(|p| p.kind == "hold");
    s.phases
        .iter()
        .filter(|p| !holds || p.kind == "hold")
        .filter_map(|p| {
            let stem = crate::report::hgrm::file_stem(&p.name);
            let load = |clock: &str| {
                std::fs::read_to_string(dir.join("hgrm").join(format!("{stem}.{clock}.hgrm")))
                    .ok()
                    .map(|t| parse_hgrm(&t))
            };
            let latency = load("latency")?;
            let service = load("service").unwrap_or_default();
            (!latency.is_empty()).then(|| PhaseSpectrum { phase: p.name.clone(), latency, service })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_below_one_hundred_percent_are_read_and_the_rest_skipped() {
        let text = "       Value     Percentile TotalCount 1/(1-Percentile)\n\n\
                    \x20      0.105 0.000000000000          1           1.00\n\
                    \x20      0.200 0.500000000000         50           2.00\n\
                    \x20      9.000 0.990000000000         99         100.00\n\
                    \x20     12.000 1.000000000000        100\n\
                    #[Mean    =        0.500, StdDeviation   =        1.000]\n\
                    garbage line\n";
        assert_eq!(parse_hgrm(text), [(0.0, 0.105), (0.5, 0.2), (0.99, 9.0)]);
        assert!(parse_hgrm("").is_empty());
        assert!(parse_hgrm("NaN 0.5 1\ninf 0.5 1\n1 nan 1\n").is_empty());
    }

    #[test]
    fn a_hostile_file_is_bounded() {
        let text = "1.0 0.5 1\n".repeat(MAX_ROWS * 3);
        assert_eq!(parse_hgrm(&text).len(), MAX_ROWS);
    }
}
