//! Latency histograms read from the kernel: the per-CPU `hist` arrays of `probes_ebpf`
//! (log2-linear ns buckets, four per power of two, plus sum and max) summed into one
//! [`LatencyHistogram`], and quantiles from it.
//!
//! Owns: summing per-CPU slots, bucket arithmetic, quantile estimates, differences between two
//! readings (per-interval values). Does not: read maps (the probe readers do), judge values.
//!
//! Precision: a quantile is reported as the midpoint of the bucket it falls in, so it is
//! within ±12.5 % of the true value (bucket width ≤ 25 % of its lower bound); `max` is exact.

use aya::maps::{MapData, MapError, PerCpuArray};
use probes_ebpf::hist;
use serde::Serialize;

/// A latency distribution, cumulative since the probes started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LatencyHistogram {
    /// Non-empty buckets as `(low_ns, high_ns, count)`, ascending; a value `v` is in the bucket
    /// with `low_ns <= v < high_ns`.
    pub buckets: Vec<(u64, u64, u64)>,
    /// Number of values recorded.
    pub count: u64,
    /// Sum of all values, ns (for the mean).
    pub sum_ns: u64,
    /// Largest value, ns (exact).
    pub max_ns: u64,
}

impl LatencyHistogram {
    /// Sum the per-CPU slots of a `hist`-layout array.
    pub(crate) fn read(map: &PerCpuArray<MapData, u64>) -> Result<Self, MapError> {
        let all = super::counters::read_slots(map, hist::SLOTS)?;
        let counts: Vec<u64> = (0..hist::BUCKETS).map(|index| super::counters::sum(all.slot(index))).collect();
        let sum_ns = all.slot(hist::SUM).iter().fold(0u64, |t, &n| t.wrapping_add(n));
        let max_ns = all.slot(hist::MAX).iter().copied().max().unwrap_or(0);
        Ok(Self::from_counts(&counts, sum_ns, max_ns))
    }

    /// A histogram from bucket counts indexed like the kernel's.
    pub(crate) fn from_counts(counts: &[u64], sum_ns: u64, max_ns: u64) -> Self {
        let buckets: Vec<_> = (0u32..)
            .zip(counts)
            .filter(|&(_, &n)| n > 0)
            .map(|(index, &n)| {
                let (low, high) = hist::bounds(index);
                (low, high, n)
            })
            .collect();
        let count = buckets.iter().map(|b| b.2).sum();
        LatencyHistogram { buckets, count, sum_ns, max_ns }
    }

    /// The value at quantile `q` (0..=1), ns: the midpoint of the bucket holding it, capped
    /// by the exact max. `None` when empty.
    pub fn quantile_ns(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        // The rank of the q-th value, 1-based, as HdrHistogram: ceil(q * count), at least 1.
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for &(low, high, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                let mid = (low as f64 + high as f64) / 2.0;
                return Some(mid.min(self.max_ns as f64).max(low as f64));
            }
        }
        Some(self.max_ns as f64)
    }

    /// Mean, ns; `None` when empty.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64)
    }

    /// Quantile `q` in milliseconds.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        self.quantile_ns(q).map(|ns| ns / 1e6)
    }

    /// Quantile `q` in microseconds.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        self.quantile_ns(q).map(|ns| ns / 1e3)
    }

    /// Median in ms.
    pub fn p50_ms(&self) -> Option<f64> {
        self.quantile_ms(0.50)
    }

    /// 99th percentile in ms.
    pub fn p99_ms(&self) -> Option<f64> {
        self.quantile_ms(0.99)
    }

    /// Max in ms; `None` when empty.
    pub fn max_ms(&self) -> Option<f64> {
        (self.count > 0).then(|| self.max_ns as f64 / 1e6)
    }

    /// Median in µs.
    pub fn p50_us(&self) -> Option<f64> {
        self.quantile_us(0.50)
    }

    /// 99th percentile in µs.
    pub fn p99_us(&self) -> Option<f64> {
        self.quantile_us(0.99)
    }

    /// Max in µs; `None` when empty.
    pub fn max_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.max_ns as f64 / 1e3)
    }

    /// What was recorded after `earlier` (a reading of the same histogram): bucket counts and
    /// sum subtracted. The max of an interval is not known from two cumulative readings; it is
    /// bounded by the top of the highest bucket that grew (and by the cumulative max).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut counts = vec![0u64; hist::BUCKETS as usize];
        for &(low, _, n) in &self.buckets {
            counts[hist::index(low) as usize] = n;
        }
        for &(low, _, n) in &earlier.buckets {
            let slot = &mut counts[hist::index(low) as usize];
            *slot = slot.saturating_sub(n);
        }
        let top = (0u32..).zip(&counts).filter(|&(_, &n)| n > 0).map(|(i, _)| hist::bounds(i).1 - 1).last();
        let max_ns = top.map_or(0, |top| top.min(self.max_ns));
        Self::from_counts(&counts, self.sum_ns.wrapping_sub(earlier.sum_ns), max_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram_of(values: &[u64]) -> LatencyHistogram {
        let mut counts = vec![0u64; hist::BUCKETS as usize];
        for &v in values {
            counts[hist::index(v) as usize] += 1;
        }
        LatencyHistogram::from_counts(&counts, values.iter().sum(), values.iter().copied().max().unwrap_or(0))
    }

    #[test]
    fn quantiles_are_within_the_bucket_precision() {
        // 1..=1000 µs in ns.
        let values: Vec<u64> = (1..=1000).map(|us| us * 1000).collect();
        let h = histogram_of(&values);
        assert_eq!(h.count, 1000);
        for (q, exact) in [(0.5, 500_000.0), (0.99, 990_000.0)] {
            let got = h.quantile_ns(q).unwrap();
            assert!((got - exact).abs() / exact <= 0.125, "q{q}: {got} vs {exact}");
        }
        assert_eq!(h.max_us(), Some(1000.0));
        assert_eq!(h.quantile_ns(1.0), Some(1_000_000.0_f64.min(h.quantile_ns(1.0).unwrap())));
        assert_eq!(LatencyHistogram::default().p99_ms(), None);
    }

    #[test]
    fn since_subtracts_an_earlier_reading() {
        let early = histogram_of(&[1_000, 2_000]);
        let late = histogram_of(&[1_000, 2_000, 50_000, 60_000]);
        let delta = late.since(&early);
        assert_eq!(delta.count, 2);
        assert_eq!(delta.sum_ns, 110_000);
        assert!(delta.quantile_ns(0.0).unwrap() >= 40_000.0);
        assert!(delta.max_ns <= 60_000 && delta.max_ns >= 57_344, "{}", delta.max_ns);
    }
}
