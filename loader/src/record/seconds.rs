//! [`SecondLatency`]: one second's latency distribution, small enough to keep one per second
//! of the run in every shard — log-linear buckets (8 per doubling, each at most 12.5 % wide)
//! of fixed size, no allocation, `Copy`, merged by adding. Its percentiles are bucket
//! midpoints (within ±6.25 %); the maximum is exact. It serves the per-second latency chart;
//! the phases' own HdrHistograms stay the exact record every judgement uses.

/// Buckets per doubling, as a power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Values below `SUB` µs have a bucket each; each doubling above adds `SUB` buckets, up to
/// 2^32 µs (71 minutes; larger values land in the last bucket).
const BUCKETS: usize = (SUB + (32 - SUB_BITS as u64) * SUB) as usize;

/// The latencies (µs) that completed in one second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecondLatency {
    counts: [u32; BUCKETS],
    /// Largest value, µs (exact; saturates at `u32::MAX`).
    max_us: u32,
}

impl Default for SecondLatency {
    fn default() -> Self {
        SecondLatency { counts: [0; BUCKETS], max_us: 0 }
    }
}

/// The bucket of `us`.
fn bucket(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let exp = 63 - us.leading_zeros(); // ≥ SUB_BITS
    let shift = exp - SUB_BITS;
    let index = (u64::from(shift) + 1) * SUB + ((us >> shift) - SUB);
    (index as usize).min(BUCKETS - 1)
}

/// The lowest value of bucket `i` and its width.
fn bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, 1);
    }
    let shift = i / SUB - 1;
    ((SUB + i % SUB) << shift, 1 << shift)
}

impl SecondLatency {
    /// Count one latency of `us` microseconds.
    #[inline]
    pub fn record(&mut self, us: u64) {
        let slot = &mut self.counts[bucket(us)];
        *slot = slot.saturating_add(1);
        self.max_us = self.max_us.max(u32::try_from(us).unwrap_or(u32::MAX));
    }

    /// Add another shard's same second.
    pub fn merge(&mut self, other: &SecondLatency) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// Largest value, µs.
    pub fn max_us(&self) -> u64 {
        u64::from(self.max_us)
    }

    /// The value at quantile `q` (0–1), µs: the midpoint of its bucket, never above the
    /// maximum; `None` when the second has no values.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                let (low, width) = bounds(i);
                return Some((low as f64 + (width as f64 - 1.0) / 2.0).min(self.max_us as f64));
            }
        }
        Some(self.max_us as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_and_within_an_eighth() {
        let mut last = 0;
        for us in (0..100_000u64).chain([1 << 31, (1 << 32) - 1, 1 << 40, u64::MAX]) {
            let b = bucket(us);
            assert!(b >= last || us > 100_000, "monotone at {us}");
            last = b;
            if us < 1 << 32 {
                let (low, width) = bounds(b);
                assert!(low <= us && us < low + width, "{us} in [{low}, +{width})");
                assert!(width == 1 || (width as f64) <= low as f64 / 8.0 + 1.0, "{us}: width {width} at {low}");
            } else {
                assert_eq!(b, BUCKETS - 1);
            }
        }
    }

    #[test]
    fn percentiles_are_close_and_the_max_is_exact() {
        let mut s = SecondLatency::default();
        assert_eq!(s.quantile_us(0.5), None);
        for us in 1..=10_000u64 {
            s.record(us);
        }
        s.record(123_457);
        let p50 = s.quantile_us(0.5).unwrap();
        assert!((p50 - 5000.0).abs() / 5000.0 < 0.07, "p50 {p50}");
        let p99 = s.quantile_us(0.99).unwrap();
        assert!((p99 - 9900.0).abs() / 9900.0 < 0.07, "p99 {p99}");
        assert_eq!(s.max_us(), 123_457);
        assert_eq!(s.quantile_us(1.0), Some(123_457.0), "the top bucket's midpoint is capped by the max");
        assert_eq!(s.count(), 10_001);
    }

    #[test]
    fn merging_adds_counts_and_keeps_the_larger_max() {
        let (mut a, mut b) = (SecondLatency::default(), SecondLatency::default());
        a.record(100);
        b.record(200);
        b.record(90_000);
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.max_us(), 90_000);
    }
}
