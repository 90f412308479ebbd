//! The send schedule: the intended send time of every request, computed, never discovered.
//!
//! Request `i` of a phase with rate `r` starting at `s` is due at `s + i / r` — wrk2's
//! absolute schedule — so a slow response or a late wake-up never shifts later requests.
//! A run with `n` shards gives shard `k` every request with `i % n == k`: the shards
//! together send exactly the planned sequence, and each one's share is evenly spread.
//!
//! This module is pure (no clock, no I/O); the engine asks it what is due next.

/// One phase as the schedule needs it: a window of the run and a constant rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Start, in nanoseconds from the run's start instant.
    pub start_ns: u64,
    /// End (exclusive), in nanoseconds from the run's start instant.
    pub end_ns: u64,
    /// Arrival rate over the window, requests per second (> 0).
    pub rate: f64,
}

impl Window {
    /// Number of requests due in this window across all shards: every `i` with
    /// `start + i/rate < end`.
    pub fn planned(&self) -> u64 {
        let span_s = (self.end_ns - self.start_ns) as f64 / 1e9;
        let n = (span_s * self.rate).ceil() as u64;
        // Guard the float edge: the last request must still start before `end`.
        if n > 0 && self.intended_ns(n - 1) >= self.end_ns { n - 1 } else { n }
    }

    /// Intended send time of the window's request `i`.
    pub fn intended_ns(&self, i: u64) -> u64 {
        self.start_ns + (i as f64 * 1e9 / self.rate) as u64
    }
}

/// A request that is due: when it should be sent, and the phase it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Intended send time, nanoseconds from the run's start.
    pub intended_ns: u64,
    /// Index of the phase (window) it belongs to.
    pub phase: usize,
    /// Its index within the phase across all shards (`i` in `start + i / rate`).
    pub index: u64,
}

/// One shard's share of the schedule, walked in order.
#[derive(Debug, Clone)]
pub struct ShardSchedule {
    windows: Vec<Window>,
    planned: Vec<u64>,
    shard: u64,
    shards: u64,
    phase: usize,
    /// Next global index (within `phase`) that belongs to this shard.
    index: u64,
}

impl ShardSchedule {
    /// Shard `shard` of `shards` over `windows` (in time order).
    pub fn new(windows: Vec<Window>, shard: usize, shards: usize) -> Self {
        assert!(shards > 0 && shard < shards, "shard {shard} of {shards}");
        let planned = windows.iter().map(Window::planned).collect();
        let mut s = ShardSchedule {
            windows,
            planned,
            shard: shard as u64,
            shards: shards as u64,
            phase: 0,
            index: shard as u64,
        };
        s.skip_exhausted();
        s
    }

    fn skip_exhausted(&mut self) {
        while self.phase < self.windows.len() && self.index >= self.planned[self.phase] {
            self.phase += 1;
            self.index = self.shard;
        }
    }

    /// The next request of this shard, if any remain.
    #[inline]
    pub fn peek(&self) -> Option<Due> {
        let w = self.windows.get(self.phase)?;
        Some(Due { intended_ns: w.intended_ns(self.index), phase: self.phase, index: self.index })
    }

    /// Move past the request `peek` returned.
    #[inline]
    pub fn advance(&mut self) {
        self.index += self.shards;
        self.skip_exhausted();
    }

    /// Requests of this shard due in phase `phase`.
    pub fn planned_in(&self, phase: usize) -> u64 {
        let total = self.planned[phase];
        if total > self.shard { (total - self.shard).div_ceil(self.shards) } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win(start_s: f64, end_s: f64, rate: f64) -> Window {
        Window { start_ns: (start_s * 1e9) as u64, end_ns: (end_s * 1e9) as u64, rate }
    }

    fn drain(mut s: ShardSchedule) -> Vec<Due> {
        let mut out = Vec::new();
        while let Some(d) = s.peek() {
            out.push(d);
            s.advance();
        }
        out
    }

    #[test]
    fn constant_rate_is_evenly_spaced_and_exact_in_count() {
        let w = win(0.0, 10.0, 2000.0);
        assert_eq!(w.planned(), 20_000);
        let all = drain(ShardSchedule::new(vec![w], 0, 1));
        assert_eq!(all.len(), 20_000);
        assert_eq!(all[0].intended_ns, 0);
        assert_eq!(all[1].intended_ns, 500_000);
        assert_eq!(all[19_999].intended_ns, 9_999_500_000);
    }

    #[test]
    fn shards_partition_the_global_sequence() {
        let windows = vec![win(0.0, 1.0, 1000.0), win(1.0, 2.5, 333.0)];
        let whole = drain(ShardSchedule::new(windows.clone(), 0, 1));
        let mut merged: Vec<Due> = (0..3).flat_map(|k| drain(ShardSchedule::new(windows.clone(), k, 3))).collect();
        merged.sort_by_key(|d| (d.intended_ns, d.phase, d.index));
        assert_eq!(merged, whole);
        for k in 0..3 {
            let s = ShardSchedule::new(windows.clone(), k, 3);
            let n = drain(s.clone()).iter().filter(|d| d.phase == 1).count() as u64;
            assert_eq!(s.planned_in(1), n, "shard {k}");
        }
    }

    #[test]
    fn fractional_rates_never_spill_past_the_window() {
        let w = win(2.0, 3.0, 3.3);
        let all = drain(ShardSchedule::new(vec![w], 0, 1));
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|d| d.intended_ns < w.end_ns));
    }

    #[test]
    fn a_shard_with_no_share_is_empty() {
        let w = win(0.0, 1.0, 1.0);
        assert!(ShardSchedule::new(vec![w], 1, 2).peek().is_none());
    }
}
