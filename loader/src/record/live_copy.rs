//! What a shard hands over, at most every [`LIVE_COPY_PERIOD_NS`], for the live metrics
//! endpoint (`--metrics`): per phase, its counts and copies of its corrected-latency and
//! send-lag histograms.
//!
//! The shard records exactly as without it; the copy is taken by the shard itself at the end
//! of a turn (never per request), only of the phases that changed since the last copy, into
//! buffers it reuses (`Histogram::set_to` of same-shaped histograms is a `memcpy`). The main
//! thread takes the fresh copies under the same lock; when it holds the lock the shard simply
//! tries again on its next turn (`try_lock`), so the shard never waits.
//!
//! Not here: turning the copies into metrics (`report::metrics`), the exact final values
//! (they come from the merged [`ShardRecord`], the source of `summary.json`).

use std::sync::{Mutex, TryLockError};

use hdrhistogram::Histogram;

use super::{ErrorClass, PhaseRecord, ShardRecord, histogram};

/// How often a shard copies its phases for the live metrics, at most: the endpoint's counts
/// then trail the shards by about this (the main thread takes the copies as often), so a
/// scrape sees the run within a fifth of a second and the final values add no jump a
/// `rate()` can see. (Once a second, the counts trailed by up to 2 s and the last values
/// landed in one jump: a +25 % spike in `rate()` at the end of every run.) Two histogram
/// copies per moving phase, 10 times a second: a few hundred KiB memcpy.
pub const LIVE_COPY_PERIOD_NS: u64 = 100_000_000;

/// One phase of one shard, as it was at its last copy.
#[derive(Debug, Clone)]
pub struct PhaseCopy {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered 2xx/3xx.
    pub ok: u64,
    /// Failed requests by [`ErrorClass`].
    pub errors: [u64; ErrorClass::COUNT],
    /// Sends more than [`super::LATE_NS`] behind schedule.
    pub late: u64,
    /// Of those, sends that did not wait for a connection (the loader itself was late).
    pub late_unpooled: u64,
    /// Sends that left before their intended time (the send-ahead window).
    pub sent_ahead: u64,
    /// Completion − intended send time, µs.
    pub latency: Histogram<u64>,
    /// Actual send − intended send time, µs.
    pub send_lag: Histogram<u64>,
    /// Not yet taken by the main thread.
    pub fresh: bool,
}

impl PhaseCopy {
    fn new() -> Self {
        PhaseCopy {
            sent: 0,
            ok: 0,
            errors: [0; ErrorClass::COUNT],
            late: 0,
            late_unpooled: 0,
            sent_ahead: 0,
            latency: histogram(),
            send_lag: histogram(),
            fresh: false,
        }
    }

    /// Whether `p` moved since this copy (sends and finished requests only grow).
    fn is_behind(&self, p: &PhaseRecord) -> bool {
        self.sent != p.sent || self.ok + self.errors.iter().sum::<u64>() != p.finished()
    }

    fn fill_from(&mut self, p: &PhaseRecord) {
        self.sent = p.sent;
        self.ok = p.ok;
        self.errors = p.errors;
        self.late = p.late;
        self.late_unpooled = p.late_unpooled;
        self.sent_ahead = p.sent_ahead;
        // Same bounds on both sides: a reset and a copy of the counts array, no allocation.
        self.latency.set_to(&p.latency).expect("same bounds");
        self.send_lag.set_to(&p.send_lag).expect("same bounds");
        self.fresh = true;
    }
}

/// The hand-over point between one shard and the main thread.
#[derive(Debug, Default)]
pub struct LiveCopies {
    /// Per phase of the plan, its last copy (`None` until the phase first moves).
    phases: Mutex<Vec<Option<PhaseCopy>>>,
}

impl LiveCopies {
    /// Shard side: copy the phases of `record` that moved since their last copy. Returns
    /// `false`, having done nothing, when the main thread holds the lock (try next turn).
    pub fn copy_from(&self, record: &ShardRecord) -> bool {
        let mut phases = match self.phases.try_lock() {
            Ok(p) => p,
            Err(TryLockError::WouldBlock) => return false,
            // The main thread panicked while holding it: nobody reads the copies any more.
            Err(TryLockError::Poisoned(_)) => return true,
        };
        if phases.len() < record.phases.len() {
            phases.resize(record.phases.len(), None);
        }
        for (slot, p) in phases.iter_mut().zip(&record.phases) {
            // A phase gets its buffers once it first moves; one that never runs costs nothing.
            let moved = slot.as_ref().map_or(p.sent + p.finished() > 0, |c| c.is_behind(p));
            if moved {
                slot.get_or_insert_with(PhaseCopy::new).fill_from(p);
            }
        }
        true
    }

    /// Main-thread side: call `take` with each fresh copy (phase index, copy), marking it
    /// taken. A poisoned lock (a shard panicked) reads as no news.
    pub fn take_fresh(&self, mut take: impl FnMut(usize, &PhaseCopy)) {
        let Ok(mut phases) = self.phases.lock() else { return };
        for (i, slot) in phases.iter_mut().enumerate() {
            if let Some(c) = slot.as_mut().filter(|c| c.fresh) {
                take(i, c);
                c.fresh = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Window;

    #[test]
    fn copies_only_moved_phases_and_hands_each_copy_over_once() {
        let windows =
            vec![Window::constant(0, 1_000_000_000, 10.0), Window::constant(1_000_000_000, 2_000_000_000, 10.0)];
        let mut r = ShardRecord::new(windows, 2);
        let copies = LiveCopies::default();
        r.on_send(1, 1_000_000_000, 1_020_000_000, 0, false, 1);
        r.on_response(1, 1_000_000_000, 1_020_000_000, 1_030_000_000, 200);
        assert!(copies.copy_from(&r));
        let mut seen = Vec::new();
        copies.take_fresh(|i, c| seen.push((i, c.sent, c.ok, c.late, c.latency.len())));
        assert_eq!(seen, vec![(1, 1, 1, 1, 1)], "phase 0 never moved: no copy");
        copies.take_fresh(|i, _| panic!("phase {i} handed over twice"));
        r.on_failure(1, 1_000_000_000, 1_100_000_000, ErrorClass::Timeout, "late".into());
        assert!(copies.copy_from(&r));
        let mut errors = 0;
        copies.take_fresh(|_, c| errors = c.errors[ErrorClass::Timeout as usize]);
        assert_eq!(errors, 1);
    }
}
