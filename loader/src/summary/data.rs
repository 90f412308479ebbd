//! What a data-driven run (`--data`) sent: how many distinct rows, and how hot the hottest.

use serde::{Deserialize, Serialize};

use crate::scenario::DataSpec;

/// The data file's rows as the run used them.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DataSummary {
    /// The file.
    pub file: String,
    /// Its rows.
    pub rows: u64,
    /// Its columns, in order.
    pub columns: Vec<String>,
    /// How rows were drawn: `seq`, `uniform` or `zipf:S`.
    pub distribution: String,
    /// Seed of the draws (`--seed` repeats them).
    pub seed: u64,
    /// Sends filled from a row.
    pub sent: u64,
    /// Rows sent at least once.
    pub distinct_sent: u64,
    /// The most-sent row (1-based, in file order).
    pub hottest_row: u64,
    /// That row's first column.
    pub hottest_key: String,
    /// Its share of `sent`.
    pub hottest_share: f64,
    /// The share the distribution gives the hottest row (Zipf: 1 / Σ k^-s over the rows).
    pub expected_hottest_share: f64,
}

/// From the plan's data file and the sends per row.
pub fn of(data: &DataSpec, sends: &[u32]) -> DataSummary {
    let sent: u64 = sends.iter().map(|&n| u64::from(n)).sum();
    let (hottest, most) = sends.iter().enumerate().max_by_key(|&(i, &n)| (n, std::cmp::Reverse(i))).unwrap_or((0, &0));
    DataSummary {
        file: data.path.display().to_string(),
        rows: data.rows.len() as u64,
        columns: data.columns.clone(),
        distribution: data.dist.to_string(),
        seed: data.seed,
        sent,
        distinct_sent: sends.iter().filter(|&&n| n > 0).count() as u64,
        hottest_row: hottest as u64 + 1,
        hottest_key: data.rows.get(hottest).and_then(|r| r.first()).cloned().unwrap_or_default(),
        hottest_share: if sent == 0 { 0.0 } else { f64::from(*most) / sent as f64 },
        expected_hottest_share: data.dist.hottest_share(data.rows.len()),
    }
}

impl DataSummary {
    /// One line for the text report.
    pub fn line(&self) -> String {
        format!(
            "data: {} ({} rows, {}, seed {}): {} distinct rows sent of {}; hottest row {} ({}) {:.2} % of sends (expected {:.2} %)",
            self.file,
            self.rows,
            self.distribution,
            self.seed,
            self.distinct_sent,
            self.rows,
            self.hottest_row,
            self.hottest_key,
            self.hottest_share * 100.0,
            self.expected_hottest_share * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::keys::KeyDist;

    #[test]
    fn distinct_rows_and_the_hottest_share() {
        let d = DataSpec {
            path: "k.csv".into(),
            columns: vec!["id".into()],
            rows: std::sync::Arc::new(vec![vec!["a".into()], vec!["b".into()], vec!["c".into()]]),
            dist: KeyDist::Zipf(1.0),
            seed: 3,
        };
        let s = of(&d, &[2, 6, 0]);
        assert_eq!((s.sent, s.distinct_sent, s.hottest_row, s.hottest_key.as_str()), (8, 2, 2, "b"));
        assert_eq!(s.hottest_share, 0.75);
        assert!((s.expected_hottest_share - 1.0 / (1.0 + 0.5 + 1.0 / 3.0)).abs() < 1e-12);
        assert!(s.line().contains("2 distinct rows sent of 3; hottest row 2 (b) 75.00 %"), "{}", s.line());
    }
}
